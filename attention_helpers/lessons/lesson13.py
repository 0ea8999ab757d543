"""Lesson 13's checks: the reader's function runs on real ranks. A function defined in a notebook cell cannot be
imported by a new process: the check sends its compiled code with what it uses from its module, and each rank
defines them again, with ``torch``, ``dist``, ``F`` and ``math`` in scope."""

from __future__ import annotations

import functools
import importlib
import itertools
import marshal
import math
import types

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..distributed.launch import RankError, run
from ..gpt import GPT, GPTConfig
from ..text import language_model_loss
from . import IN_PLACE_HINT, Exercise, Mistake, WrongFormError, compare, trusted

_SEED = 13_01
_TIMEOUT = 15.0  # seconds: a deadlocked answer fails this fast


def _portable(fn) -> dict:
    """What a new process needs to define ``fn`` again: its compiled code (which a rank of the same Python loads), the
    same of the functions of its module it calls, the modules it names and its plain values."""
    found = {"name": getattr(fn, "__name__", ""), "functions": {}, "modules": {}, "values": {}}

    def visit(name: str, function):
        if name in found["functions"]:
            return
        if function.__closure__:
            raise WrongFormError(f"{name} uses variables of the function it is defined in", "define it at top level")
        found["functions"][name] = marshal.dumps(function.__code__), function.__defaults__, function.__kwdefaults__
        codes, names = [function.__code__], set()
        while codes:  # the names used by the function and by the functions nested in it
            code = codes.pop()
            names.update(code.co_names)
            codes.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
        for used in sorted(names & set(function.__globals__)):
            value = function.__globals__[used]
            if isinstance(value, types.ModuleType):
                found["modules"][used] = value.__name__
            elif isinstance(value, types.FunctionType) and value.__module__ == function.__module__:
                visit(used, value)
            elif isinstance(value, (int, float, str, bool, bytes, type(None))):
                found["values"][used] = value

    if not isinstance(fn, types.FunctionType):
        raise WrongFormError(f"expected a function, got {type(fn).__name__}", "define it with def")
    visit(found["name"], fn)
    return found


def _define(portable: dict):
    """Define the reader's function again in this rank's process, with what it uses from its module."""
    namespace = {"torch": torch, "dist": dist, "F": F, "math": math, "__name__": "__answer__"}
    namespace.update({alias: importlib.import_module(module) for alias, module in portable["modules"].items()})
    namespace.update(portable["values"])
    for name, (code, defaults, keyword_defaults) in portable["functions"].items():
        namespace[name] = types.FunctionType(marshal.loads(code), namespace, name, defaults)
        namespace[name].__kwdefaults__ = keyword_defaults
    return namespace[portable["name"]]


def _launch(rank_fn, hint: str, answer, world_size: int) -> list:
    """Run ``rank_fn`` on ``world_size`` ranks with the answer: the ranks' results, else :class:`WrongFormError` with
    the first rank's error (not a lost peer's) or a deadlock and ``hint``, or with a rank's ``(problem, hint)``."""
    try:
        with trusted():
            reports = run(rank_fn, world_size, _portable(answer), timeout=_TIMEOUT, oversubscribe=True)
    except RankError as error:  # the reader's code raised on a rank, or a rank died or never finished
        rank, _, raised = str(error).splitlines()[0].partition(" failed: ")
        problem = f"your function raised on {rank}: {raised}" if raised else f"the processes failed: {rank}"
        if "timed out" in problem.lower() or "did not finish" in problem:
            problem = f"a rank waited more than {_TIMEOUT:.0f} s for another, which never came: a deadlock"
        raise WrongFormError(problem, hint) from None
    problems = [report for report in reports if isinstance(report, tuple)]
    if problems:
        raise WrongFormError(*problems[0])
    return reports


