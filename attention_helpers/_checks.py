"""Argument checks shared by the package: a malformed call fails at once with a ``TypeError`` or ``ValueError``
naming the argument, its shape and dtype, the same message for the same mistake everywhere.

Checks run at the door: a model checks its arguments once and calls its layers with ``checked=True``; a layer called
on its own checks everything. ``name`` is the argument, ``layout`` its dimensions: ``"(batch, num_tokens, d_in)"``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

# True while torch.compile traces the code. A check that reads a tensor's *values* (ids.max()) synchronises with a
# GPU and breaks the compiled graph: like torch.nn.functional, such checks are skipped while compiling.
is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def check_int(name: str, value) -> None:
    """Require an int: not a bool, not a float such as ``2.0``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")


def shape_str(shape) -> str:
    """``(2, 6, 3)`` rather than ``torch.Size([2, 6, 3])``."""
    dims = tuple(shape)
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def check_tensor(name: str, x, ndims: tuple[int, ...] | int, layout: str, nonempty: str | None = None) -> None:
    """A floating-point tensor of a rank in ``ndims`` (tuple) or >= ``ndims`` (int); ``nonempty``: tokens >= 1."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {layout}, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must have a floating-point dtype, got {x.dtype} with shape {shape_str(x.shape)}; "
            f"convert it with {name}.float()"
        )
    rank_ok = x.dim() >= ndims if isinstance(ndims, int) else x.dim() in ndims
    if not rank_ok:
        ranks = f"at least {ndims}" if isinstance(ndims, int) else " or ".join(str(n) for n in ndims)
        raise ValueError(f"{name} must have {ranks} dimensions {layout}, got {x.dim()} with shape {shape_str(x.shape)}")
    if nonempty is not None and x.shape[-2] == 0:  # attention over no keys is a softmax over nothing
        raise ValueError(f"{name} must hold at least one token ({nonempty} >= 1), got shape {shape_str(x.shape)}")


def check_dim(name: str, dim, x: torch.Tensor) -> None:
    check_int(name, dim)
    if not -x.dim() <= dim < x.dim():
        raise ValueError(
            f"{name}={dim} is out of range for a tensor with {x.dim()} dimensions (shape {shape_str(x.shape)}); "
            f"use -{x.dim()} to {x.dim() - 1}"
        )


def check_module_dtype(name: str, x: torch.Tensor, weight: torch.Tensor, module: str) -> None:
    """Otherwise torch fails deep inside a matmul."""
    if x.dtype != weight.dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but the weights of {module} are {weight.dtype}; convert the input with "
            f"{name}.to({weight.dtype}) or the module with .to({x.dtype})"
        )


def check_size(name: str, x: torch.Tensor, dim: int, expected: int, what: str, layout: str) -> None:
    if x.shape[dim] != expected:
        raise ValueError(
            f"{name} must have shape {layout} with {what}={expected}, "
            f"got shape {shape_str(x.shape)} ({what}={x.shape[dim]})"
        )


def check_same_device(name: str, x: torch.Tensor, other_name: str, other: torch.Tensor) -> None:
    if x.device != other.device:
        raise ValueError(
            f"{name} is on device {x.device} but {other_name} is on device {other.device}; "
            f"move {name} with {name}.to({other_name}.device)"
        )


def check_bool_mask(name: str, mask, target_shape: tuple[int, ...], layout: str, like: torch.Tensor) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor of shape {layout}, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must have dtype torch.bool (True marks a position to hide), got {mask.dtype} "
            f"with shape {shape_str(mask.shape)}. A Hugging Face style attention_mask (1 = real token, "
            f"0 = padding) converts with {name} = attention_mask == 0; .bool() would hide the real tokens instead"
        )
    if not broadcasts_to(mask.shape, target_shape):
        raise ValueError(
            f"{name} of shape {shape_str(mask.shape)} does not broadcast to the expected "
            f"shape {shape_str(target_shape)} {layout}"
        )
    check_same_device(name, mask, "the inputs", like)


def broadcasts_to(shape, target) -> bool:
    try:
        return torch.broadcast_shapes(shape, target) == torch.Size(target)
    except RuntimeError:
        return False


def check_sequence(name, x, d_model: int, layout: str, weight, module: str, nonempty: str | None = None) -> None:
    """A ``(batch, num_tokens, d_model)`` input of ``module``, whose weights are ``weight``."""
    check_tensor(name, x, (3,), layout, nonempty)
    check_size(name, x, -1, d_model, "d_model", layout)
    check_module_dtype(name, x, weight, module)


def check_padding_mask(name: str, mask, x: torch.Tensor, what: str = "num_tokens", length: int | None = None):
    """None, or a padding mask (True = padding) ``(batch, what)`` or ``(what,)`` for ``x`` ``(batch, what, ...)``
    (``length`` keys if given); returned expanded to ``(batch, what)``."""
    if mask is None:
        return None
    batch = x.shape[0]
    length = x.shape[1] if length is None else length
    check_bool_mask(name, mask, (batch, length), f"(batch, {what})", x)
    if mask.dim() == 0 or mask.shape[-1] != length:  # one flag per sequence would hide all its keys or none
        raise ValueError(
            f"{name} must hold one entry per key, shape (batch, {what}) = {shape_str((batch, length))} or "
            f"({what},), got {shape_str(mask.shape)}"
        )
    return mask.expand(batch, length)


def check_bool(name: str, value) -> None:
    """Require ``True`` or ``False``: a string such as ``"no"`` is truthy and would switch the option on."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} ({value!r})")


