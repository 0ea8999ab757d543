"""Attention without the ``(num_queries, num_keys)`` matrix: online softmax, a tiled forward pass (FlashAttention's
arithmetic, as plain PyTorch loops written to be read, not to be fast), and attention over blocks of keys merged by
their log-sum-exp.
"""

from __future__ import annotations

import math

import torch

from ._checks import check_attention_inputs, check_bool, check_dim, check_positive_int, check_tensor

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16 and bfloat16 sums lose digits quickly; their running max, sum and accumulator are float32."""
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def _online_step(running_max: torch.Tensor, block: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One block of an online softmax: the new running maximum, the factor ``exp(m_old - m_new)`` that rescales
    the sums kept so far, and the block's terms ``exp(score - m_new)``."""
    new_max = torch.maximum(running_max, block.amax(dim=-1, keepdim=True))
    # While a slice has seen only -inf, its maximum is -inf and exp(-inf - -inf) would be nan; shifting by 0
    # instead keeps every term exp(-inf) = 0, the right value.
    shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
    return new_max, torch.exp(running_max - shift), torch.exp(block - shift)


def online_softmax(x: torch.Tensor, dim: int = -1, block_size: int = 128) -> torch.Tensor:
    """Softmax along ``dim`` from one pass over blocks of ``block_size`` scores keeping a running maximum ``m`` and
    a running sum ``s`` of ``exp(score - m)``, rescaled by ``exp(m - m_new)`` when a block raises the maximum; then
    ``softmax(x) = exp(x - m) / s``."""
    check_tensor("x", x, 1, "(..., num_scores)")
    check_positive_int("block_size", block_size)
    check_dim("dim", dim, x)
    scores = x.movedim(dim, -1).to(_accumulation_dtype(x.dtype))  # (..., num_scores)
    running_max = torch.full_like(scores[..., :1], float("-inf"))  # (..., 1)
    running_sum = torch.zeros_like(scores[..., :1])  # (..., 1)
    for start in range(0, scores.shape[-1], block_size):
        running_max, rescale, terms = _online_step(running_max, scores[..., start : start + block_size])
        running_sum = running_sum * rescale + terms.sum(dim=-1, keepdim=True)
    probs = torch.exp(scores - running_max) / running_sum
    return probs.to(x.dtype).movedim(-1, dim)


def tiled_attention_blocks(
    num_queries: int, num_keys: int, block_size: int = 128, causal: bool = False
) -> torch.Tensor:
    """Boolean ``(num_query_blocks, num_key_blocks)``, True for a block :func:`tiled_attention` computes. With
    ``causal``, query ``q`` sees keys ``0..q`` (top-left aligned, as ``F.scaled_dot_product_attention``), so a key
    block whose first key comes after the query block's last query is skipped."""
    check_positive_int("num_queries", num_queries)
    check_positive_int("num_keys", num_keys)
    check_positive_int("block_size", block_size)
    check_bool("causal", causal)
    first_query = torch.arange(0, num_queries, block_size)  # (num_query_blocks,)
    first_key = torch.arange(0, num_keys, block_size)  # (num_key_blocks,)
    last_query = (first_query + block_size - 1).clamp(max=num_queries - 1)
    if not causal:
        return torch.ones(len(first_query), len(first_key), dtype=torch.bool)
    return first_key[None, :] <= last_query[:, None]


def tiled_attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, causal: bool = False, block_size: int = 128
) -> torch.Tensor:
    """``softmax(Q Kᵀ / sqrt(d_k)) V`` block by block, never holding more than one block of scores: as
    :func:`online_softmax`, plus an accumulator of ``exp(score - m) * value`` rescaled alike; ``acc / s`` at the end.
    ``causal`` as :func:`tiled_attention_blocks`. The memory saving holds for the forward pass only: autograd keeps
    every block's intermediates (FlashAttention's backward pass recomputes them)."""
    check_positive_int("block_size", block_size)
    check_bool("causal", causal)
    leading = check_attention_inputs(queries, keys, values)  # the broadcast leading shape (...)
    num_queries = queries.shape[-2]
    num_keys = keys.shape[-2]
    context_vec = queries.new_empty(*leading, num_queries, values.shape[-1])  # (..., num_queries, d_v)
    if num_queries == 0:
        return context_vec
    blocks = tiled_attention_blocks(num_queries, num_keys, block_size, causal)
    key_ranges = [(k_start, min(k_start + block_size, num_keys)) for k_start in range(0, num_keys, block_size)]
    for i, q_start in enumerate(range(0, num_queries, block_size)):
        q_end = min(q_start + block_size, num_queries)
        computed = [key_range for key_range, needed in zip(key_ranges, blocks[i], strict=True) if needed]
        context_vec[..., q_start:q_end, :] = _query_block_pass(
            queries[..., q_start:q_end, :], keys, values, leading, q_start, computed, causal
        )
    return context_vec


