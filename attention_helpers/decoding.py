"""What generation needs: grouped-query attention, an explicit KV cache, sampling and ``generate``.

Under a causal mask, earlier tokens' keys and values do not change when a token is added, so a generation step
can run the new token alone and reuse them. They live in a :class:`KVCache` that :func:`generate` creates, passes
to the model and gets back at each step (as Hugging Face passes ``past_key_values``): no module keeps hidden
state. Preallocated for the whole generation, the cache takes each step's keys and values in place and copies
nothing already cached (with grouped heads, attention still repeats each shared head for its query heads).
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import check_no_nan, check_positive_int, check_temperature, check_tensor, check_token_ids, shape_str
from .attention import MultiHeadAttention


class KVCache:
    """Every layer's keys and values for the tokens seen so far, preallocated for ``capacity`` tokens.

    ``keys`` and ``values`` are ``(num_layers, batch, num_kv_heads, capacity, head_dim)``; positions
    ``0 .. num_tokens - 1`` are filled. A model call writes its new tokens' keys and values after them in every
    layer (:meth:`update`), then moves ``num_tokens`` on (:meth:`advance`).
    """

    def __init__(self, num_layers, batch, num_kv_heads, capacity, head_dim, *, dtype=torch.float32, device=None):
        shape = (num_layers, batch, num_kv_heads, capacity, head_dim)
        for name, value in zip(("num_layers", "batch", "num_kv_heads", "capacity", "head_dim"), shape, strict=True):
            check_positive_int(name, value)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.num_tokens = 0

    def update(self, layer_idx: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write layer ``layer_idx``'s new ``keys`` and ``values`` ``(batch, num_kv_heads, num_new, head_dim)``
        after the ``num_tokens`` cached ones; return all of them, ``(batch, num_kv_heads, num_tokens + num_new,
        head_dim)`` views of the preallocated tensors (nothing already cached is copied, unless autograd records
        the call: then the cache is copied first, so that gradients flow through every step)."""
        start, end = self.num_tokens, self.num_tokens + keys.shape[2]
        if torch.is_grad_enabled() and (keys.requires_grad or values.requires_grad):
            # Autograd keeps the views returned by earlier writes: write into new tensors, not over them.
            self.keys, self.values = self.keys.clone(), self.values.clone()
        self.keys[layer_idx, :, :, start:end] = keys
        self.values[layer_idx, :, :, start:end] = values
        return self.keys[layer_idx, :, :, :end], self.values[layer_idx, :, :, :end]

    def advance(self, num_new: int) -> None:
        """Count ``num_new`` more cached tokens, once every layer has written them."""
        self.num_tokens += num_new


def check_kv_cache(cache, attention, batch: int, num_new: int, dtype, device, *, num_layers=None, layer_idx=0) -> None:
    """Raise a clear error if ``num_new`` tokens of ``batch`` sequences (``dtype`` on ``device``) cannot continue
    ``cache`` in layer ``layer_idx`` of a stack of ``GroupedQueryAttention`` layers like ``attention`` (a model
    with ``num_layers`` of them, when given)."""
    if not isinstance(cache, KVCache):
        raise TypeError(f"past_key_values must be a KVCache, got {type(cache).__name__}")
    cache_layers, cache_batch, num_kv_heads, capacity, head_dim = cache.keys.shape
    if num_layers is not None and num_layers != cache_layers:
        raise ValueError(
            f"the cache holds num_layers={cache_layers} but the model has num_layers={num_layers}; "
            "make one with model.new_cache(batch)"
        )
    if not 0 <= layer_idx < cache_layers:
        raise ValueError(f"layer_idx={layer_idx} but the cache holds num_layers={cache_layers}")
    if (num_kv_heads, head_dim) != (attention.num_kv_heads, attention.head_dim):
        raise ValueError(
            f"the cache holds num_kv_heads={num_kv_heads}, head_dim={head_dim} but the attention layer has "
            f"num_kv_heads={attention.num_kv_heads}, head_dim={attention.head_dim}"
        )
    if batch != cache_batch:
        raise ValueError(f"the cache holds batch={cache_batch} but the input has batch={batch}; start a new cache")
    for limit, name in ((capacity, "its capacity"), (attention.context_length, "context_length")):
        if cache.num_tokens + num_new > limit:
            raise ValueError(
                f"the cache holds {cache.num_tokens} tokens and the input adds {num_new}, more than {name}={limit}; "
                "start a new cache or keep the input shorter"
            )
    if (dtype, torch.device(device)) != (cache.keys.dtype, cache.keys.device):
        raise TypeError(f"the cache holds {cache.keys.dtype} on {cache.keys.device}, the input is {dtype} on {device}")