def check_length(name: str, length: int, context_length, what: str = "num_tokens", built: str = "the model") -> None:
    """No more tokens than the positions ``built`` (a model, a module) was made for (``None``: any number)."""
    if context_length is not None and length > context_length:
        raise ValueError(
            f"{name} has {what}={length} but {built} was built with context_length={context_length}; shorten it "
            "or build it with a larger context_length"
        )


def check_no_nan(name: str, x: torch.Tensor) -> None:
    """Argmax and sampling would pick an arbitrary entry of a ``nan`` row."""
    if not is_compiling() and bool(torch.isnan(x).any()):
        rows = torch.isnan(x).flatten(1).any(dim=1).nonzero().flatten().tolist() if x.dim() > 1 else []
        where = f" (rows {rows[:5]})" if rows else ""
        raise ValueError(f"{name} holds nan{where}, shape {shape_str(x.shape)}: no token can be picked from it")


def check_logits(name: str, logits: torch.Tensor) -> None:
    """No ``nan``, and a finite score in every row (a row of ``-inf`` gives softmax ``0 / 0``)."""
    check_no_nan(name, logits)
    if is_compiling():
        return
    empty = ~torch.isfinite(logits).any(dim=-1)  # (...,) True for a row without a finite logit
    if bool(empty.any()):
        rows = empty.flatten().nonzero().flatten().tolist()
        raise ValueError(
            f"{name} has rows {rows[:5]} without a finite value (all -inf or inf), shape {shape_str(logits.shape)}: "
            "no token can be picked from them"
        )


def check_class(name: str, cls, allowed: Sequence[type]) -> None:
    names = ", ".join(c.__name__ for c in allowed)
    if not isinstance(cls, type) or not issubclass(cls, tuple(allowed)):
        shown = cls.__name__ if isinstance(cls, type) else f"{type(cls).__name__} ({cls!r})"
        raise TypeError(f"{name} must be one of the classes {names} (or a subclass), got {shown}")


def check_positive_int(name: str, value, minimum: int = 1) -> None:
    check_int(name, value)
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


def check_index(name: str, value, size: int, size_name: str) -> None:
    check_int(name, value)
    if not 0 <= value < size:
        raise ValueError(f"{name} must be from 0 to {size - 1} ({size_name}={size}), got {value}")


def check_instance(name: str, value, cls: type | tuple[type, ...], what: str) -> None:
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")


def check_model(name: str, model, attribute: str, what: str) -> None:
    """An ``nn.Module`` with ``attribute`` (which a ``torch.compile`` d model forwards too)."""
    if not (isinstance(model, torch.nn.Module) and hasattr(model, attribute)):
        raise TypeError(f"{name} must be {what}, got {type(model).__name__}")