RING_HINT = (
    "each rank sends what it holds to the next rank and receives from the previous one, one hop around the ring, the "
    "next and the previous rank counted modulo the number of ranks, which the process group knows; a blocking send "
    "waits for its receive, so post every rank's receives and sends together, then wait for all of them (reread '3. "
    "Ring attention: a sequence split across processes')"
)
_COLLECTIVES = "all_gather all_gather_into_tensor all_gather_object all_reduce all_to_all all_to_all_single broadcast"
_COLLECTIVES += " broadcast_object_list gather reduce reduce_scatter reduce_scatter_tensor scatter"


def _one_hop_only(name: str, *args, **kwargs):
    raise RuntimeError(f"ring_pass moves one hop with sends and receives between neighbours, not dist.{name}")


def _existing_peer(canonical, group, global_rank=None, *args, **kwargs):
    """A peer rank that does not exist refused at once: gloo would wait for it until the timeout."""
    if isinstance(global_rank, int) and not 0 <= global_rank < dist.get_world_size():
        raise ValueError(f"there is no rank {global_rank}: the ranks are 0 to {dist.get_world_size() - 1}")
    return canonical(group, global_rank, *args, **kwargs)


def _gradients(share: int = 0, world_size: int = 1) -> tuple[GPT, list[torch.Tensor]]:
    """A small GPT (weights from the check's seed) and its gradients on share ``share`` of ``world_size`` of a hidden
    batch of 6 windows of 8 ids (by default all of it)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        model = GPT(GPTConfig(vocab_size=20, context_length=8, d_model=16, num_heads=2, num_layers=2, dropout=0.0))
    ids = torch.randint(0, 20, (6, 9), generator=torch.Generator().manual_seed(_SEED)).tensor_split(world_size)[share]
    with torch.enable_grad():
        language_model_loss(model(ids[:, :-1]), ids[:, 1:]).backward()
    return model, [parameter.grad for parameter in model.parameters()]


def gradients_rank(rank: int, world_size: int, portable: dict) -> list | tuple:
    """On each rank: the gradients of this rank's share, then the reader's function (an error in it ends the rank);
    the gradients it left, or what is wrong as ``(problem, hint)``."""
    model, _ = _gradients(rank, world_size)
    weights = [p.detach().clone() for p in model.parameters()]
    _define(portable)(model)
    if not all(torch.equal(p, w) for p, w in zip(model.parameters(), weights, strict=True)):
        hint = "average the gradients only: the optimizer's step, after this function, is what changes the weights"
        return f"your function changed the model's weights (rank {rank})", hint
    return [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def _gradients_differ(reports, expected) -> str | None:
    for rank, (grads, right) in enumerate(zip(reports, expected, strict=True)):
        wrong = sum(compare(g, w, atol=1e-5) is not None for g, w in zip(grads, right, strict=True))
        if wrong:
            return f"on rank {rank} of {len(reports)}, {wrong} of {len(right)} parameters' gradients are not the mean"
    return None


GRADIENTS_HINT = (
    "on every rank, each parameter's gradient must become the mean over all ranks: a collective sums it across the "
    "processes in place, and the mean divides by the number of ranks, whatever it is (reread '2. Data parallel')"
)


def _gradient_mistakes(world_size: int) -> list[Mistake]:
    whole = _gradients()[1]
    own = [_gradients(rank, world_size)[1] for rank in range(world_size)]
    summed = [[world_size * g for g in whole]] * world_size
    return [
        Mistake("every rank's gradients are still those of its own share of the batch", GRADIENTS_HINT, own),
        Mistake("the gradients are the sum over the ranks, not the mean", "divide by the ranks", summed),
        Mistake(
            "the gradients are the sum divided by 2, not by the number of ranks",
            "divide by the number of ranks, which the process group knows: here it is not 2",
            [[world_size / 2 * g for g in whole]] * world_size,
        ),
    ]


# ``average_gradients(model)``: after ``backward`` on each rank's share, leave in every ``p.grad`` the mean of the
# ranks' gradients (what DDP does), so that every rank holds the whole batch's gradient.
exercise_1 = Exercise(
    "Exercise 1",
    reference=lambda world_size: [_gradients()[1]] * world_size,  # every rank's
    cases=lambda: [(2,), (3,)],
    run=functools.partial(_launch, gradients_rank, GRADIENTS_HINT),
    time_limit=None,  # the launcher's own timeout stops hung ranks
    hint=GRADIENTS_HINT,
    describe=lambda number, total, world_size: f"on {world_size} ranks",
    mistakes=_gradient_mistakes,
    done=": on 2 and 3 ranks, every gradient equals the whole batch's",
    differ=_gradients_differ,
).check


def ring_pass_rank(rank: int, world_size: int, portable: dict) -> list | tuple:
    """On each rank: its own blocks, passed ``world_size - 1`` times with the reader's ``ring_pass``; the rank whose
    blocks it held after each hop (-1 for blocks no rank started with), or what is wrong as ``(problem, hint)``; an
    error in the reader's code, or a result that is not a pair, ends the rank."""
    generators = [torch.Generator().manual_seed(_SEED + other) for other in range(world_size)]
    originals = [(torch.randn(2, 3, 5, 4, generator=g), torch.randn(2, 3, 5, 6, generator=g)) for g in generators]
    for name in _COLLECTIVES.split():  # a collective hands every rank every block at once: not one hop
        setattr(dist, name, functools.partial(_one_hop_only, name))
    c10d = dist.distributed_c10d
    if hasattr(c10d, "_canonicalize_group_rank"):  # how every send and receive reads its peer
        c10d._canonicalize_group_rank = functools.partial(_existing_peer, c10d._canonicalize_group_rank)
    ring_pass = _define(portable)
    held, senders, changed = originals[rank], [], None
    for _ in range(world_size - 1):
        given = tuple(block.clone() for block in held)
        received = ring_pass(*given)
        # noted, not raised: this rank finishes its hops, since the other ranks wait for them
        if compare(given, held, atol=0) is not None and changed is None:
            changed = f"your function changed the blocks it was given in place (rank {rank})", IN_PLACE_HINT
        held = received
        if not isinstance(held, (tuple, list)) or len(held) != 2:
            raise TypeError(f"ring_pass returned {type(held).__name__}, not the pair (k_block, v_block) it received")
        senders.append(next((r for r, (k, v) in enumerate(originals) if compare(held, (k, v), atol=0) is None), -1))
    return changed or senders