class GroupedQueryAttention(MultiHeadAttention):
    """Causal multi-head attention whose query heads share ``num_kv_heads`` key/value heads, with a KV cache.

    ``W_key`` and ``W_value`` project to ``num_kv_heads * head_dim``, and query head ``h`` uses key/value head
    ``h // (num_heads // num_kv_heads)`` (Ainslie et al., 2023), as ``F.scaled_dot_product_attention(...,
    enable_gqa=True)`` does; ``num_kv_heads=1`` is multi-query attention (Shazeer, 2019). The KV cache then holds
    ``num_kv_heads`` heads instead of ``num_heads``. ``num_kv_heads=None`` (the default) is plain multi-head
    attention, with the same parameters, created in the same order, as :class:`MultiHeadAttention`.
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, *, num_kv_heads=None):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_positive_int("num_kv_heads", self.num_kv_heads)
        if num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads={num_heads} must be divisible by num_kv_heads={self.num_kv_heads} so that every key/value "
                f"head serves the same number of query heads (num_heads % num_kv_heads = {num_heads % num_kv_heads})"
            )
        if self.num_kv_heads != num_heads:  # narrower key and value projections
            self.W_key = nn.Linear(d_in, self.num_kv_heads * self.head_dim, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, self.num_kv_heads * self.head_dim, bias=qkv_bias)

    def forward(self, x, key_padding_mask=None, return_weights=False, *, past_key_values=None, layer_idx=0):
        """``x`` ``(batch, num_tokens, d_in)`` -> ``(batch, num_tokens, d_out)``, like :class:`MultiHeadAttention`.

        With ``past_key_values`` (a :class:`KVCache`), ``x`` holds the tokens after the ``num_tokens`` cached ones:
        their keys and values are written into layer ``layer_idx`` of the cache, and the queries attend over
        every cached token too (``key_padding_mask`` then covers all of them). The caller calls
        ``past_key_values.advance(x.shape[1])`` once every layer has run.
        """
        key_padding_mask = self.check_inputs(x, key_padding_mask, past_key_values=past_key_values, layer_idx=layer_idx)
        options = {"past_key_values": past_key_values, "layer_idx": layer_idx}
        return self.forward_unchecked(x, key_padding_mask, return_weights, **options)

    def check_inputs(self, x, key_padding_mask=None, *, past_key_values=None, layer_idx=0):
        """Raise a clear error for a bad input or cache; return ``key_padding_mask`` expanded to
        ``(batch, num_keys)``, where ``num_keys`` counts the cached tokens too."""
        if past_key_values is None:
            return super().check_inputs(x, key_padding_mask)
        super().check_inputs(x)  # the input's own mistakes first
        check_kv_cache(past_key_values, self, *x.shape[:2], x.dtype, x.device, layer_idx=layer_idx)
        if key_padding_mask is None:
            return None
        return super().check_inputs(x, key_padding_mask, num_keys=past_key_values.num_tokens + x.shape[1])

    def forward_unchecked(self, x, key_padding_mask=None, return_weights=False, *, past_key_values=None, layer_idx=0):
        """:meth:`forward` without its input checks."""
        queries = self.split_heads(self.W_query(x))  # (batch, num_heads, num_tokens, head_dim)
        keys = self.split_heads(self.W_key(x))  # (batch, num_kv_heads, num_tokens, head_dim)
        values = self.split_heads(self.W_value(x))
        num_tokens, hidden, causal = x.shape[1], None, True
        if past_key_values is not None:
            start = past_key_values.num_tokens  # query i is the token at position start + i
            keys, values = past_key_values.update(layer_idx, keys, values)  # (batch, num_kv_heads, num_keys, head_dim)
            # One new token comes after every key it sees and needs no mask (the fused kernel's fastest case).
            hidden = self.mask[start : start + num_tokens, : start + num_tokens] if num_tokens > 1 else None
            causal = False
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]  # (batch, 1, 1, num_keys)
            hidden = padding if hidden is None else hidden | padding
        if self.num_kv_heads != self.num_heads:  # each key/value head serves its group of consecutive query heads
            keys = keys.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
            values = values.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
        context_vec, attn_weights = self.attend_heads(queries, keys, values, hidden, causal, return_weights)
        return self.merge_heads(context_vec, attn_weights, return_weights)


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row and set the others to ``-inf`` (probability zero).

    ``logits`` ``(..., vocab_size)``; returns a new tensor of the same shape. Ties with the k-th value are kept.
    """
    check_tensor("logits", logits, 1, "(..., vocab_size)")
    check_positive_int("k", k)
    return _keep_top_k(logits, k)