def _query_block_pass(q_block, keys, values, leading, q_start, key_ranges, causal) -> torch.Tensor:
    """The context vectors of one query block, from one online-softmax pass over ``key_ranges``."""
    compute_dtype = _accumulation_dtype(q_block.dtype)
    # Scaling the queries before the product keeps float16 scores in range (and is one small multiply).
    q_block = q_block.to(compute_dtype) * (1.0 / math.sqrt(q_block.shape[-1]))  # (..., bq, d_k)
    running_max = q_block.new_full((*leading, q_block.shape[-2], 1), float("-inf"))  # (..., bq, 1)
    running_sum = torch.zeros_like(running_max)  # (..., bq, 1)
    acc = q_block.new_zeros(*leading, q_block.shape[-2], values.shape[-1])  # (..., bq, d_v)
    for k_start, k_end in key_ranges:
        k_block = keys[..., k_start:k_end, :].to(compute_dtype)  # (..., bk, d_k)
        v_block = values[..., k_start:k_end, :].to(compute_dtype)  # (..., bk, d_v)
        scores = q_block @ k_block.transpose(-2, -1)  # (..., bq, bk): the only scores that exist now
        if causal and k_end - 1 > q_start:  # the block straddles the diagonal
            key_pos = torch.arange(k_start, k_end, device=scores.device)  # (bk,)
            query_pos = torch.arange(q_start, q_start + q_block.shape[-2], device=scores.device)  # (bq,)
            scores.masked_fill_(key_pos[None, :] > query_pos[:, None], float("-inf"))  # keys after each query
        running_max, rescale, weights = _online_step(running_max, scores)  # weights: unnormalised, (..., bq, bk)
        running_sum = running_sum * rescale + weights.sum(dim=-1, keepdim=True)
        acc = acc * rescale + weights @ v_block  # (..., bq, d_v)
    return acc / running_sum


def partial_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    *,
    causal: bool = False,
    query_offset: int = 0,
    key_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over one block of keys, ``out = softmax(scores) @ values``, and what a merge
    (:func:`merge_partial_attention`, as in split-KV decoding and ring attention) needs: ``lse =
    log(sum(exp(scores)))`` per query. ``causal`` places query ``i`` at ``query_offset + i`` and key ``j`` at
    ``key_offset + j``. Float32 results for float16 and bfloat16 inputs; a query that sees no key gets ``out = 0``
    and ``lse = -inf``."""
    check_attention_inputs(queries, keys, values)
    check_bool("causal", causal)
    check_positive_int("query_offset", query_offset, minimum=0)
    check_positive_int("key_offset", key_offset, minimum=0)
    compute_dtype = _accumulation_dtype(queries.dtype)
    q = queries.to(compute_dtype) * (1.0 / math.sqrt(queries.shape[-1]))  # (..., num_queries, d_k)
    attn_scores = q @ keys.to(compute_dtype).transpose(-2, -1)  # (..., num_queries, num_keys)
    if causal:
        query_pos = torch.arange(query_offset, query_offset + queries.shape[-2], device=q.device)
        key_pos = torch.arange(key_offset, key_offset + keys.shape[-2], device=q.device)
        attn_scores = attn_scores.masked_fill(key_pos[None, :] > query_pos[:, None], float("-inf"))
    lse = torch.logsumexp(attn_scores, dim=-1)  # (..., num_queries); -inf where every key is hidden
    # Subtracting 0 instead of -inf for such rows keeps their weights exp(-inf) = 0 rather than nan.
    attn_weights = torch.exp(attn_scores - lse.masked_fill(lse == float("-inf"), 0.0)[..., None])
    return attn_weights @ values.to(compute_dtype), lse


def merge_partial_attention(outs, lses) -> torch.Tensor:
    """Attention over all keys from :func:`partial_attention` over disjoint blocks of them: block ``b`` divided by
    its own sum ``exp(lse_b)``, the whole softmax divides by ``exp(lse) = sum_b exp(lse_b)``, so each block's output
    is weighted by ``exp(lse_b - lse)``. A query that sees no key gets zeros, as from SDPA, not ``nan``."""
    outs = list(outs)
    lses = list(lses)
    if not outs or len(outs) != len(lses):
        raise ValueError(f"need one lse per output and at least one block, got {len(outs)} outs and {len(lses)} lses")
    for i, (out, lse) in enumerate(zip(outs, lses, strict=True)):
        check_tensor(f"outs[{i}]", out, 2, "(..., num_queries, d_v)")
        check_tensor(f"lses[{i}]", lse, 1, "(..., num_queries)")
        if out.dtype != outs[0].dtype or lse.dtype != outs[0].dtype:
            raise TypeError(
                f"every block's outs and lses must share one dtype, got outs[0] {outs[0].dtype}, "
                f"outs[{i}] {out.dtype} and lses[{i}] {lse.dtype}"
            )
        if out.shape != outs[0].shape or lse.shape != out.shape[:-1]:
            raise ValueError(
                f"every block must give outs of shape {tuple(outs[0].shape)} and lses of shape "
                f"{tuple(outs[0].shape[:-1])}, got outs[{i}] {tuple(out.shape)} and lses[{i}] {tuple(lse.shape)}"
            )
    lse_all = torch.logsumexp(torch.stack(lses), dim=0)  # (..., num_queries); -inf where no block saw a key
    # Such a query would get exp(-inf - -inf) = nan; dividing by exp(0) instead gives every block the weight
    # exp(-inf) = 0, so the query's output is 0, the rule of SDPA and FlashAttention-2.
    lse_all = lse_all.masked_fill(lse_all == float("-inf"), 0.0)
    merged = torch.zeros_like(outs[0])
    for out, lse in zip(outs, lses, strict=True):
        merged = merged + out * torch.exp(lse - lse_all)[..., None]
    return merged
