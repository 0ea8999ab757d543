"""Ring attention: attention over a sequence split across the ranks of a process group.

Rank ``r`` holds shard ``r`` of the queries, keys and values (``torch.tensor_split`` order along the tokens). It
keeps its queries; the key/value blocks travel around the ring, rank ``r`` sending to ``r + 1`` and receiving
from ``r - 1``, so after ``P - 1`` hops every rank has seen every block once. Each block gives a partial result
and its log-sum-exp (:func:`~attention_helpers.efficient.partial_attention`), merged as they arrive
(:func:`~attention_helpers.efficient.merge_partial_attention`): no rank ever holds more than two key/value blocks
(the one it computes with and the one arriving) or a score matrix larger than ``shard_len x shard_len``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .._checks import check_positive_int, shape_str
from ..efficient import merge_partial_attention, partial_attention


def ring_schedule(world_size: int, causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Who holds which key/value block at each hop, and whether it is used.

    Returns ``held`` and ``computed``, both ``(world_size, world_size)`` indexed ``[rank, hop]``: at hop ``h``
    rank ``r`` holds block ``(r - h) % world_size``; with ``causal=True`` a block from a later shard is entirely
    in the future of the rank's queries and is passed on without being computed.
    """
    check_positive_int("world_size", world_size)
    rank = torch.arange(world_size)[:, None]  # (world_size, 1)
    hop = torch.arange(world_size)[None, :]  # (1, world_size)
    held = (rank - hop) % world_size  # (world_size, world_size)
    computed = held <= rank if causal else torch.ones_like(held, dtype=torch.bool)
    return held, computed


def shard_lengths(num_tokens: int, world_size: int) -> list[int]:
    """The lengths of ``torch.tensor_split``'s ``world_size`` shards of ``num_tokens`` tokens: the first
    ``num_tokens % world_size`` are one longer."""
    return [num_tokens // world_size + (r < num_tokens % world_size) for r in range(world_size)]


def _describe(q, k, v) -> dict:
    """What every rank must agree on, or a problem with this rank's own tensors (checked without raising, so
    that every rank learns of it before anyone raises)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            return {"problem": f"{name} must be a torch.Tensor, got {type(t).__name__}"}
        if t.dim() != 4:
            return {"problem": f"{name} must be (batch, num_heads, shard_len, head_dim), got {shape_str(t.shape)}"}
        if not t.is_floating_point():
            return {"problem": f"{name} must have a floating-point dtype, got {t.dtype}"}
    if not (k.shape[:3] == q.shape[:3] == v.shape[:3]) or k.shape[-1] != q.shape[-1]:
        return {
            "problem": f"q {shape_str(q.shape)}, k {shape_str(k.shape)} and v {shape_str(v.shape)} must share "
            "batch, num_heads and shard_len, and q and k their head_dim"
        }
    if not (q.dtype == k.dtype == v.dtype):
        return {"problem": f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}"}
    return {"problem": None, "q": tuple(q.shape), "v": tuple(v.shape), "dtype": str(q.dtype)}


def _agree(q, k, v, rank: int, world_size: int) -> list[int]:
    """Exchange every rank's shapes and dtype; raise the same error on every rank if any rank's input is wrong.
    Returns the shard lengths of all ranks."""
    described = [None] * world_size
    dist.all_gather_object(described, _describe(q, k, v))
    for other, info in enumerate(described):
        if info["problem"]:
            raise ValueError(f"ring_attention: rank {other}'s shard is wrong: {info['problem']}")
    first = described[0]
    for other, info in enumerate(described):
        q0, qr = first["q"], info["q"]
        if (qr[0], qr[1], qr[3]) != (q0[0], q0[1], q0[3]) or info["v"][3] != first["v"][3]:
            raise ValueError(
                f"ring_attention: every rank's shard must share batch, num_heads and head_dim: rank 0 has q "
                f"{shape_str(q0)} and v {shape_str(first['v'])}, rank {other} q {shape_str(qr)} and v "
                f"{shape_str(info['v'])}"
            )
        if info["dtype"] != first["dtype"]:
            raise TypeError(f"ring_attention: rank 0's shard is {first['dtype']} but rank {other}'s is {info['dtype']}")
    lengths = [info["q"][2] for info in described]
    if lengths != shard_lengths(sum(lengths), world_size) or min(lengths) == 0:
        raise ValueError(
            f"ring_attention: the shard lengths {lengths} are not torch.tensor_split's split of {sum(lengths)} "
            f"tokens into {world_size} non-empty shards ({shard_lengths(sum(lengths), world_size)})"
        )
    return lengths


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """This rank's shard of ``softmax(Q Kᵀ / sqrt(head_dim)) V`` over the whole sequence, by a ring of hops.

    Call it on every rank of a process group (``attention_helpers.distributed.run`` or ``torchrun``) with the
    rank's shard of the sequence, in ``torch.tensor_split`` order (shards may differ in length by one).

    Args:
        q: ``(batch, num_heads, shard_len, head_dim)``, this rank's queries.
        k: ``(batch, num_heads, shard_len, head_dim)``, this rank's keys.
        v: ``(batch, num_heads, shard_len, d_v)``, this rank's values.
        causal: query ``i`` of the whole sequence sees keys ``0..i`` only; blocks entirely in a rank's future are
            passed on without being computed (:func:`ring_schedule`).

    Returns:
        ``(batch, num_heads, shard_len, d_v)``: this rank's rows of ``F.scaled_dot_product_attention`` over the
        whole sequence (``is_causal=causal``), in ``q``'s dtype. With one rank it is plain attention.

    Raises the same ``ValueError``/``TypeError`` on every rank when any rank's shard has a wrong shape or dtype,
    and ``RuntimeError`` outside a process group.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "ring_attention must be called inside a process group: start one with "
            "attention_helpers.distributed.run(fn, world_size, ...) or torchrun, which call "
            "torch.distributed.init_process_group on every rank"
        )
    rank, world_size = dist.get_rank(), dist.get_world_size()
    lengths = _agree(q, k, v, rank, world_size)
    offsets = [sum(lengths[:r]) for r in range(world_size)]  # position of each shard's first token
    held, computed = ring_schedule(world_size, causal)
    send_to, receive_from = (rank + 1) % world_size, (rank - 1) % world_size
    k_block, v_block = k.contiguous(), v.contiguous()
    context_vec = lse = None
    for hop in range(world_size):
        source = int(held[rank, hop])  # whose block this rank holds now
        if hop < world_size - 1:  # start passing the block on before computing with it: transfer overlaps compute
            incoming_k = k.new_empty(*k.shape[:2], lengths[(source - 1) % world_size], k.shape[-1])
            incoming_v = v.new_empty(*v.shape[:2], lengths[(source - 1) % world_size], v.shape[-1])
            requests = [
                dist.isend(k_block, send_to, tag=0),
                dist.isend(v_block, send_to, tag=1),
                dist.irecv(incoming_k, receive_from, tag=0),
                dist.irecv(incoming_v, receive_from, tag=1),
            ]
        if computed[rank, hop]:
            out, block_lse = partial_attention(
                q, k_block, v_block, causal=causal, query_offset=offsets[rank], key_offset=offsets[source]
            )  # (batch, num_heads, shard_len, d_v), (batch, num_heads, shard_len)
            if context_vec is None:
                context_vec, lse = out, block_lse
            else:
                context_vec = merge_partial_attention([context_vec, out], [lse, block_lse])
                lse = torch.logaddexp(lse, block_lse)
        if hop < world_size - 1:
            for request in requests:
                request.wait()
            k_block, v_block = incoming_k, incoming_v
    return context_vec.to(q.dtype)
