"""Lesson 13's exercise checks, run on real ranks: right answers pass, each planted mistake gets its own hint."""

import torch
import torch.distributed as dist
import torch.distributed as tdist

from attention_helpers.lessons import lesson13 as checks

NOT_ANSWERED = "Not answered yet (the answer is still None).\n"
SCALE = 1.0  # a plain module-level value the answer uses


def verdict(capsys, check, *args):
    result = check(*args)
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return result, out


def average_gradients(model):
    world_size = dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size


def summed_gradients(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)


def first_parameter_only(model):
    p = next(iter(model.parameters()))
    dist.all_reduce(p.grad)
    p.grad /= dist.get_world_size()


def test_average_gradients(capsys):
    assert verdict(capsys, checks.exercise_1, None) == (False, "Exercise 1: " + NOT_ANSWERED)
    ok, out = verdict(capsys, checks.exercise_1, average_gradients)
    assert ok and out.startswith("Exercise 1: correct")
    for wrong, reason in (
        (summed_gradients, "the sum over the ranks, not the mean"),
        (first_parameter_only, "parameters' gradients are not the mean"),
        (lambda model: None, "still those of its own share"),
    ):
        ok, out = verdict(capsys, checks.exercise_1, wrong)
        assert not ok and "not yet" in out and reason in out and "Hint: " in out, out


# A correct answer written as a lambda: a rank receives its compiled code, the names it uses with it.
mean_by_lambda = lambda model: [  # noqa: E731 (the form a learner wrote)
    tdist.all_reduce(p.grad) or p.grad.div_(tdist.get_world_size() * SCALE) for p in model.parameters()
]


def test_a_correct_answer_written_as_a_lambda_is_accepted(capsys):
    ok, out = verdict(capsys, checks.exercise_1, mean_by_lambda)
    assert ok and out.startswith("Exercise 1: correct"), out
    ok, out = verdict(capsys, checks.exercise_1, lambda model: [tdist.all_reduce(p.grad) for p in model.parameters()])
    assert not ok and "the sum over the ranks, not the mean" in out, out


def test_gradients_left_alone_are_named(capsys):
    def do_nothing(model):
        return model

    ok, out = verdict(capsys, checks.exercise_1, do_nothing)
    assert not ok and "still those of its own share" in out


def halved(model):
    """Right on 2 ranks only: the mean is the sum divided by the number of ranks, not by 2."""
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad *= 0.5


def uses_an_alias_and_a_helper(model):
    for p in model.parameters():
        _mean_over_ranks(p.grad)


def _mean_over_ranks(tensor):
    tdist.all_reduce(tensor)
    tensor /= tdist.get_world_size() * SCALE


def test_a_divide_by_two_is_refused_on_three_ranks_and_aliases_and_helpers_work(capsys):
    ok, out = verdict(capsys, checks.exercise_1, halved)
    assert not ok and "divided by 2, not by the number of ranks" in out and "on 3 ranks" in out, out
    ok, out = verdict(capsys, checks.exercise_1, uses_an_alias_and_a_helper)
    assert ok and out == "Exercise 1: correct: on 2 and 3 ranks, every gradient equals the whole batch's.\n", out


def first_hop_only(k_block, v_block):
    """Right on the first hop only: it always passes on the rank's own first blocks, not the ones it was given."""
    global FIRST
    if "FIRST" not in globals():
        FIRST = (k_block, v_block)
    return ring_pass(*FIRST)


def ring_pass(k_block, v_block):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    k_in, v_in = torch.empty_like(k_block), torch.empty_like(v_block)
    nxt, prev = (rank + 1) % world_size, (rank - 1) % world_size
    requests = [dist.isend(k_block, nxt), dist.isend(v_block, nxt), dist.irecv(k_in, prev), dist.irecv(v_in, prev)]
    for request in requests:
        request.wait()
    return k_in, v_in


def backwards_ring(k_block, v_block):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    k_in, v_in = torch.empty_like(k_block), torch.empty_like(v_block)
    nxt, prev = (rank - 1) % world_size, (rank + 1) % world_size
    requests = [dist.isend(k_block, nxt), dist.isend(v_block, nxt), dist.irecv(k_in, prev), dist.irecv(v_in, prev)]
    for request in requests:
        request.wait()
    return k_in, v_in


def blocking_sends_first(k_block, v_block):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    k_in, v_in = torch.empty_like(k_block), torch.empty_like(v_block)
    dist.send(k_block, (rank + 1) % world_size)  # every rank waits here: nobody has posted a receive
    dist.send(v_block, (rank + 1) % world_size)
    dist.recv(k_in, (rank - 1) % world_size)
    dist.recv(v_in, (rank - 1) % world_size)
    return k_in, v_in


def test_ring_pass(capsys, monkeypatch):
    monkeypatch.setattr(checks, "_TIMEOUT", 4.0)  # the deadlocked answer waits this long (15 s in the lesson)
    assert verdict(capsys, checks.exercise_2, None) == (False, "Exercise 2: " + NOT_ANSWERED)
    ok, out = verdict(capsys, checks.exercise_2, ring_pass)
    assert ok and out.startswith("Exercise 2: correct")
    for wrong, reason in (
        (backwards_ring, "the ring turns the wrong way"),
        (first_hop_only, "after hop 2"),
        (blocking_sends_first, "a deadlock"),
    ):
        ok, out = verdict(capsys, checks.exercise_2, wrong)
        assert not ok and "not yet" in out and reason in out and "Hint: " in out, out


def ring_by_all_gather(k_block, v_block):
    """Every rank gathers every block at once and keeps the previous rank's: the right blocks, but not one hop."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    keys, values = (
        [torch.empty_like(k_block) for _ in range(world_size)],
        [torch.empty_like(v_block) for _ in range(world_size)],
    )
    dist.all_gather(keys, k_block.contiguous())
    dist.all_gather(values, v_block.contiguous())
    return keys[(rank - 1) % world_size], values[(rank - 1) % world_size]


def ring_of_the_wrong_arity(k_block):
    return k_block


def test_ring_pass_refuses_a_collective_and_gives_its_own_hint_when_the_answer_raises(capsys):
    for wrong, reason in (
        (ring_by_all_gather, "not dist.all_gather"),
        (ring_of_the_wrong_arity, "your function raised on rank"),
    ):
        ok, out = verdict(capsys, checks.exercise_2, wrong)
        assert not ok and reason in out, out
        hint = out.split("Hint: ")[1]
        assert "next rank" in hint and "gradient" not in hint, "the ring's hint, not the data-parallel one"