def _keep_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    kth_largest = torch.topk(logits, min(k, logits.shape[-1]), dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth_largest, float("-inf"))


def sample_next_token(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Pick one token per row of ``logits`` ``(batch, vocab_size)``; returns ``(batch, 1)`` int64 ids.

    ``temperature=0`` picks the most likely token (greedy); otherwise the logits are divided by the
    temperature (a finite number of at least 0.01; below 1 sharpens, above 1 flattens), optionally cut to the
    ``top_k`` best, and sampled.
    """
    check_tensor("logits", logits, (2,), "(batch, vocab_size)")
    check_no_nan("logits", logits)
    check_temperature(temperature, zero_is_greedy=True)
    if top_k is not None:
        check_positive_int("top_k", top_k)
    return _sample(logits, temperature, top_k, generator)


def _sample(logits, temperature, top_k, generator) -> torch.Tensor:
    """:func:`sample_next_token` without its checks: ``generate`` checks its arguments once, not at every step."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature  # float16 logits / 0.01 overflow float16 above 655
    if top_k is not None:
        logits = _keep_top_k(logits, top_k)
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def generate(
    model: nn.Module,
    token_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Continue ``token_ids`` ``(batch, num_tokens)`` by ``max_new_tokens`` tokens of a :class:`~attention_helpers.GPT`.

    Returns ``(batch, num_tokens + max_new_tokens)`` int64 ids, the prompt first. ``temperature`` and ``top_k``
    are those of :func:`sample_next_token` (0: greedy); a seeded ``torch.Generator`` repeats a sample.

    Without the cache, every step runs the model on the whole sequence (its last ``context_length`` tokens)
    and keeps only the last row of logits. With ``use_cache=True`` the prompt is run once into a new
    :class:`KVCache` and every later step feeds only the newest token with it: the same tokens, far less work.
    Once the sequence outgrows ``context_length``, the window slides and every position changes, so both ways
    recompute the window at each step. The inputs are checked once, before the first step; the model runs in
    eval mode (no dropout) and is restored to its mode afterwards.
    """
    _check_generate_args(model, token_ids, max_new_tokens, temperature, top_k)
    token_ids = token_ids.long()  # int32 ids are accepted; the sampled ones are int64
    context_length = model.context_length
    cache = None
    if use_cache and token_ids.shape[1] < context_length:  # the cache helps while the sequence fits the context
        capacity = min(token_ids.shape[1] + max_new_tokens, context_length)
        cache = model.new_cache(token_ids.shape[0], capacity)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():  # no_grad, and no autograd bookkeeping (version counters) on any tensor either
            for step in range(max_new_tokens):
                if cache is not None and token_ids.shape[1] <= context_length:
                    new_ids = token_ids if step == 0 else token_ids[:, -1:]  # the prompt once, then the newest token
                    logits, cache = model.forward_unchecked(new_ids, cache)
                else:
                    logits = model.forward_unchecked(token_ids[:, -context_length:])
                next_id = _sample(logits[:, -1, :], temperature, top_k, generator)  # (batch, 1)
                token_ids = torch.cat([token_ids, next_id], dim=1)
    finally:
        model.train(was_training)
    return token_ids.clone()  # a normal tensor again: autograd refuses the tensors made in inference mode


def _check_generate_args(model, token_ids, max_new_tokens, temperature, top_k) -> None:
    if not (isinstance(model, nn.Module) and callable(getattr(model, "new_cache", None))):  # GPT, or a subclass
        raise TypeError(f"model must be an attention_helpers.GPT, got {type(model).__name__}")
    check_token_ids("token_ids", token_ids, model.vocab_size)
    if token_ids.shape[1] == 0:
        raise ValueError(
            f"token_ids must hold at least one token to continue from, got shape {shape_str(token_ids.shape)}"
        )
    check_positive_int("max_new_tokens", max_new_tokens, minimum=0)
    check_temperature(temperature, zero_is_greedy=True)
    if top_k is not None:
        check_positive_int("top_k", top_k)