def check_integer_tensor(name: str, x, layout: str) -> None:
    """A 2-D integer tensor, such as Hugging Face's ``attention_mask``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {layout}, got {type(x).__name__}")
    if x.dtype == torch.bool or x.is_floating_point() or x.is_complex():
        raise TypeError(f"{name} must be an integer tensor, got {x.dtype} with shape {shape_str(x.shape)}")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape {layout}, got {shape_str(x.shape)}")


# Below it, softmax is as good as one-hot, and logits / temperature overflow to inf (in float16 already for logits
# above 655), which turns the probabilities into nan. For the most likely token, sampling takes temperature=0.
MIN_TEMPERATURE = 0.01


def check_temperature(temperature, *, zero_is_greedy: bool = False) -> None:
    """``zero_is_greedy``: also accept 0, which a sampling function reads as "take the most likely token"."""
    greedy = " or 0 (greedy: the most likely token)" if zero_is_greedy else ""
    allowed = f"a finite number >= {MIN_TEMPERATURE}{greedy}"
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(f"temperature must be {allowed}, got {type(temperature).__name__} ({temperature!r})")
    if zero_is_greedy and temperature == 0:
        return
    if not (math.isfinite(temperature) and temperature >= MIN_TEMPERATURE):
        raise ValueError(f"temperature must be {allowed}, got {temperature!r}")


def check_token_ids(
    name: str, ids, vocab_size: int | None, layout: str = "(batch, num_tokens)", ndim: int = 2, nonempty: bool = False
):
    """Ids in ``[0, vocab_size)`` (or just >= 0 when ``vocab_size`` is None); ``nonempty``: at least one per row."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids {layout}, got {type(ids).__name__}")
    if ids.dtype not in (torch.int64, torch.int32):  # int8, int16 and uint8 ids fail inside nn.Embedding
        raise TypeError(
            f"{name} must have dtype torch.int64 or torch.int32 (the dtypes an embedding is indexed with), got "
            f"{ids.dtype} with shape {shape_str(ids.shape)}; convert it with .long()"
        )
    if ids.dim() != ndim:
        hint = f"; add a batch axis with {name}[None]" if ids.dim() == ndim - 1 else ""
        raise ValueError(
            f"{name} must have {ndim} dimension{'s' if ndim > 1 else ''} {layout}, got {ids.dim()} with shape "
            f"{shape_str(ids.shape)}{hint}"
        )
    if nonempty and ids.shape[-1] == 0:
        raise ValueError(f"{name} must hold at least one token, got shape {shape_str(ids.shape)}")
    if not ids.numel() or is_compiling():  # the range check reads the values: a host synchronisation on a GPU
        return
    low = int(ids.min())
    high = int(ids.max())
    if vocab_size is None and low < 0:
        raise ValueError(f"{name} must hold token ids >= 0, got values from {low} to {high}")
    if vocab_size is not None and (low < 0 or high >= vocab_size):
        raise ValueError(
            f"{name} must hold token ids from 0 to {vocab_size - 1} (vocab_size={vocab_size}), "
            f"got values from {low} to {high}"
        )


