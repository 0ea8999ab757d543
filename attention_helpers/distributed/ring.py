"""Ring attention: attention over a sequence split across the ranks of a process group.

Rank ``r`` holds shard ``r`` of the queries, keys and values (``torch.tensor_split`` order along the tokens). It
keeps its queries; the key/value blocks travel around the ring, rank ``r`` sending to ``r + 1`` and receiving
from ``r - 1``, so after ``P - 1`` hops every rank has seen every block once. Each block gives a partial result
and its log-sum-exp (:func:`~attention_helpers.efficient.partial_attention`), merged as they arrive
(:func:`~attention_helpers.efficient.merge_partial_attention`): no rank holds more than three key/value blocks (its
own, the one it computes with and the one arriving) or a score matrix larger than ``shard_len x shard_len``.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from .._checks import check_bool, check_positive_int, shape_str
from ..efficient import merge_partial_attention, partial_attention


def ring_schedule(world_size: int, causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Who holds which key/value block at each hop, and whether it is used.

    Returns ``held`` and ``computed``, both ``(world_size, world_size)`` indexed ``[rank, hop]``: at hop ``h``
    rank ``r`` holds block ``(r - h) % world_size``; with ``causal=True`` a block from a later shard is entirely
    in the future of the rank's queries and is passed on without being computed.
    """
    check_positive_int("world_size", world_size)
    check_bool("causal", causal)
    rank = torch.arange(world_size)[:, None]  # (world_size, 1)
    hop = torch.arange(world_size)[None, :]  # (1, world_size)
    held = (rank - hop) % world_size  # (world_size, world_size)
    computed = held <= rank if causal else torch.ones_like(held, dtype=torch.bool)
    return held, computed


def shard_lengths(num_tokens: int, world_size: int) -> list[int]:
    """The lengths of ``torch.tensor_split``'s ``world_size`` shards of ``num_tokens`` tokens: the first
    ``num_tokens % world_size`` are one longer."""
    check_positive_int("num_tokens", num_tokens, minimum=0)
    check_positive_int("world_size", world_size)
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
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    return {"problem": None, "q": tuple(q.shape), "v": tuple(v.shape), "dtype": str(q.dtype), "grad": grad}


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
        if info["grad"] != first["grad"]:
            raise ValueError(
                f"ring_attention: rank 0's inputs {'' if first['grad'] else 'do not '}require grad but rank {other}'s "
                f"{'' if info['grad'] else 'do not'}: the backward pass is a ring too, which every rank must join"
            )
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

    Differentiable: when the inputs require grad, every rank must then call ``backward`` too, since the backward
    pass is a ring of its own. Each rank gets ``dQ`` for its queries; the key/value blocks travel the ring again,
    each with the ``dK`` and ``dV`` that the ranks it visited added to it, and a last hop brings them home.

    Raises the same ``ValueError``/``TypeError`` on every rank when any rank's shard has a wrong shape or dtype,
    or when some ranks' inputs require grad and others' do not, and ``RuntimeError`` outside a process group.
    """
    check_bool("causal", causal)
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "ring_attention must be called inside a process group: start one with "
            "attention_helpers.distributed.run(fn, world_size, ...) or torchrun, which call "
            "torch.distributed.init_process_group on every rank"
        )
    lengths = _agree(q, k, v, dist.get_rank(), dist.get_world_size())
    return _RingAttention.apply(q, k, v, causal, lengths)


class _RingAttention(torch.autograd.Function):
    """The ring's forward pass, and a backward pass that is a second ring (FlashAttention's backward per block)."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, lengths: list[int]):
        context_vec, lse = _ring_forward(q, k, v, causal, lengths)
        ctx.save_for_backward(q, k, v, context_vec, lse)
        ctx.causal, ctx.lengths = causal, lengths
        return context_vec.to(q.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_context_vec):
        q, k, v, context_vec, lse = ctx.saved_tensors
        return (*_ring_backward(grad_context_vec, q, k, v, context_vec, lse, ctx.causal, ctx.lengths), None, None)


def _exchange(send: list, receive: list, send_to: int, receive_from: int, first_tag: int = 0) -> list:
    """Start sending ``send`` to ``send_to`` and receiving into ``receive`` (empty tensors) from ``receive_from``;
    tensor ``i`` travels with tag ``first_tag + i``, so that transfers in flight together never mix."""
    requests = [dist.isend(t.contiguous(), send_to, tag=first_tag + i) for i, t in enumerate(send)]
    return requests + [dist.irecv(t, receive_from, tag=first_tag + i) for i, t in enumerate(receive)]


