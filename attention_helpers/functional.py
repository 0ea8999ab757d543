"""Attention as plain functions: scores, softmax, the causal mask and scaled dot-product attention.

In every mask of this package (as in ``nn.MultiheadAttention``'s boolean masks) ``True`` marks a position to *hide*;
``F.scaled_dot_product_attention``'s ``True`` means "may attend".
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._checks import (
    check_attention_inputs,
    check_bool_mask,
    check_dim,
    check_positive_int,
    check_size,
    check_temperature,
    check_tensor,
    is_compiling,
    shape_str,
)


def attention_scores_loop(inputs: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """``inputs`` ``(num_tokens, d)``, ``query`` ``(d,)`` -> scores ``(num_tokens,)``, one loop step per token: the
    slow, obvious version of ``inputs @ query``."""
    check_tensor("inputs", inputs, (2,), "(num_tokens, d)", "num_tokens")
    check_tensor("query", query, (1,), "(d,)")
    check_size("query", query, 0, inputs.shape[1], "d", "(d,) matching inputs' (num_tokens, d)")
    scores = torch.empty(inputs.shape[0], dtype=inputs.dtype, device=inputs.device)
    for i, x_i in enumerate(inputs):
        scores[i] = torch.dot(x_i, query)
    return scores


def softmax_naive(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``, as written on paper. Overflows for large scores (``exp(100.)`` is
    ``inf`` in float32, ``exp(12.)`` in float16, and ``inf / inf`` is ``nan``): use :func:`softmax_stable`."""
    check_tensor("x", x, 1, "(..., num_scores)")
    check_dim("dim", dim, x)
    exp_x = torch.exp(x)
    return exp_x / exp_x.sum(dim=dim, keepdim=True)


def softmax_stable(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``exp(x - m) / sum(exp(x - m))`` with ``m = max(x)``: equal to :func:`softmax_naive` (the ``exp(-m)`` factors
    cancel), but no term exceeds 1, so ``exp`` cannot overflow. Float16 and bfloat16 are computed in float32."""
    check_tensor("x", x, 1, "(..., num_scores)")
    check_dim("dim", dim, x)
    if x.shape[dim] == 0:
        raise ValueError(f"x has no scores along dim={dim} (shape {shape_str(x.shape)}): softmax needs at least one")
    x_acc = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    exp_x = torch.exp(x_acc - x_acc.amax(dim=dim, keepdim=True))
    return (exp_x / exp_x.sum(dim=dim, keepdim=True)).to(x.dtype)


def softmax_with_temperature(x: torch.Tensor, temperature: float, dim: int = -1) -> torch.Tensor:
    """``softmax(x / temperature)``: below 1 sharpens the weights towards the largest score, above 1 flattens them
    towards uniform. 0 is refused: ``x / 0`` has no softmax (sampling functions read 0 as greedy instead)."""
    check_tensor("x", x, 1, "(..., num_scores)")
    check_temperature(temperature)
    return softmax_stable(x / temperature, dim=dim)


def random_dot_products(d_k: int, num_pairs: int = 2000, generator: torch.Generator | None = None) -> torch.Tensor:
    """``(num_pairs,)`` dot products ``q · k`` of standard normal ``d_k``-vectors: sums of ``d_k`` terms of variance
    1, so their standard deviation is ``sqrt(d_k)``, the reason attention divides the scores by ``sqrt(d_k)``."""
    check_positive_int("d_k", d_k)
    check_positive_int("num_pairs", num_pairs)
    queries = torch.randn(num_pairs, d_k, generator=generator)
    keys = torch.randn(num_pairs, d_k, generator=generator)
    return (queries * keys).sum(dim=-1)


def causal_mask(num_tokens: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``(num_tokens, num_tokens)``, True above the diagonal: key ``j`` is in query ``i``'s future, hidden."""
    check_positive_int("num_tokens", num_tokens)
    ones = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=1)


def attention_with_weights(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(Q Kᵀ / sqrt(d_k)) V`` step by step -> ``(context_vec (..., num_queries, d_v), attn_weights (...,
    num_queries, num_keys))``; unlike ``F.scaled_dot_product_attention``, ``mask`` hides where ``True``. ``dropout``
    (``nn.Dropout``) acts on the weights. A query whose keys are all masked gets zero weights, not ``nan``; float16
    and bfloat16 are computed in float32."""
    check_attention_inputs(queries, keys, values)
    if dropout is not None and not callable(dropout):
        raise TypeError(f"dropout must be a callable such as nn.Dropout(p), got {type(dropout).__name__}")
    dtype = queries.dtype
    if dtype in (torch.float16, torch.bfloat16):
        queries, keys, values = queries.float(), keys.float(), values.float()
    # Scale the queries first (as F.scaled_dot_product_attention does): in float16, Q·Kᵀ itself can overflow.
    attn_scores = (queries / math.sqrt(queries.shape[-1])) @ keys.transpose(-2, -1)  # (..., num_queries, num_keys)
    fully_masked = None
    if mask is not None:
        check_bool_mask("mask", mask, tuple(attn_scores.shape), "(..., num_queries, num_keys)", queries)
        attn_scores.masked_fill_(mask, float("-inf"))
        fully_masked = mask.all(dim=-1, keepdim=True)  # (..., num_queries, 1)
        # Eagerly, the fills run only when some row is fully masked; reading that is a host synchronisation that
        # breaks a compiled graph, so under torch.compile they always run (a no-op then).
        if not (is_compiling() or fully_masked.any()):
            fully_masked = None
        else:  # zero scores: no nan, not even in the backward pass; then zero weights
            attn_scores.masked_fill_(fully_masked, 0.0)
    attn_weights = torch.softmax(attn_scores, dim=-1)
    if fully_masked is not None:
        attn_weights = attn_weights.masked_fill(fully_masked, 0.0)
    if dropout is not None:
        attn_weights = dropout(attn_weights)
    context_vec = attn_weights @ values  # (..., num_queries, d_v)
    return context_vec.to(dtype), attn_weights.to(dtype)
