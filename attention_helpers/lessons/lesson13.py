"""Checks for lesson 13's exercises (attention across processes).

The reader's function runs on real ranks: a function defined in a notebook cell cannot be imported by a new
process, so the check sends its source text, and each rank defines it again with ``torch``, ``dist``
(``torch.distributed``), ``F`` and ``math`` in scope.

- Exercise 1: ``average_gradients(model)``, the all-reduce that ``DistributedDataParallel`` does, called on 2 ranks
  after each computed the gradients of its half of a hidden batch; they must equal the whole batch's gradients.
- Exercise 2: ``ring_pass(k_block, v_block)``, one hop of the ring on 3 ranks: every rank must get the blocks of the
  rank before it, hop after hop, without a deadlock.
"""

from __future__ import annotations

import inspect
import math
import textwrap

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..distributed.launch import RankError, run
from ..gpt import GPT
from ..text import language_model_loss
from . import correct, not_answered, not_yet

_SEED = 13_01
_TIMEOUT = 15.0  # seconds: a deadlocked answer fails this fast


def _source(name: str, fn) -> tuple[str | None, str | None]:
    """The function's source text (dedented), or the verdict's problem when it has none."""
    if getattr(fn, "__name__", "<lambda>") == "<lambda>":
        return None, "the answer is a lambda, whose source the check cannot send: define it with def"
    try:
        return textwrap.dedent(inspect.getsource(fn)), None
    except (OSError, TypeError):
        label = getattr(fn, "__name__", type(fn).__name__)
        return None, f"the check cannot read the source of {label}: define it with def in a notebook cell"


def _define(source: str, name: str):
    """Define the reader's function again in this rank's process."""
    namespace = {"torch": torch, "dist": dist, "F": F, "math": math}
    exec(compile(source, f"<your {name}>", "exec"), namespace)  # the reader's own code, run on their machine
    return namespace[name]


def _hidden_model_and_batch() -> tuple[GPT, torch.Tensor, torch.Tensor]:
    """A small GPT (weights from the check's seed) and a batch of 6 windows of 8 ids with their targets."""
    generator = torch.Generator().manual_seed(_SEED)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        model = GPT(20, 8, 16, 2, 2, dropout=0.0)
    ids = torch.randint(0, 20, (6, 9), generator=generator)
    return model, ids[:, :-1], ids[:, 1:]


def gradients_rank(rank: int, world_size: int, source: str, name: str) -> dict:
    """On each rank: gradients of this rank's slice, then the reader's function; returns the gradients it left,
    the ones of this slice alone and the ones of the whole batch (computed on a copy), or the error."""
    model, inputs, targets = _hidden_model_and_batch()
    whole = GPT(20, 8, 16, 2, 2, dropout=0.0)
    whole.load_state_dict(model.state_dict())
    language_model_loss(whole(inputs), targets).backward()
    my_inputs, my_targets = inputs.tensor_split(world_size)[rank], targets.tensor_split(world_size)[rank]
    language_model_loss(model(my_inputs), my_targets).backward()
    local = [p.grad.clone() for p in model.parameters()]
    try:
        _define(source, name)(model)
    except Exception as error:  # the reader's code: report it, on every rank
        return {"error": f"{type(error).__name__}: {error}"}
    after = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    return {"error": None, "after": after, "local": local, "whole": [p.grad for p in whole.parameters()]}


def _close(a, b) -> bool:
    return a is not None and torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def _launch(name: str, rank_fn, world_size: int, *args, hint: str) -> list | None:
    """Run the check's rank function; print the verdict and return None if a rank failed or timed out."""
    try:
        return run(rank_fn, world_size, *args, timeout=_TIMEOUT, oversubscribe=True)
    except RankError as error:
        first_line = str(error).splitlines()[0]
        if "timed out" in first_line.lower() or "did not finish" in first_line:
            problem = f"a rank waited more than {_TIMEOUT:.0f} s for another, which never came: a deadlock"
        else:
            problem = f"the processes failed: {first_line}"
        not_yet(name, problem, hint)
        return None


