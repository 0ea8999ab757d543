"""Rank functions the lesson runs with :func:`~attention_helpers.distributed.run`: each is called as
``fn(rank, world_size, *args)`` inside a gloo process group, in a process of its own."""

from __future__ import annotations

import torch
import torch.distributed as dist

from .._ram import PeakRAM
from .ring import ring_attention

MIB = 2**20


def collectives(rank: int, world_size: int) -> dict:
    """The three operations the lesson uses, small: an all-reduce, a send/receive around the ring, a broadcast.

    Rank ``r`` starts with the tensor ``[r + 1, 10 * (r + 1)]``. Returns what it saw."""
    mine = torch.tensor([rank + 1.0, 10.0 * (rank + 1)])  # (2,)
    total = mine.clone()
    dist.all_reduce(total)  # every rank ends with the sum over all ranks
    received = torch.empty(2)
    requests = [dist.isend(mine, (rank + 1) % world_size), dist.irecv(received, (rank - 1) % world_size)]
    for request in requests:
        request.wait()
    shared = mine.clone()
    dist.broadcast(shared, src=0)  # every rank ends with rank 0's tensor
    return {"mine": mine, "all_reduce": total, "received": received, "broadcast": shared}


def full_qkv(seed: int, batch: int, num_heads: int, num_tokens: int, head_dim: int):
    """The whole sequence's queries, keys and values, ``(batch, num_heads, num_tokens, head_dim)`` each (values
    half as wide), drawn from ``seed``: every rank draws the same and keeps its shard."""
    generator = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(batch, num_heads, num_tokens, head_dim, generator=generator) for _ in range(2))
    v = torch.randn(batch, num_heads, num_tokens, max(1, head_dim // 2), generator=generator)
    return q, k, v


def ring_shard(rank: int, world_size: int, seed: int, shape: tuple, causal: bool) -> torch.Tensor:
    """This rank's output of :func:`ring_attention` on its ``tensor_split`` shard of :func:`full_qkv`."""
    q, k, v = (t.tensor_split(world_size, dim=2)[rank] for t in full_qkv(seed, *shape))
    return ring_attention(q, k, v, causal=causal)


def ring_shards(rank: int, world_size: int, seed: int, shape: tuple) -> dict[bool, torch.Tensor]:
    """:func:`ring_shard` without and with the causal mask, ``{False: ..., True: ...}``."""
    return {causal: ring_shard(rank, world_size, seed, shape, causal) for causal in (False, True)}


def extra_peak_mib(fn, *args) -> tuple[object, float]:
    """Run ``fn(*args)``; return its result and how far this process's resident memory rose above its level
    just before the call, in MiB (:class:`~attention_helpers._ram.PeakRAM`)."""
    peak = PeakRAM()
    result = fn(*args)
    return result, peak.extra_mib()


def ring_peak_ram(rank: int, world_size: int, num_tokens: int, head_dim: int, causal: bool) -> float:
    """This rank's peak memory for :func:`ring_attention` at ``num_tokens`` tokens (batch 1, one head), in MiB:
    the bytes of its shards of q, k and v plus how far its resident memory rose during the call."""
    q, k, v = (t.tensor_split(world_size, dim=2)[rank].clone() for t in full_qkv(0, 1, 1, num_tokens, head_dim))
    inputs_mib = sum(t.numel() * t.element_size() for t in (q, k, v)) / MIB
    dist.barrier()  # every rank starts together, so that every transfer is on time
    _, extra = extra_peak_mib(ring_attention, q, k, v, causal)
    return inputs_mib + extra
