"""Self-attention modules, from the simplest single head to multi-head attention.

The classes keep the constructor arguments, parameter names (``W_query``, ``W_key``, ``W_value``, ``out_proj``)
and parameter creation order of the classes in chapter 3 of Sebastian Raschka's *Build a Large Language Model
(From Scratch)* (code: rasbt/LLMs-from-scratch), so that the same ``torch.manual_seed`` gives the same weights,
and therefore the book's numbers. Every module maps ``x`` ``(batch, num_tokens, d_in)`` to ``context_vec``
``(batch, num_tokens, d_out)``, and with ``return_weights=True`` returns the attention weights too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_attention_call,
    check_attention_input,
    check_attention_sizes,
    check_bool,
    check_heads,
    check_kv_heads,
    check_positive_int,
)
from ._convert import from_torch_into
from .functional import attention_with_weights, causal_mask
from .rope import rotate


class SelfAttentionV1(nn.Module):
    """Single-head self-attention, ``(d_in, d_out)`` weights filled by ``torch.rand``; also takes unbatched ``x``."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        check_attention_sizes(d_in, d_out, None, 0.0, causal=False)
        self.d_in = d_in
        self.d_out = d_out
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        check_attention_input(self, x, return_weights, (2, 3))
        queries = x @ self.W_query  # (..., num_tokens, d_out)
        keys = x @ self.W_key
        values = x @ self.W_value
        context_vec, attn_weights = attention_with_weights(queries, keys, values)
        return (context_vec, attn_weights) if return_weights else context_vec


class SelfAttentionV2(nn.Module):
    """:class:`SelfAttentionV1` with ``nn.Linear`` projections, which store the weight transposed, ``(d_out,
    d_in)``, from a better-scaled initialisation: ``v1.W_query.copy_(v2.W_query.weight.T)`` under ``no_grad``."""

    def __init__(self, d_in: int, d_out: int, qkv_bias: bool = False):
        super().__init__()
        check_attention_sizes(d_in, d_out, None, 0.0, False, qkv_bias)
        self.d_in = d_in
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        check_attention_input(self, x, return_weights, (2, 3))
        context_vec, attn_weights = attention_with_weights(self.W_query(x), self.W_key(x), self.W_value(x))
        return (context_vec, attn_weights) if return_weights else context_vec


class CausalAttention(nn.Module):
    """Single-head attention in which each token attends only to itself and earlier tokens, with dropout on the
    attention weights. The mask is a buffer: ``module.to(device)`` moves it, but it is not trained."""

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, qkv_bias: bool = False):
        super().__init__()
        check_attention_sizes(d_in, d_out, context_length, dropout, True, qkv_bias)
        self.d_in = d_in
        self.d_out = d_out
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length))

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        check_attention_input(self, x, return_weights)
        num_tokens = x.shape[1]
        mask = self.mask[:num_tokens, :num_tokens]
        context_vec, attn_weights = attention_with_weights(
            self.W_query(x), self.W_key(x), self.W_value(x), mask, self.dropout
        )
        return (context_vec, attn_weights) if return_weights else context_vec