def check_probability(name: str, value) -> None:
    """A dropout probability: p = 1 would drop everything and scale by 1/0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} ({value!r})")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")


def check_heads(width: int, num_heads: int, name: str = "d_out") -> None:
    check_positive_int("num_heads", num_heads)
    if width % num_heads != 0:
        raise ValueError(
            f"{name}={width} must be divisible by num_heads={num_heads} so that each head gets "
            f"{name} // num_heads dimensions ({name} % num_heads = {width % num_heads})"
        )


def check_labels(name: str, labels, count: int, what: str) -> None:
    """One label per row or column (``count`` of ``what``)."""
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise TypeError(f"{name} must be a list or tuple of {count} words, one per {what}, got {type(labels).__name__}")
    if len(labels) != count:
        raise ValueError(f"{name} has {len(labels)} labels but there are {count} {what}")


def check_attention_inputs(queries, keys, values) -> torch.Size:
    """Queries ``(..., num_queries, d_k)``, keys ``(..., num_keys, d_k)``, values ``(..., num_keys, d_v)`` -> ``...``"""
    check_tensor("queries", queries, 2, "(..., num_queries, d_k)")
    check_tensor("keys", keys, (queries.dim(),), "(..., num_keys, d_k) with the same rank as queries")
    check_tensor("values", values, (queries.dim(),), "(..., num_keys, d_v) with the same rank as queries")
    for name, t in (("keys", keys), ("values", values)):
        if t.device != queries.device:
            raise ValueError(f"{name} is on device {t.device} but queries is on device {queries.device}")
        if t.dtype != queries.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but queries has dtype {queries.dtype}")
    if keys.shape[-1] != queries.shape[-1]:
        raise ValueError(
            f"queries and keys must have the same last dimension d_k, got queries {shape_str(queries.shape)} "
            f"and keys {shape_str(keys.shape)}"
        )
    if values.shape[-2] != keys.shape[-2]:
        raise ValueError(
            f"values must have one row per key (num_keys), got keys {shape_str(keys.shape)} "
            f"and values {shape_str(values.shape)}"
        )
    if queries.shape[-1] == 0:
        raise ValueError(f"queries and keys need d_k >= 1, got queries {shape_str(queries.shape)}")
    if keys.shape[-2] == 0:
        raise ValueError(f"keys must hold at least one key (num_keys >= 1), got keys {shape_str(keys.shape)}")
    try:
        return torch.broadcast_shapes(queries.shape[:-2], keys.shape[:-2], values.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch, head) dimensions of queries {shape_str(queries.shape)}, keys "
            f"{shape_str(keys.shape)} and values {shape_str(values.shape)} do not broadcast together"
        ) from None


def check_positive_real(name: str, value, minimum: float | None = None) -> float:
    """A finite number above 0, or at least ``minimum``."""
    wanted = "positive" if minimum is None else f"at least {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, {wanted} and finite, got {type(value).__name__} ({value!r})")
    if not (math.isfinite(value) and (value > 0 if minimum is None else value >= minimum)):
        raise ValueError(f"{name} must be {wanted} and finite, got {value}")
    return float(value)


def check_choice(name: str, value, choices) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {sorted(choices)} as a string, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")


def normalized_shape(parameters_shape) -> tuple[int, ...]:
    """``d_model`` or a non-empty sequence of sizes -> a tuple of positive ints."""
    shape = (parameters_shape,) if isinstance(parameters_shape, numbers.Integral) else parameters_shape
    if isinstance(shape, str) or not isinstance(shape, (Sequence, torch.Size)) or not shape:
        raise TypeError(
            "parameters_shape must be an int (d_model) or a non-empty sequence of ints, "
            f"got {type(parameters_shape).__name__} ({parameters_shape!r})"
        )
    for size in shape:
        check_positive_int("parameters_shape", size)
    return tuple(int(size) for size in shape)


def check_positions(positions, x: torch.Tensor) -> None:
    """One real position per token of ``x``."""
    if not isinstance(positions, torch.Tensor) or positions.dtype == torch.bool or positions.is_complex():
        got = positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise TypeError(f"positions must be a tensor of integer or real positions, (num_tokens,) or None, got {got}")
    if not broadcasts_to(positions.shape, x.shape[:-1]):
        raise ValueError(
            f"positions of shape {shape_str(positions.shape)} does not broadcast to x's "
            f"(..., num_tokens) = {shape_str(x.shape[:-1])}; give one position per token"
        )
    check_same_device("positions", positions, "x", x)
    if positions.is_floating_point() and not is_compiling() and not bool(torch.isfinite(positions).all()):
        raise ValueError(
            f"positions must hold finite numbers, got nan or inf in positions of shape {shape_str(positions.shape)}"
        )


# --- attention modules ------------------------------------------------------------------------------------------


def check_attention_sizes(d_in, d_out, context_length, dropout, causal: bool, qkv_bias: bool = False) -> None:
    check_bool("qkv_bias", qkv_bias)
    check_positive_int("d_in", d_in)
    check_positive_int("d_out", d_out)
    check_probability("dropout", dropout)
    if context_length is None and causal:
        raise ValueError("context_length=None is only allowed with causal=False; give the longest input length")
    if context_length is not None:
        check_positive_int("context_length", context_length)


def check_kv_heads(num_heads: int, num_kv_heads: int) -> None:
    check_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads} so that every key/value "
            f"head serves the same number of query heads (num_heads % num_kv_heads = {num_heads % num_kv_heads})"
        )


def check_attention_input(module, x, return_weights, ndims: tuple[int, ...] = (3,)) -> None:
    check_bool("return_weights", return_weights)
    layout = "(batch, num_tokens, d_in)" if ndims == (3,) else "(num_tokens, d_in) or (batch, num_tokens, d_in)"
    check_tensor("x", x, ndims, layout, "num_tokens")
    check_size("x", x, -1, module.d_in, "d_in", layout)
    weight = module.W_query if isinstance(module.W_query, torch.Tensor) else module.W_query.weight
    check_module_dtype("x", x, weight, type(module).__name__)
    check_length("x", x.shape[-2], getattr(module, "context_length", None), built="the module")


def check_attention_call(module, x, key_padding_mask, return_weights, memory, cache):
    """``MultiHeadAttention.forward`` called on its own; returns ``key_padding_mask`` as ``(batch, num_keys)``."""
    check_attention_input(module, x, return_weights)
    if cache is not None:
        check_cache_type(cache)
    if memory is not None:
        if module.causal:
            raise ValueError(
                "memory= (cross-attention) needs a module built with causal=False: a causal mask relates positions "
                "within one sequence and has no meaning between the queries' sequence and the memory's"
            )
        layout = "(batch, num_memory_tokens, d_in)"
        check_tensor("memory", memory, (3,), layout, "num_memory_tokens")
        check_size("memory", memory, -1, module.d_in, "d_in", layout)
        if memory.shape[0] != x.shape[0]:
            raise ValueError(
                f"memory has batch={memory.shape[0]} but x has batch={x.shape[0]} "
                f"(memory {shape_str(memory.shape)}, x {shape_str(x.shape)})"
            )
        if memory.dtype != x.dtype:
            raise TypeError(f"memory has dtype {memory.dtype} but x has dtype {x.dtype}; convert one to the other")
        check_same_device("memory", memory, "x", x)
    elif cache is not None:
        check_cache_fits(cache.num_tokens, x.shape[1], module.context_length, "context_length")
    start = 0 if cache is None else cache.num_tokens
    num_keys = start + x.shape[1] if memory is None else memory.shape[1]
    return check_padding_mask("key_padding_mask", key_padding_mask, x, "num_keys", num_keys)


# --- the KV cache -----------------------------------------------------------------------------------------------


def check_cache_type(cache) -> None:
    if not all(hasattr(cache, name) for name in ("update", "num_tokens", "capacity", "layers_written")):
        raise TypeError(f"cache must be a KVCache (model.new_cache(batch)), got {type(cache).__name__}")


def check_cache_fits(num_cached: int, num_new: int, limit: int | None, name: str) -> None:
    if limit is not None and num_cached + num_new > limit:
        raise ValueError(
            f"the cache holds {num_cached} tokens and the input adds {num_new}, more than {name}={limit}; "
            "start a new cache or keep the input shorter"
        )


def check_cache(cache, model, attention, num_layers: int, inputs: torch.Tensor, like: torch.Tensor) -> None:
    """``inputs`` ``(batch, num_new, ...)`` in ``like``'s dtype can continue ``cache`` (layers like ``attention``)."""
    batch = inputs.shape[0]
    num_new = inputs.shape[1]
    check_cache_type(cache)
    layout = dict(num_layers=num_layers, num_kv_heads=attention.num_kv_heads, head_dim=attention.head_dim)
    wrong = [name for name, size in layout.items() if getattr(cache, name) != size]
    if wrong:
        held = ", ".join(f"{name}={getattr(cache, name)}" for name in wrong)
        wanted = ", ".join(f"{name}={layout[name]}" for name in wrong)
        raise ValueError(f"the cache holds {held} but the model has {wanted}; make one with model.new_cache(batch)")
    if cache.batch != batch:
        raise ValueError(f"the cache holds batch={cache.batch} but the input has batch={batch}; start a new cache")
    made_by = getattr(cache, "made_by", None)  # (id of the model that made it, its positions kind)
    positions = getattr(model, "positions", None)
    if made_by is not None and made_by != (id(model), positions):
        raise ValueError(
            f"the cache was made by another {type(model).__name__}, with positions={made_by[1]!r} (this one has "
            f"positions={positions!r}): its keys and values come from other weights; continue it with the model "
            "that made it, or make one with model.new_cache(batch)"
        )
    if cache.layers_written:
        raise ValueError(
            f"the cache is part-way through a step (layers {sorted(cache.layers_written)} wrote, not all "
            f"{cache.num_layers}): a model call that failed left it so; start a new cache"
        )
    limit = min(cache.capacity, model.context_length)  # a cache from new_cache holds at most context_length tokens
    check_cache_fits(cache.num_tokens, num_new, limit, "its capacity" if limit == cache.capacity else "context_length")
    if (cache.dtype, cache.device) != (like.dtype, like.device):
        raise TypeError(
            f"the cache holds {cache.dtype} on {cache.device}, the model runs {like.dtype} on {like.device}"
        )