def exercise_1(average_gradients) -> bool:
    """``average_gradients(model)``: after ``backward`` on each rank's slice, leave in every ``p.grad`` the mean of
    the ranks' gradients (what DDP does), so that every rank holds the whole batch's gradient."""
    name = "Exercise 1"
    if average_gradients is None:
        return not_answered(name)
    hint = (
        "for every parameter p: dist.all_reduce(p.grad) sums the ranks' gradients in place; then divide by "
        "dist.get_world_size()"
    )
    if not callable(average_gradients):
        return not_yet(name, f"average_gradients must be a function, got {type(average_gradients).__name__}", hint)
    source, problem = _source(name, average_gradients)
    if problem:
        return not_yet(name, problem, hint)
    reports = _launch(name, gradients_rank, 2, source, average_gradients.__name__, hint=hint)
    if reports is None:
        return False
    for rank, report in enumerate(reports):
        if report["error"]:
            return not_yet(name, f"your function raised on rank {rank}: {report['error']}", hint)
    for rank, report in enumerate(reports):
        pairs = list(zip(report["after"], report["whole"], strict=True))
        if all(_close(after, whole) for after, whole in pairs):
            continue
        if all(_close(after, local) for after, local in zip(report["after"], report["local"], strict=True)):
            return not_yet(name, f"rank {rank}'s gradients are still those of its own half", hint)
        if all(_close(after, 2 * whole) for after, whole in pairs):
            return not_yet(name, f"rank {rank}'s gradients are the sum over the ranks, not the mean", hint)
        wrong = sum(not _close(after, whole) for after, whole in pairs)
        return not_yet(name, f"on rank {rank}, {wrong} of {len(pairs)} parameters' gradients are not the mean", hint)
    return correct(name, ": on 2 ranks, every gradient equals the whole batch's")


def ring_pass_rank(rank: int, world_size: int, source: str, name: str) -> dict:
    """On each rank: hidden key/value blocks of the rank's own, passed ``world_size - 1`` times with the reader's
    ``ring_pass``; returns the sources of the blocks the rank held after each hop, or the error."""
    ring_pass = _define(source, name)
    generator = torch.Generator().manual_seed(_SEED + rank)
    k_block, v_block = torch.randn(2, 3, 5, 4, generator=generator), torch.randn(2, 3, 5, 6, generator=generator)
    blocks = [(k_block, v_block)]
    try:
        for _ in range(world_size - 1):
            received = ring_pass(*blocks[-1])
            if not isinstance(received, (tuple, list)) or len(received) != 2:
                return {"error": "ring_pass must return the pair (k_block, v_block) it received"}
            blocks.append(tuple(received))
    except Exception as error:  # the reader's code
        return {"error": f"{type(error).__name__}: {error}"}
    return {"error": None, "blocks": blocks}


def _sender(block: tuple, originals: list) -> int | None:
    """Which rank's original (k, v) blocks ``block`` is, or None."""
    if not all(isinstance(t, torch.Tensor) for t in block):
        return None
    for rank, (k, v) in enumerate(originals):
        if (
            block[0].shape == k.shape
            and block[1].shape == v.shape
            and torch.equal(block[0], k)
            and torch.equal(block[1], v)
        ):
            return rank
    return None


def exercise_2(ring_pass) -> bool:
    """``ring_pass(k_block, v_block) -> (k_block, v_block)``: send this rank's blocks to rank ``rank + 1`` and
    return the ones rank ``rank - 1`` sent (modulo the world size), on 3 ranks, twice, without a deadlock."""
    name = "Exercise 2"
    if ring_pass is None:
        return not_answered(name)
    hint = (
        "post the receives and the sends together: dist.irecv into new tensors from (rank - 1) % world_size and "
        "dist.isend to (rank + 1) % world_size, then .wait() on each; blocks have the shapes of the ones sent"
    )
    if not callable(ring_pass):
        return not_yet(name, f"ring_pass must be a function, got {type(ring_pass).__name__}", hint)
    source, problem = _source(name, ring_pass)
    if problem:
        return not_yet(name, problem, hint)
    world_size = 3  # with 3 ranks the next rank is not the previous one
    reports = _launch(name, ring_pass_rank, world_size, source, ring_pass.__name__, hint=hint)
    if reports is None:
        return False
    errors = {rank: report["error"] for rank, report in enumerate(reports) if report["error"]}
    # The first rank to time out leaves the group; the ranks still waiting then see their partner gone.
    timed_out = [rank for rank, error in errors.items() if "timed out" in error.lower()]
    if timed_out:
        problem = (
            f"rank {timed_out[0]} timed out: every rank waited in a blocking send or recv for another (a deadlock)"
        )
        return not_yet(name, problem, hint)
    for rank, error in sorted(errors.items(), key=lambda item: "by peer" in item[1]):  # causes before consequences
        return not_yet(name, f"on rank {rank}: {error}", hint)
    originals = [report["blocks"][0] for report in reports]
    for hop in range(1, world_size):
        for rank, report in enumerate(reports):
            sender = _sender(report["blocks"][hop], originals)
            expected = (rank - hop) % world_size
            if sender == expected:
                continue
            if sender == (rank + hop) % world_size:
                problem = f"after hop {hop}, rank {rank} holds rank {sender}'s blocks: the ring turns the wrong way"
            elif sender is None:
                problem = f"after hop {hop}, rank {rank} holds blocks that no rank started with"
            else:
                problem = f"after hop {hop}, rank {rank} holds rank {sender}'s blocks, not rank {expected}'s"
            return not_yet(name, problem, hint)
    return correct(name, f": on {world_size} ranks, every rank saw every block, one hop at a time")
