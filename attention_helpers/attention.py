"""Self-attention modules, from the simplest single head to multi-head attention.

The classes keep the constructor arguments, parameter names (``W_query``, ``W_key``, ``W_value``, ``out_proj``)
and parameter creation order of the classes in chapter 3 of Sebastian Raschka's *Build a Large Language Model
(From Scratch)* (code: rasbt/LLMs-from-scratch), so that the same ``torch.manual_seed`` gives the same weights,
and therefore the book's numbers. Inputs are batch-first: ``(batch, num_tokens, d_in)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_bool,
    check_heads,
    check_module_dtype,
    check_padding_mask,
    check_positive_int,
    check_probability,
    check_same_device,
    check_size,
    check_tensor,
    shape_str,
)
from .functional import causal_mask, scaled_dot_product_attention


def _check_input(module: nn.Module, x, ndims: tuple[int, ...] = (3,)) -> None:
    """Check ``x`` against ``module``'s ``d_in`` and the dtype of its query weights."""
    layout = "(batch, num_tokens, d_in)" if ndims == (3,) else "(num_tokens, d_in) or (batch, num_tokens, d_in)"
    check_tensor("x", x, ndims, layout)
    check_size("x", x, -1, module.d_in, "d_in", layout)
    weight = module.W_query if isinstance(module.W_query, torch.Tensor) else module.W_query.weight
    check_module_dtype("x", x, weight, type(module).__name__)


def _check_context_length(num_tokens: int, context_length: int | None) -> None:
    if context_length is not None and num_tokens > context_length:
        raise ValueError(
            f"x has num_tokens={num_tokens} but the module was built with context_length={context_length}; "
            "build it with a larger context_length"
        )


def _check_sizes(d_in, d_out) -> None:
    check_positive_int("d_in", d_in)
    check_positive_int("d_out", d_out)


def _check_context(module: nn.Module, x: torch.Tensor, context: torch.Tensor) -> None:
    """``context``, the sequence cross-attention takes keys and values from, against ``x`` and ``module``."""
    if module.causal:
        raise ValueError(
            "context= (cross-attention) needs a module built with causal=False: a causal mask relates positions "
            "within one sequence and has no meaning between the queries' sequence and the context's"
        )
    layout = "(batch, num_context_tokens, d_in)"
    check_tensor("context", context, (3,), layout)
    check_size("context", context, -1, module.d_in, "d_in", layout)
    if context.shape[0] != x.shape[0]:
        raise ValueError(
            f"context has batch={context.shape[0]} but x has batch={x.shape[0]} "
            f"(context {shape_str(context.shape)}, x {shape_str(x.shape)})"
        )
    if context.dtype != x.dtype:
        raise TypeError(f"context has dtype {context.dtype} but x has dtype {x.dtype}; convert one to the other")
    check_same_device("context", context, "x", x)


class SelfAttentionV1(nn.Module):
    """Single-head self-attention with hand-made weight matrices.

    ``W_query``, ``W_key`` and ``W_value`` are ``(d_in, d_out)`` Parameters filled by ``torch.rand``,
    so ``x @ W_query`` maps each token from ``d_in`` to ``d_out`` dimensions.

    Input ``(num_tokens, d_in)`` or ``(batch, num_tokens, d_in)``; output the same with ``d_out``.
    """

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        _check_sizes(d_in, d_out)
        self.d_in, self.d_out = d_in, d_out
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        """Return ``context_vec`` ``(..., num_tokens, d_out)``, and the ``(..., num_tokens, num_tokens)``
        attention weights too when ``return_weights`` is set."""
        _check_input(self, x, (2, 3))
        queries = x @ self.W_query  # (..., num_tokens, d_out)
        keys = x @ self.W_key
        values = x @ self.W_value
        context_vec, attn_weights = scaled_dot_product_attention(queries, keys, values)
        return (context_vec, attn_weights) if return_weights else context_vec


class SelfAttentionV2(nn.Module):
    """:class:`SelfAttentionV1` with ``nn.Linear`` projections.

    ``nn.Linear`` stores its weight transposed, ``(d_out, d_in)``, and starts from a better-scaled random
    initialisation than ``torch.rand``. Under ``torch.no_grad()``, ``v1.W_query.copy_(v2.W_query.weight.T)``.
    """

    def __init__(self, d_in: int, d_out: int, qkv_bias: bool = False):
        super().__init__()
        _check_sizes(d_in, d_out)
        self.d_in, self.d_out = d_in, d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        """Input ``(num_tokens, d_in)`` or ``(batch, num_tokens, d_in)``; output ``(..., num_tokens, d_out)``."""
        _check_input(self, x, (2, 3))
        context_vec, attn_weights = scaled_dot_product_attention(self.W_query(x), self.W_key(x), self.W_value(x))
        return (context_vec, attn_weights) if return_weights else context_vec