def check_cache_write(cache, layer_idx, keys: torch.Tensor, values: torch.Tensor) -> None:
    check_int("layer_idx", layer_idx)
    if not 0 <= layer_idx < cache.num_layers:
        raise ValueError(f"layer_idx={layer_idx} but the cache holds num_layers={cache.num_layers}")
    if keys.shape[0] != cache.batch:
        raise ValueError(
            f"the cache holds batch={cache.batch} but the input has batch={keys.shape[0]}; start a new cache"
        )
    if (keys.shape[1], keys.shape[3]) != (cache.num_kv_heads, cache.head_dim) or values.shape != keys.shape:
        raise ValueError(
            f"the cache holds num_kv_heads={cache.num_kv_heads}, head_dim={cache.head_dim} but the attention layer "
            f"has num_kv_heads={keys.shape[1]}, head_dim={keys.shape[3]}"
        )
    if cache.pending_new is not None and keys.shape[2] != cache.pending_new:
        raise ValueError(
            f"layer {layer_idx} writes {keys.shape[2]} tokens but an earlier layer wrote {cache.pending_new}"
        )
    check_cache_fits(cache.num_tokens, keys.shape[2], cache.capacity, "its capacity")
    if (keys.dtype, keys.device) != (cache.dtype, cache.device):
        raise TypeError(f"the cache holds {cache.dtype} on {cache.device}, the input is {keys.dtype} on {keys.device}")


