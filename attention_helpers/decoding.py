"""What generation needs: the KV cache, sampling, and the decoding loop that ``generate`` and ``greedy_decode`` share.

Under a causal mask, earlier tokens' keys and values do not change when a token is added: a step runs the new token
alone and reuses them from a :class:`KVCache` the loop passes to the model (as Hugging Face's ``past_key_values``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn

from ._checks import (
    check_bool,
    check_cache_write,
    check_logits,
    check_model,
    check_no_nan,
    check_positive_int,
    check_temperature,
    check_tensor,
    check_token_ids,
)


@contextlib.contextmanager
def eval_mode(model: nn.Module):
    """Eval mode inside the block, then ``model`` back in the mode it came in, even when the block raises."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


class KVCache:
    """Every layer's keys and values ``(batch, num_kv_heads, capacity, head_dim)``, filled up to ``num_tokens``,
    which moves on once all layers have written (a layer cannot write twice at one position); an encoder-decoder's
    cross-attention keys and values in ``memory_keys`` and ``memory_values``. ``model.new_cache(batch)`` makes one."""

    def __init__(self, num_layers, batch, num_kv_heads, capacity, head_dim, *, dtype=torch.float32, device=None):
        shape = (num_layers, batch, num_kv_heads, capacity, head_dim)
        for name, value in zip(("num_layers", "batch", "num_kv_heads", "capacity", "head_dim"), shape, strict=True):
            check_positive_int(name, value)
        self.num_layers = num_layers
        self.batch = batch
        self.num_kv_heads = num_kv_heads
        self.capacity = capacity
        self.head_dim = head_dim
        self.keys = [torch.zeros(shape[1:], dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.dtype = self.keys[0].dtype
        self.device = self.keys[0].device
        self.memory_keys: list[torch.Tensor | None] = [None] * num_layers
        self.memory_values: list[torch.Tensor | None] = [None] * num_layers
        self.num_tokens = 0
        self.layers_written: set[int] = set()  # at the current position
        self.pending_new: int | None = None  # how many tokens those layers wrote
        # a model's new_cache sets (id(model), its positions kind): another model's entry check then refuses it
        self.made_by: tuple[int, str | None] | None = None

    @classmethod
    def for_model(cls, model: nn.Module, attention, num_layers: int, batch: int, capacity, weight) -> KVCache:
        """A model's ``new_cache(batch, capacity)``: ``num_layers`` layers whose self-attention is like ``attention``,
        ``capacity`` tokens (default and at most the model's ``context_length``), ``weight``'s dtype and device."""
        capacity = model.context_length if capacity is None else capacity
        check_positive_int("capacity", capacity)
        if capacity > model.context_length:
            raise ValueError(f"capacity={capacity} is more than the model reads: context_length={model.context_length}")
        shape = (num_layers, batch, attention.num_kv_heads, capacity, attention.head_dim)
        cache = cls(*shape, dtype=weight.dtype, device=weight.device)
        cache.made_by = (id(model), getattr(model, "positions", None))
        return cache

    def update(self, layer_idx: int, keys, values, *, checked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Write layer ``layer_idx``'s new ``(batch, num_kv_heads, num_new, head_dim)`` keys and values after the
        cached ones; return views of all of them. Nothing cached is copied, unless autograd records the call."""
        if not checked:
            check_cache_write(self, layer_idx, keys, values)
        if layer_idx in self.layers_written:  # even inside a model: a hook or a bug can reuse a layer_idx
            raise ValueError(
                f"layer {layer_idx} already wrote its keys and values at position {self.num_tokens}, and the cache "
                f"moves on only once all {self.num_layers} layers have written: give each layer its own layer_idx"
            )
        start = self.num_tokens
        num_new = keys.shape[2]
        end = start + num_new
        if torch.is_grad_enabled() and (keys.requires_grad or values.requires_grad):  # autograd keeps earlier views
            self.keys[layer_idx] = self.keys[layer_idx].clone()
            self.values[layer_idx] = self.values[layer_idx].clone()
        self.keys[layer_idx].narrow(2, start, num_new).copy_(keys)  # positions start .. start + num_new - 1
        self.values[layer_idx].narrow(2, start, num_new).copy_(values)
        written = (self.keys[layer_idx].narrow(2, 0, end), self.values[layer_idx].narrow(2, 0, end))
        self.layers_written.add(layer_idx)
        self.pending_new = num_new
        if len(self.layers_written) == self.num_layers:  # every layer has these tokens: count them
            self.num_tokens += num_new
            self.pending_new = None
            self.layers_written.clear()
        return written


def top_k_filter(logits: torch.Tensor, k: int, *, checked: bool = False) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row (and ties with the k-th), set the others to ``-inf``."""
    if not checked:
        check_tensor("logits", logits, 1, "(..., vocab_size)")
        check_no_nan("logits", logits)
        check_positive_int("k", k)
    kth_largest = torch.topk(logits, min(k, logits.shape[-1]), dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth_largest, float("-inf"))


def sample_next_token(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, generator=None, *, checked: bool = False
) -> torch.Tensor:
    """``(batch, vocab_size)`` -> ``(batch, 1)`` ids: the most likely with ``temperature=0``; otherwise sampled from
    ``logits / temperature`` (below 1 sharpens, above 1 flattens), optionally cut to the ``top_k`` best."""
    if not checked:  # generate checks its arguments once, not at every step
        check_tensor("logits", logits, (2,), "(batch, vocab_size)")
        check_logits("logits", logits)
        check_temperature(temperature, zero_is_greedy=True)
        if top_k is not None:
            check_positive_int("top_k", top_k)
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature  # float16 logits / 0.01 overflow float16 above 655
    if top_k is not None:
        logits = top_k_filter(logits, top_k, checked=True)
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
    """Continue ``token_ids`` ``(batch, num_tokens)`` by ``max_new_tokens`` tokens of a :class:`~attention_helpers.GPT`
    (or a compiled one) -> ``(batch, num_tokens + max_new_tokens)`` ids, sampled as :func:`sample_next_token`."""
    check_model("model", model, "new_cache", "an attention_helpers.GPT")  # a GPT, or a compiled one
    check_token_ids("token_ids", token_ids, model.vocab_size, nonempty=True)  # something to continue from
    check_positive_int("max_new_tokens", max_new_tokens, minimum=0)
    check_bool("use_cache", use_cache)
    check_temperature(temperature, zero_is_greedy=True)
    if top_k is not None:
        check_positive_int("top_k", top_k)

    def pick(logits):
        return sample_next_token(logits, temperature, top_k, generator, checked=True)

    def step(ids, cache):  # the prompt was checked above; every later id is picked from the model's own logits
        return model(ids, cache, checked=True)

    return decode_tokens(model, step, token_ids.long(), max_new_tokens, pick, use_cache)


def decode_tokens(
    model: nn.Module, step: Callable, token_ids: torch.Tensor, num_new: int, pick: Callable, use_cache: bool = True
) -> torch.Tensor:
    """Append ``num_new`` tokens to ``token_ids`` ``(batch, num_tokens)``, one per step, in eval mode: ``step(ids,
    cache)`` gives the logits ``(batch, len(ids), vocab_size)`` of the ids not yet cached, ``pick`` the next ids
    ``(batch, 1)`` from the last row. Past ``context_length`` the window slides and each step recomputes it. ``step``
    may trust its arguments: the caller checked ``token_ids``, and every new id comes from ``pick``."""
    context_length = model.context_length
    cache = None
    # the cache helps while the sequence fits the context (and a batch of no sequence has nothing to cache)
    if use_cache and token_ids.shape[1] < context_length and token_ids.shape[0] > 0:
        cache = model.new_cache(token_ids.shape[0], min(token_ids.shape[1] + num_new, context_length))
    # inference_mode: no_grad, and no autograd bookkeeping (version counters) on any tensor either
    with eval_mode(model), torch.inference_mode():
        for _ in range(num_new):
            if cache is not None and token_ids.shape[1] <= context_length:
                logits = step(token_ids[:, cache.num_tokens :], cache)
            else:
                logits = step(token_ids[:, -context_length:], None)
            token_ids = torch.cat([token_ids, pick(logits[:, -1, :])], dim=1)
    return token_ids.clone()  # a normal tensor again: autograd refuses the tensors made in inference mode