class CausalAttention(nn.Module):
    """Single-head attention in which each token attends only to itself and earlier tokens.

    The causal mask is a buffer (``register_buffer``): ``module.to(device)`` moves it with the weights, but it
    is not a trainable parameter. ``dropout`` is applied to the attention weights during training.

    Input ``(batch, num_tokens, d_in)`` with ``num_tokens <= context_length``; output ``(batch, num_tokens, d_out)``.
    """

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, qkv_bias: bool = False):
        super().__init__()
        _check_sizes(d_in, d_out)
        check_positive_int("context_length", context_length)
        check_probability("dropout", dropout)
        self.d_in, self.d_out, self.context_length = d_in, d_out, context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        # True above the diagonal: key j is in query i's future when j > i.
        self.register_buffer("mask", causal_mask(context_length))

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        """Return ``context_vec`` ``(batch, num_tokens, d_out)`` (and the ``(batch, num_tokens,
        num_tokens)`` attention weights when ``return_weights`` is set)."""
        _check_input(self, x)
        num_tokens = x.shape[1]
        _check_context_length(num_tokens, self.context_length)
        mask = self.mask[:num_tokens, :num_tokens]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        context_vec, attn_weights = scaled_dot_product_attention(queries, keys, values, mask, self.dropout)
        return (context_vec, attn_weights) if return_weights else context_vec


