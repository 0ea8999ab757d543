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


def averages_then_steps(model):
    """The mean gradients, and then an SGD step of its own: the weights change, which is the optimizer's job."""
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
        with torch.no_grad():
            p -= 0.1 * p.grad


def mean_gathered(model):
    """Right: every rank's gradients gathered, then their mean."""
    for p in model.parameters():
        shares = [torch.empty_like(p.grad) for _ in range(dist.get_world_size())]
        dist.all_gather(shares, p.grad)
        p.grad = torch.stack(shares).mean(dim=0)


def mean_of_a_flat_copy(model):
    """Right: all gradients in one flat tensor, averaged with one collective, copied back."""
    flat = torch.cat([p.grad.flatten() for p in model.parameters()]) / dist.get_world_size()
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    for p, mean in zip(model.parameters(), flat.split([p.numel() for p in model.parameters()]), strict=True):
        p.grad.copy_(mean.view_as(p.grad))


def test_average_gradients_leaves_the_weights_alone(capsys):
    for right in (mean_gathered, mean_of_a_flat_copy):  # and average_gradients above
        ok, out = verdict(capsys, checks.exercise_1, right)
        assert ok and out.startswith("Exercise 1: correct: on 2 and 3 ranks"), out
    ok, out = verdict(capsys, checks.exercise_1, averages_then_steps)
    assert not ok and "your function changed the model's weights (rank 0) on 2 ranks" in out, out
    assert "the optimizer's step" in out.split("Hint: ")[1], out


def ring_of_three(k_block, v_block):
    """Right on 3 ranks only: the number of ranks is written in."""
    rank = dist.get_rank()
    k_in, v_in = torch.empty_like(k_block), torch.empty_like(v_block)
    requests = [dist.isend(k_block, (rank + 1) % 3), dist.isend(v_block, (rank + 1) % 3)]
    requests += [dist.irecv(k_in, (rank - 1) % 3), dist.irecv(v_in, (rank - 1) % 3)]
    for request in requests:
        request.wait()
    return k_in, v_in


def ring_that_clears_what_it_sent(k_block, v_block):
    """The right blocks received, but the caller's own blocks zeroed once sent."""
    received = ring_pass(k_block, v_block)
    k_block.zero_()
    v_block.zero_()
    return received


def ring_by_batched_ops(k_block, v_block):
    """Right: the four transfers posted together as a batch of point-to-point operations."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    k_in, v_in = k_block.new_empty(k_block.shape), v_block.new_empty(v_block.shape)
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % world_size) for t in (k_block, v_block)]
    ops += [dist.P2POp(dist.irecv, t, (rank - 1 + world_size) % world_size) for t in (k_in, v_in)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return k_in, v_in


def ring_even_ranks_send_first(k_block, v_block):
    """Right: blocking calls, ordered so that no two neighbours both wait to send."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    received = [torch.empty_like(k_block), torch.empty_like(v_block)]
    for block, into in zip((k_block, v_block), received, strict=True):
        if rank % 2 == 0:
            dist.send(block.contiguous(), (rank + 1) % world_size)
            dist.recv(into, (rank - 1) % world_size)
        else:
            dist.recv(into, (rank - 1) % world_size)
            dist.send(block.contiguous(), (rank + 1) % world_size)
    return tuple(received)


def test_ring_pass_runs_two_world_sizes_and_leaves_the_blocks_alone(capsys, monkeypatch):
    monkeypatch.setattr(checks, "_TIMEOUT", 4.0)
    for right in (ring_by_batched_ops, ring_even_ranks_send_first):  # and ring_pass above
        ok, out = verdict(capsys, checks.exercise_2, right)
        assert ok and out == "Exercise 2: correct: on 3 and 2 ranks, every rank saw every block, one hop at a time.\n"
    ok, out = verdict(capsys, checks.exercise_2, ring_of_three)
    assert not ok and "on 3 ranks but not on another number of ranks" in out and "on 2 ranks" in out, out
    assert "modulo the number of ranks" in out.split("Hint: ")[1], out
    ok, out = verdict(capsys, checks.exercise_2, ring_that_clears_what_it_sent)
    assert not ok and "changed the blocks it was given in place (rank 0) on 3 ranks" in out, out