# --- decoders ---------------------------------------------------------------------------------------------------


def check_same_batch(name: str, x: torch.Tensor, other_name: str, other: torch.Tensor) -> None:
    if x.shape[0] != other.shape[0]:
        raise ValueError(
            f"{name} and {other_name} must hold the same number of sequences, got {name} {shape_str(x.shape)} and "
            f"{other_name} {shape_str(other.shape)}"
        )


def check_decoder_inputs(module, weight, tgt, memory, tgt_padding, memory_padding, return_weights, cache=None):
    """``tgt`` ``(batch, tgt_len, d_model)`` after ``cache``'s tokens, ``memory`` ``(batch, src_len, d_model)``, their
    padding masks (returned expanded to ``(batch, num_keys)``) and ``return_weights``."""
    check_bool("return_weights", return_weights)
    if cache is not None:
        check_cache_type(cache)
    start = 0 if cache is None else cache.num_tokens
    name = type(module).__name__
    check_sequence("tgt", tgt, module.d_model, "(batch, tgt_len, d_model)", weight, name)
    check_sequence("memory", memory, module.d_model, "(batch, src_len, d_model)", weight, name, "src_len")
    check_same_batch("src", memory, "tgt", tgt)
    check_same_device("tgt", tgt, "src", memory)
    check_length("tgt", start + tgt.shape[1], module.context_length, "cached + new tokens" if start else "tgt_len")
    return (
        check_padding_mask("tgt_key_padding_mask", tgt_padding, tgt, "tgt_len", start + tgt.shape[1]),
        check_padding_mask("memory_key_padding_mask", memory_padding, memory, "src_len"),
    )