def _ring_forward(q, k, v, causal: bool, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's context vectors ``(batch, num_heads, shard_len, d_v)`` and their log-sum-exp over the whole
    sequence ``(batch, num_heads, shard_len)``, both in float32 for float16 and bfloat16 inputs."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
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
            requests = _exchange([k_block, v_block], [incoming_k, incoming_v], send_to, receive_from)
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
    return context_vec, lse


def _ring_backward(grad_context_vec, q, k, v, context_vec, lse, causal: bool, lengths: list[int]):
    """``dQ``, ``dK``, ``dV`` of this rank's shards, in their dtypes.

    Per block, as in FlashAttention's backward: the weights ``P = exp(S - lse)`` are recomputed from the scores
    ``S`` and the whole row's ``lse``; then ``dV += Pᵀ dO``, ``dS = P * (dO Vᵀ - rowsum(dO * O))``,
    ``dQ += dS K / sqrt(d)`` and ``dK += dSᵀ Q / sqrt(d)``. A block's ``dK`` and ``dV`` travel with it, so after
    the ``P - 1`` hops each holds every rank's share; one more hop returns them to the block's owner.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    offsets = [sum(lengths[:r]) for r in range(world_size)]
    held, computed = ring_schedule(world_size, causal)
    send_to, receive_from = (rank + 1) % world_size, (rank - 1) % world_size
    compute_dtype = context_vec.dtype  # float32 for float16 and bfloat16 inputs
    scale = 1.0 / math.sqrt(q.shape[-1])
    q_scaled = q.to(compute_dtype) * scale  # (batch, num_heads, shard_len, head_dim)
    d_out = grad_context_vec.to(compute_dtype)  # (batch, num_heads, shard_len, d_v)
    row_dot = (d_out * context_vec).sum(dim=-1, keepdim=True)  # (batch, num_heads, shard_len, 1)
    query_pos = torch.arange(offsets[rank], offsets[rank] + q.shape[2], device=q.device)
    dq = torch.zeros_like(q_scaled)
    k_block, v_block = k.contiguous(), v.contiguous()
    dk_block = torch.zeros(k.shape, dtype=compute_dtype, device=k.device)
    dv_block = torch.zeros(v.shape, dtype=compute_dtype, device=v.device)
    for hop in range(world_size):
        source = int(held[rank, hop])
        if hop < world_size - 1:
            incoming = [t.new_empty(*t.shape[:2], lengths[(source - 1) % world_size], t.shape[-1]) for t in (k, v)]
            requests = _exchange([k_block, v_block], incoming, send_to, receive_from)
        if computed[rank, hop]:
            keys, values = k_block.to(compute_dtype), v_block.to(compute_dtype)
            attn_scores = q_scaled @ keys.transpose(-2, -1)  # (batch, num_heads, shard_len, block_len)
            if causal:
                key_pos = torch.arange(offsets[source], offsets[source] + keys.shape[2], device=q.device)
                attn_scores = attn_scores.masked_fill(key_pos[None, :] > query_pos[:, None], float("-inf"))
            attn_weights = torch.exp(attn_scores - lse[..., None])  # the forward's normalised weights
            dv_block = dv_block + attn_weights.transpose(-2, -1) @ d_out
            d_scores = attn_weights * (d_out @ values.transpose(-2, -1) - row_dot)
            dq = dq + d_scores @ keys * scale
            dk_block = dk_block + d_scores.transpose(-2, -1) @ q_scaled
        if world_size > 1:  # the block's dK and dV go on with it; after the last hop, home to its owner send_to
            incoming_grads = [
                t.new_empty(*t.shape[:2], lengths[(source - 1) % world_size], t.shape[-1]) for t in (dk_block, dv_block)
            ]
            for request in _exchange([dk_block, dv_block], incoming_grads, send_to, receive_from, first_tag=2):
                request.wait()
            dk_block, dv_block = incoming_grads
        if hop < world_size - 1:
            for request in requests:
                request.wait()
            k_block, v_block = incoming
    return dq.to(q.dtype), dk_block.to(k.dtype), dv_block.to(v.dtype)