class MultiHeadAttentionWrapper(nn.Module):
    """``num_heads`` independent :class:`CausalAttention` heads (each ``d_in -> d_out``), outputs concatenated.

    Input ``(batch, num_tokens, d_in)``; output ``(batch, num_tokens, num_heads * d_out)``.
    """

    def __init__(
        self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int, qkv_bias: bool = False
    ):
        super().__init__()
        check_positive_int("num_heads", num_heads)
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        """Return the concatenated context vectors (and the ``(batch, num_heads, num_tokens, num_tokens)``
        weights of every head when ``return_weights`` is set)."""
        outputs = [head(x, return_weights=True) for head in self.heads]
        context_vec = torch.cat([context for context, _ in outputs], dim=-1)
        if not return_weights:
            return context_vec
        return context_vec, torch.stack([weights for _, weights in outputs], dim=1)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: one set of ``d_in -> d_out`` projections split into ``num_heads`` heads.

    Each head works on its own ``head_dim = d_out // num_heads`` slice of the projected queries, keys and values;
    the heads' outputs are concatenated back to ``d_out`` and mixed by ``out_proj``. One flag, ``fused``, picks
    between two paths that compute the same result:

    - the *explicit* path, :func:`~attention_helpers.functional.scaled_dot_product_attention`, which materialises
      the ``(batch, num_heads, num_tokens, num_keys)`` attention weights. It also runs when ``return_weights=True``
      and in training mode with ``dropout > 0`` (``nn.Dropout`` on the weights, so the masks are the book's);
    - the *fused* path, ``F.scaled_dot_product_attention``, one kernel that never stores the weights.

    Args:
        d_in, d_out: input and output widths.
        context_length: the most tokens a causal module accepts (its mask buffer is that size); may be ``None``
            when ``causal=False``.
        dropout: probability of dropping an attention weight during training, in [0, 1).
        num_heads: number of heads; must divide ``d_out``.
        qkv_bias, proj_bias: whether the query, key and value projections, and ``out_proj``, have biases.
        causal: hide future tokens (default, as in the book); ``False`` for an encoder.
        fused: take the fused path whenever the weights are not needed (default ``True``).

    Input ``(batch, num_tokens, d_in)``; output ``(batch, num_tokens, d_out)``.
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
    ):
        super().__init__()
        _check_sizes(d_in, d_out)
        check_heads(d_out, num_heads)
        check_probability("dropout", dropout)
        check_bool("causal", causal)
        check_bool("fused", fused)
        if context_length is None and causal:
            raise ValueError("context_length=None is only allowed with causal=False; give the longest input length")
        if context_length is not None:
            check_positive_int("context_length", context_length)
        self.d_in, self.d_out, self.context_length, self.causal, self.fused = d_in, d_out, context_length, causal, fused
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out, bias=proj_bias)
        self.dropout = nn.Dropout(dropout)
        # True above the diagonal: key j is in query i's future when j > i.
        self.register_buffer("mask", causal_mask(context_length) if causal else None)

    def forward(self, x, key_padding_mask=None, return_weights=False, *, context=None):
        """Attend from ``x`` ``(batch, num_tokens, d_in)`` over ``x`` itself, or over ``context`` (cross-attention).

        ``key_padding_mask``: optional boolean ``(batch, num_keys)`` or ``(num_keys,)``, ``True`` at padding that
        no query may attend to (``nn.MultiheadAttention``'s convention). ``context``: optional
        ``(batch, num_keys, d_in)`` that keys and values come from, for a module built with ``causal=False``.
        Returns ``context_vec`` ``(batch, num_tokens, d_out)``, and the ``attn_weights``
        ``(batch, num_heads, num_tokens, num_keys)`` too when ``return_weights``.
        """
        key_padding_mask = self.check_inputs(x, key_padding_mask, context)
        return self.forward_unchecked(x, key_padding_mask, return_weights, context=context)

    def check_inputs(self, x, key_padding_mask=None, context=None, num_keys: int | None = None):
        """Raise a clear error for a bad input; return ``key_padding_mask`` expanded to ``(batch, num_keys)``."""
        _check_input(self, x)
        _check_context_length(x.shape[1], self.context_length)
        if context is not None:
            _check_context(self, x, context)
        num_keys = num_keys or (x if context is None else context).shape[1]
        return check_padding_mask("key_padding_mask", key_padding_mask, x, "num_keys", num_keys)

    def forward_unchecked(self, x, key_padding_mask=None, return_weights: bool = False, *, context=None):
        """:meth:`forward` without its input checks, for a module that checks its inputs once for all its layers:
        ``key_padding_mask`` must be ``None`` or a boolean ``(batch, num_keys)`` tensor, True at padding."""
        source = x if context is None else context
        queries = self.split_heads(self.W_query(x))  # (batch, num_heads, num_tokens, head_dim)
        keys = self.split_heads(self.W_key(source))  # (batch, num_heads, num_keys, head_dim)
        values = self.split_heads(self.W_value(source))
        hidden = None if key_padding_mask is None else key_padding_mask[:, None, None, :]  # (batch, 1, 1, num_keys)
        context_vec, attn_weights = self.attend_heads(queries, keys, values, hidden, self.causal, return_weights)
        return self.merge_heads(context_vec, attn_weights, return_weights)

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """``(batch, num_tokens, heads * head_dim)`` -> ``(batch, heads, num_tokens, head_dim)``."""
        return t.unflatten(-1, (-1, self.head_dim)).transpose(1, 2)

    def merge_heads(self, context_vec: torch.Tensor, attn_weights, return_weights: bool):
        """``(batch, num_heads, num_tokens, head_dim)`` -> ``(batch, num_tokens, d_out)``: the head axis goes back next
        to head_dim *before* the two are merged; then ``out_proj`` mixes the heads."""
        context_vec = self.out_proj(context_vec.transpose(1, 2).flatten(2))
        return (context_vec, attn_weights) if return_weights else context_vec

    def attend_heads(self, queries, keys, values, hidden=None, causal: bool = False, return_weights: bool = False):
        """Every head at once: ``queries`` ``(batch, num_heads, num_tokens, head_dim)``, ``keys``, ``values`` ``(batch,
        num_heads, num_keys, head_dim)`` -> ``(context_vec, attn_weights or None)``. ``hidden``: None or a boolean mask
        broadcastable to ``(batch, num_heads, num_tokens, num_keys)``, True = hide; ``causal`` also hides key j > i."""
        num_tokens, num_keys = queries.shape[2], keys.shape[2]
        explicit = return_weights or not self.fused or (self.training and self.dropout.p > 0)
        if causal and (explicit or hidden is not None):
            future = self.mask[:num_tokens, :num_keys]  # (num_tokens, num_keys)
            hidden, causal = (future if hidden is None else hidden | future), False
        if explicit:
            return scaled_dot_product_attention(queries, keys, values, hidden, self.dropout)
        # F.scaled_dot_product_attention's boolean masks mark the positions that MAY be attended.
        keep = None if hidden is None else ~hidden
        return F.scaled_dot_product_attention(queries, keys, values, attn_mask=keep, is_causal=causal), None

    @classmethod
    def from_torch(cls, torch_mha: nn.MultiheadAttention, *, causal=False, context_length=None) -> MultiHeadAttention:
        """The weights of a ``torch.nn.MultiheadAttention`` (batch-first!): :func:`~attention_helpers.from_torch`."""
        from . import interop  # interop imports this module

        return interop.from_torch(torch_mha, into=cls, causal=causal, context_length=context_length)