class MultiHeadAttentionWrapper(nn.Module):
    """``num_heads`` independent :class:`CausalAttention` heads, outputs concatenated to ``num_heads * d_out``."""

    def __init__(
        self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int, qkv_bias: bool = False
    ):
        super().__init__()
        check_positive_int("num_heads", num_heads)
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        check_bool("return_weights", return_weights)
        outputs = [head(x, return_weights=True) for head in self.heads]
        context_vec = torch.cat([head_context_vec for head_context_vec, _ in outputs], dim=-1)
        if not return_weights:
            return context_vec
        return context_vec, torch.stack([weights for _, weights in outputs], dim=1)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: ``d_in -> d_out`` projections split into ``num_heads`` heads of ``head_dim = d_out //
    num_heads`` each, attended separately, concatenated back to ``d_out`` and mixed by ``out_proj``.

    Two paths compute the same result: the explicit one, :func:`~attention_helpers.functional.attention_with_weights`
    (for ``fused=False``, ``return_weights=True``, and training with ``dropout > 0``: the book's dropout masks),
    stores the ``(batch, num_heads, num_tokens, num_keys)`` weights; the fused ``F.scaled_dot_product_attention``
    never does. Later lessons' options are off by default: ``causal=False`` (an encoder, cross-attention; then
    ``context_length=None`` is allowed), ``num_kv_heads`` (grouped-query attention: query head ``h`` uses key/value
    head ``h // (num_heads // num_kv_heads)``), ``rope`` (rotary positions), and :meth:`forward`'s ``memory=``
    (cross-attention) and ``cache=`` (generation).
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        context_length: int | None,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
        *,
        causal: bool = True,
        proj_bias: bool = True,
        fused: bool = True,
        num_kv_heads: int | None = None,
        rope: bool = False,
    ):
        super().__init__()
        for name, flag in dict(qkv_bias=qkv_bias, causal=causal, proj_bias=proj_bias, fused=fused, rope=rope).items():
            check_bool(name, flag)
        check_attention_sizes(d_in, d_out, context_length, dropout, causal)
        check_heads(d_out, num_heads)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_kv_heads(num_heads, num_kv_heads)
        self.d_in = d_in
        self.d_out = d_out
        self.context_length = context_length
        self.causal = causal
        self.fused = fused
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = d_out // num_heads
        self.rope = rope
        if rope and self.head_dim % 2:
            raise ValueError(f"rope=True rotates pairs of dimensions: head_dim={self.head_dim} must be even")
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out, bias=proj_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length) if causal else None)

    def forward(
        self, x, key_padding_mask=None, return_weights=False, *, memory=None, cache=None, layer_idx=0, checked=False
    ):
        """Attend from ``x`` over itself, or over ``memory`` ``(batch, num_keys, d_in)`` (cross-attention, with
        ``causal=False``); ``attn_weights`` ``(batch, num_heads, num_tokens, num_keys)``; ``key_padding_mask``
        ``(batch, num_keys)`` or ``(num_keys,)``, True at padding. With a ``cache``, ``x`` follows the cached tokens;
        its keys and values go into layer ``layer_idx``'s slots. ``checked=True``: a model checked them."""
        if not checked:
            key_padding_mask = check_attention_call(self, x, key_padding_mask, return_weights, memory, cache)
        start = 0 if cache is None else cache.num_tokens  # query i is the token at position start + i
        queries = self.split_heads(self.W_query(x))  # (batch, num_heads, num_tokens, head_dim)
        if memory is not None:
            keys, values = self.memory_keys_values(memory, cache, layer_idx)
        else:
            keys = self.split_heads(self.W_key(x))  # (batch, num_kv_heads, num_tokens, head_dim)
            values = self.split_heads(self.W_value(x))
            if self.rope:
                positions = torch.arange(start, start + x.shape[1], device=x.device)
                queries = rotate(queries, positions)
                keys = rotate(keys, positions)
            if cache is not None:  # (batch, num_kv_heads, start + num_tokens, head_dim): the cached ones too
                keys, values = cache.update(layer_idx, keys, values, checked=checked)
        hide = None if key_padding_mask is None else key_padding_mask[:, None, None, :]  # (batch, 1, 1, num_keys)
        causal = self.causal and memory is None
        context_vec, attn_weights = self.attend_heads(queries, keys, values, hide, causal, start, return_weights)
        context_vec = self.out_proj(self.merge_heads(context_vec))  # (batch, num_tokens, d_out)
        return (context_vec, attn_weights) if return_weights else context_vec

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """``(batch, num_tokens, heads * head_dim)`` -> ``(batch, heads, num_tokens, head_dim)``."""
        heads = t.shape[-1] // self.head_dim  # explicit, not -1: a batch of 0 sequences has no size to infer from
        return t.view(t.shape[0], t.shape[1], heads, self.head_dim).transpose(1, 2)  # a projection's output: contiguous

    def merge_heads(self, context_vec: torch.Tensor) -> torch.Tensor:
        """``(batch, num_heads, num_tokens, head_dim)`` -> ``(batch, num_tokens, d_out)``."""
        return context_vec.transpose(1, 2).flatten(2)

    def memory_keys_values(self, memory, cache=None, layer_idx: int = 0):
        """Cross-attention's keys and values of ``memory``; a ``cache`` keeps them from the first call."""
        if cache is not None and cache.memory_keys[layer_idx] is not None:
            return cache.memory_keys[layer_idx], cache.memory_values[layer_idx]
        keys = self.split_heads(self.W_key(memory))  # (batch, num_kv_heads, num_memory_tokens, head_dim)
        values = self.split_heads(self.W_value(memory))
        if cache is not None:
            cache.memory_keys[layer_idx] = keys
            cache.memory_values[layer_idx] = values
        return keys, values

    def attend_heads(self, queries, keys, values, hide=None, causal=False, start=0, return_weights=False):
        """Every head at once: ``queries`` ``(batch, num_heads, num_tokens, head_dim)``, ``keys``, ``values`` ``(batch,
        num_kv_heads, num_keys, head_dim)`` -> ``(context_vec, attn_weights or None)``; ``hide`` (True: hidden) fits
        the weights, ``causal`` also hides the keys after each query i, the token at position ``start + i``."""
        num_tokens = queries.shape[2]
        if self.num_kv_heads != self.num_heads:  # each key/value head serves its group of consecutive query heads
            keys = keys.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
            values = values.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
        explicit = return_weights or not self.fused or (self.training and self.dropout.p > 0)
        causal = causal and num_tokens > 1  # one query after every key it sees: no mask (the kernel's fastest case)
        if causal and (explicit or hide is not None or start > 0):
            future = self.mask[start : start + num_tokens, : keys.shape[2]]  # (num_tokens, num_keys)
            hide = future if hide is None else hide | future
            causal = False
        if explicit:
            return attention_with_weights(queries, keys, values, hide, self.dropout)
        # F.scaled_dot_product_attention's boolean masks mark the positions that MAY be attended.
        keep = None if hide is None else ~hide
        return F.scaled_dot_product_attention(queries, keys, values, attn_mask=keep, is_causal=causal), None

    @classmethod
    def from_torch(cls, torch_mha: nn.MultiheadAttention, *, causal=False, context_length=None) -> MultiHeadAttention:
        """The weights of a ``torch.nn.MultiheadAttention`` (batch-first!): :func:`~attention_helpers.from_torch`."""
        return from_torch_into(cls, torch_mha, nn.MultiheadAttention, causal=causal, context_length=context_length)


class GroupedQueryAttention(MultiHeadAttention):
    """:class:`MultiHeadAttention` under the name lesson 11 gives it when ``num_kv_heads < num_heads``: every
    argument, method and conversion is the parent's (``from_torch``, ``to_torch``)."""
