"""Self-attention modules, from the simplest single head to multi-head attention.

The classes keep the constructor arguments, parameter names (``W_query``, ``W_key``, ``W_value``, ``out_proj``)
and parameter creation order of the classes in chapter 3 of Sebastian Raschka's *Build a Large Language Model
(From Scratch)*, so that the same ``torch.manual_seed`` gives the same weights, and therefore the book's numbers.

Inputs are batch-first: ``(batch, num_tokens, d_in)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_bool_mask,
    check_heads,
    check_module_dtype,
    check_positive_int,
    check_probability,
    check_same_device,
    check_size,
    check_tensor,
    shape_str,
)
from .functional import scaled_dot_product_attention


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


def _check_kv_heads(num_heads: int, num_kv_heads: int) -> None:
    check_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads} so that every key/value head "
            f"serves the same number of query heads (num_heads % num_kv_heads = {num_heads % num_kv_heads})"
        )


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

    ``nn.Linear`` stores its weight transposed, ``(d_out, d_in)``, computes ``x @ weight.T (+ bias)``
    and starts from a better-scaled random initialisation than ``torch.rand``. To copy a V2 into a V1,
    copy under ``torch.no_grad()``: ``v1.W_query.copy_(v2.W_query.weight.T)`` (likewise for keys and values).
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

    The causal mask is a buffer (``register_buffer``): it is part of the module's state, so
    ``module.to(device)`` moves it along with the weights, but it is not a trainable parameter.
    ``dropout`` is applied to the attention weights during training.

    Input ``(batch, num_tokens, d_in)`` with ``num_tokens <= context_length``;
    output ``(batch, num_tokens, d_out)``.
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
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), 1))

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        """Return ``context_vec`` ``(batch, num_tokens, d_out)`` (and the ``(batch, num_tokens,
        num_tokens)`` attention weights when ``return_weights`` is set)."""
        _check_input(self, x)
        num_tokens = x.shape[1]
        _check_context_length(num_tokens, self.context_length)
        context_vec, attn_weights = scaled_dot_product_attention(
            self.W_query(x),
            self.W_key(x),
            self.W_value(x),
            mask=self.mask[:num_tokens, :num_tokens],
            dropout=self.dropout,
        )
        return (context_vec, attn_weights) if return_weights else context_vec


class MultiHeadAttentionWrapper(nn.Module):
    """``num_heads`` independent :class:`CausalAttention` heads, outputs concatenated.

    Each head has its own ``d_in -> d_out`` projections, so the output width is ``num_heads * d_out``.

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
    """Multi-head attention with one set of ``d_in -> d_out`` projections split into heads.

    Each of the ``num_heads`` heads works on its own ``head_dim = d_out // num_heads`` slice of the
    projected queries, keys and values; the heads' outputs are concatenated back to ``d_out`` and mixed
    by ``out_proj``.

    Two paths compute the same result:

    - the *explicit* path, :func:`~attention_helpers.functional.scaled_dot_product_attention`, which
      materialises the ``(batch, num_heads, num_tokens, num_tokens)`` attention weights. It is used when
      ``return_weights=True``, and in training mode with ``dropout > 0`` so that dropout masks are drawn
      exactly as in the book (``nn.Dropout`` on the weights);
    - the *fast* path, ``F.scaled_dot_product_attention``, a fused kernel that never stores the weights.

    Two options serve a decoder (lesson 10):

    - *cross-attention*: ``forward(x, context=c)`` takes the queries from ``x`` and the keys and values from
      another sequence ``c`` (an encoder's output), on a module built with ``causal=False``;
    - a *KV cache* for generation: ``forward(x, use_cache=True)`` keeps this call's keys and values in
      ``cache_k`` and ``cache_v`` and lets the next call's queries attend to them, so that a new token costs
      one token's projections instead of the whole prefix's. ``reset_cache()`` empties it.

    Args:
        d_in, d_out: input and output widths.
        context_length: the most tokens a causal module accepts (its mask buffer is that size);
            may be ``None`` when ``causal=False``.
        dropout: probability of dropping an attention weight during training, in [0, 1).
        num_heads: number of heads; must divide ``d_out``.
        qkv_bias: whether the query, key and value projections have a bias.
        causal: hide future tokens (default, as in the book); ``False`` for an encoder.
        proj_bias: whether ``out_proj`` has a bias.
        num_kv_heads: key/value heads for grouped-query attention; must divide ``num_heads``. ``None`` (the
            default) gives every query head its own key and value head. With fewer, ``W_key`` and ``W_value``
            project to ``num_kv_heads * head_dim`` and query head ``h`` uses key/value head
            ``h // (num_heads // num_kv_heads)``, as ``F.scaled_dot_product_attention(..., enable_gqa=True)``;
            ``num_kv_heads=1`` is multi-query attention.

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
        num_kv_heads: int | None = None,
    ):
        super().__init__()
        _check_sizes(d_in, d_out)
        check_heads(d_out, num_heads)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        _check_kv_heads(num_heads, num_kv_heads)
        check_probability("dropout", dropout)
        if context_length is None:
            if causal:
                raise ValueError("context_length=None is only allowed with causal=False; give the longest input length")
        else:
            check_positive_int("context_length", context_length)
        self.d_in, self.d_out, self.context_length = d_in, d_out, context_length
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = d_out // num_heads
        self.causal = causal
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out, bias=proj_bias)
        self.dropout = nn.Dropout(dropout)
        if causal:
            self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), 1))
        else:
            self.mask = None
        # KV cache: plain attributes, not buffers, so that it stays out of state_dict(). Each is None or
        # (batch, num_kv_heads, num_cached_tokens, head_dim): stored before any repetition to query heads.
        self.cache_k: torch.Tensor | None = None
        self.cache_v: torch.Tensor | None = None

    def reset_cache(self) -> None:
        """Forget the cached keys and values (before generating from a new prompt)."""
        self.cache_k = self.cache_v = None

    @property
    def num_cached_tokens(self) -> int:
        return 0 if self.cache_k is None else self.cache_k.shape[2]

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        batch, num_tokens, width = t.shape  # width: num_heads * head_dim, or num_kv_heads * head_dim for keys/values
        # (batch, num_tokens, width) -> (batch, num_tokens, heads, head_dim) -> (batch, heads, num_tokens, head_dim)
        return t.view(batch, num_tokens, width // self.head_dim, self.head_dim).transpose(1, 2)

    def _repeat_kv_heads(self, t: torch.Tensor) -> torch.Tensor:
        """``(batch, num_kv_heads, num_keys, head_dim)`` -> ``(batch, num_heads, num_keys, head_dim)``: each key/value
        head repeated for its group of consecutive query heads."""
        return t.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)

    def _fused_attention(self, queries, keys, values, **options) -> torch.Tensor:
        """``F.scaled_dot_product_attention`` with each key/value head shared by its group of query heads.

        torch 2.5 and later share the heads inside the kernel (``enable_gqa=True``, no copy); older torch has no
        such argument, so there the key/value heads are repeated first. With equal heads nothing is shared.
        """
        if self.num_kv_heads == self.num_heads:
            return F.scaled_dot_product_attention(queries, keys, values, **options)
        try:
            return F.scaled_dot_product_attention(queries, keys, values, enable_gqa=True, **options)
        except TypeError as error:  # torch < 2.5: "got an unexpected keyword argument 'enable_gqa'"
            if "enable_gqa" not in str(error):
                raise
        keys, values = self._repeat_kv_heads(keys), self._repeat_kv_heads(values)
        return F.scaled_dot_product_attention(queries, keys, values, **options)

    def _check_context(self, x: torch.Tensor, context: torch.Tensor | None, use_cache: bool) -> torch.Tensor:
        """The sequence keys and values come from: ``context`` for cross-attention, else ``x`` itself."""
        if context is None:
            return x
        if self.causal:
            raise ValueError(
                "context= (cross-attention) needs a module built with causal=False: a causal mask relates positions "
                "within one sequence and has no meaning between the queries' sequence and the context's"
            )
        if use_cache:
            raise ValueError("use_cache=True caches self-attention keys and values; it cannot be used with context=")
        layout = "(batch, num_context_tokens, d_in)"
        check_tensor("context", context, (3,), layout)
        check_size("context", context, -1, self.d_in, "d_in", layout)
        if context.shape[0] != x.shape[0]:
            raise ValueError(
                f"context has batch={context.shape[0]} but x has batch={x.shape[0]} "
                f"(context {shape_str(context.shape)}, x {shape_str(x.shape)})"
            )
        if context.dtype != x.dtype:
            raise TypeError(f"context has dtype {context.dtype} but x has dtype {x.dtype}; convert one to the other")
        check_same_device("context", context, "x", x)
        return context

    def _check_cache(self, batch: int, num_tokens: int) -> None:
        if not self.causal:
            raise ValueError(
                "use_cache=True needs a causal module: without the causal mask, earlier tokens' outputs change "
                "when a token is added, so they cannot be reused"
            )
        num_cached = self.num_cached_tokens
        if num_cached + num_tokens > self.context_length:
            raise ValueError(
                f"the KV cache holds {num_cached} tokens and x adds {num_tokens}, more than "
                f"context_length={self.context_length}; call reset_cache() or keep the input shorter"
            )
        if self.cache_k is not None and self.cache_k.shape[0] != batch:
            raise ValueError(
                f"the KV cache holds keys for batch={self.cache_k.shape[0]} but x has batch={batch}; "
                "call reset_cache() before a new batch"
            )

    def _append_to_cache(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this call's keys and values after the cached ones; return all of them.

        Under a causal mask, a token's key and value depend on that token and earlier ones only, so the
        cached keys and values of earlier tokens are exactly what a full recomputation would give.
        """
        if self.cache_k is not None:
            keys = torch.cat([self.cache_k, keys], dim=2)  # (batch, num_kv_heads, num_cached + num_tokens, head_dim)
            values = torch.cat([self.cache_v, values], dim=2)
        self.cache_k, self.cache_v = keys, values
        return keys, values

    def _hidden_positions(
        self, num_tokens: int, num_keys: int, key_padding_mask: torch.Tensor | None
    ) -> torch.Tensor | None:
        """Boolean mask broadcastable to ``(batch, num_heads, num_tokens, num_keys)``, True = hide.

        With a KV cache, query i is the token at absolute position ``num_keys - num_tokens + i``, so the causal
        mask's rows are taken from that offset. A single query (one new token during generation) comes after
        every key it is given, so it needs no causal mask at all, which lets the fused kernel take its fast path.
        """
        offset = num_keys - num_tokens  # tokens already in the cache (0 without one)
        causal = self.causal and num_tokens > 1
        mask = self.mask[offset : offset + num_tokens, :num_keys] if causal else None  # (num_tokens, num_keys)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]  # (batch, 1, 1, num_keys): hide padded keys
            mask = padding if mask is None else (mask | padding)
        return mask

    def forward(
        self,
        x: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        return_weights: bool = False,
        *,
        context: torch.Tensor | None = None,
        use_cache: bool = False,
    ):
        """Attend from ``x`` over ``x`` itself, or over ``context`` (cross-attention).

        Args:
            x: ``(batch, num_tokens, d_in)``, the sequence the queries come from.
            key_padding_mask: optional boolean ``(batch, num_keys)`` (or broadcastable to it), ``True`` for
                padding tokens that no query may attend to (the convention of ``nn.MultiheadAttention``).
                ``num_keys`` is ``num_context_tokens`` with a context, ``num_cached_tokens + num_tokens``
                with the cache, else ``num_tokens``.
            return_weights: also return the per-head attention weights (explicit path).
            context: optional ``(batch, num_context_tokens, d_in)``; keys and values come from it. Only for a
                module built with ``causal=False``, whose queries then see every context token.
            use_cache: append this call's keys and values to ``cache_k``/``cache_v`` and attend over all the
                cached ones; ``x`` holds the tokens after those already cached (causal modules only).

        Returns:
            ``context_vec`` ``(batch, num_tokens, d_out)``, or ``(context_vec, attn_weights)`` with
            ``attn_weights`` ``(batch, num_heads, num_tokens, num_keys)`` when ``return_weights``.
        """
        _check_input(self, x)
        batch, num_tokens, _ = x.shape
        _check_context_length(num_tokens, self.context_length)
        source = self._check_context(x, context, use_cache)  # (batch, num_source_tokens, d_in)
        if use_cache:
            self._check_cache(batch, num_tokens)
        num_keys = source.shape[1] + (self.num_cached_tokens if use_cache else 0)
        if key_padding_mask is not None:
            check_bool_mask("key_padding_mask", key_padding_mask, (batch, num_keys), "(batch, num_keys)", x)
            key_padding_mask = key_padding_mask.expand(batch, num_keys)  # (num_keys,) serves every sequence
        return self.attend(x, key_padding_mask, return_weights, context=context, use_cache=use_cache)

    def attend(self, x, key_padding_mask=None, return_weights=False, *, context=None, use_cache=False):
        """:meth:`forward` without its input checks, for a module that checked its inputs once for all its layers:
        ``key_padding_mask`` must be ``None`` or a boolean ``(batch, num_keys)`` tensor, True at padding."""
        batch, num_tokens, _ = x.shape
        source = x if context is None else context
        num_keys = source.shape[1] + (self.num_cached_tokens if use_cache else 0)
        queries = self.split_heads(self.W_query(x))  # (batch, num_heads, num_tokens, head_dim)
        keys = self.split_heads(self.W_key(source))  # (batch, num_kv_heads, num_source_tokens, head_dim)
        values = self.split_heads(self.W_value(source))
        if use_cache:
            keys, values = self._append_to_cache(keys, values)  # (batch, num_kv_heads, num_keys, head_dim)

        dropout_active = self.training and self.dropout.p > 0
        if return_weights or dropout_active:
            mask = self._hidden_positions(num_tokens, num_keys, key_padding_mask)
            keys, values = self._repeat_kv_heads(keys), self._repeat_kv_heads(values)
            context_vec, attn_weights = scaled_dot_product_attention(queries, keys, values, mask, self.dropout)
        else:
            attn_weights = None
            if key_padding_mask is None and num_keys == num_tokens:
                # Fused kernel; is_causal lets it skip the hidden upper triangle without building a mask.
                context_vec = self._fused_attention(queries, keys, values, is_causal=self.causal)
            else:
                # is_causal would align the mask's top-left corner, wrong for queries after cached tokens; and
                # F.scaled_dot_product_attention's boolean masks mark positions that MAY be attended.
                hidden = self._hidden_positions(num_tokens, num_keys, key_padding_mask)
                keep = None if hidden is None else ~hidden
                context_vec = self._fused_attention(queries, keys, values, attn_mask=keep)

        # Move the head axis back next to head_dim *before* merging them:
        # (batch, num_heads, num_tokens, head_dim) -> (batch, num_tokens, num_heads, head_dim)
        #                                         -> (batch, num_tokens, d_out)
        context_vec = context_vec.transpose(1, 2).reshape(batch, num_tokens, self.d_out)
        context_vec = self.out_proj(context_vec)
        return (context_vec, attn_weights) if return_weights else context_vec

    @classmethod
    def from_torch(
        cls, torch_mha: nn.MultiheadAttention, *, causal: bool = False, context_length: int | None = None
    ) -> MultiHeadAttention:
        """Build a module with the same weights as a ``torch.nn.MultiheadAttention``.

        Unlike the constructor, ``causal`` defaults to ``False`` here: torch's module has no built-in mask.

        Ours is always batch-first, ``(batch, num_tokens, embed_dim)``. A torch module built with
        ``batch_first=False`` (torch's default) reads its input as ``(num_tokens, batch, embed_dim)``: fed the
        same tensor, it silently attends over the batch axis instead of the tokens. Compare with a module built
        with ``batch_first=True``, or transpose its input and output (``x.transpose(0, 1)``).

        Given the same self-attention input, both compute the same output; pass ``causal=True`` (and a
        ``context_length``) to compare with torch's module run with a causal ``attn_mask``.
        ``d_in = d_out = embed_dim``, since torch's query projection is square.
        """
        from . import interop  # interop imports this module

        return interop.from_torch(torch_mha, into=cls, causal=causal, context_length=context_length)