def _ring_differs(reports, expected) -> str | None:
    world_size = len(expected)
    for hop, rank in itertools.product(range(1, world_size), range(world_size)):
        sender, right = reports[rank][hop - 1], expected[rank][hop - 1]
        if sender == -1:
            return f"after hop {hop}, rank {rank} holds blocks that no rank started with"
        if sender != right:
            held = f"after hop {hop}, rank {rank} holds rank {sender}'s blocks"
            wrong_way = sender == (rank + hop) % world_size
            return f"{held}: the ring turns the wrong way" if wrong_way else f"{held}, not rank {right}'s"
    return None


WORKED_ON_3 = "your function passes the blocks on 3 ranks but not on another number of ranks"


# ``ring_pass(k_block, v_block) -> (k_block, v_block)``: send this rank's blocks to rank ``rank + 1`` and return the
# ones rank ``rank - 1`` sent (modulo the world size), on 3 ranks, twice, then on 2, without a deadlock.
exercise_2 = Exercise(
    "Exercise 2",
    reference=lambda world_size: [
        [(rank - hop) % world_size for hop in range(1, world_size)] for rank in range(world_size)
    ],
    cases=lambda: [(3,), (2,)],  # with 3 ranks the next rank is not the previous one; then another world size
    run=functools.partial(_launch, ring_pass_rank, RING_HINT),
    time_limit=None,  # the launcher's own timeout stops hung ranks
    hint=RING_HINT,
    describe=lambda number, total, world_size: f"on {world_size} ranks" + ("" if number == 1 else f" ({WORKED_ON_3})"),
    done=": on 3 and 2 ranks, every rank saw every block, one hop at a time",
    differ=_ring_differs,
).check
