"""Argument checks shared by the package.

Every public function and module checks its inputs here so that a malformed call fails at once with a
``TypeError`` or ``ValueError`` whose message names the argument and the shapes involved, rather than
with a wrong answer or a traceback from deep inside torch.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

# is_compiling(): True while torch.compile traces the code (torch >= 2.3). A check that reads a tensor's *values*
# (ids.max(), mask.any()) copies them to the host, a synchronisation on a GPU, and breaks the compiled graph. Like
# torch.nn.functional, the package skips such checks while compiling; checks on shapes and dtypes always run.
is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def shape_str(shape) -> str:
    """Format a shape as ``(2, 6, 3)`` (``torch.Size`` prints as ``torch.Size([2, 6, 3])``)."""
    dims = tuple(shape)
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def check_tensor(name: str, x, ndims: tuple[int, ...] | int, layout: str) -> None:
    """Require a floating-point tensor with one of the ranks in ``ndims`` (a tuple), or at least ``ndims``
    dimensions (an int); ``layout`` names the expected dimensions, e.g. ``"(batch, num_tokens, d_in)"``."""
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
    if "num_tokens, " in layout and x.shape[-2] == 0:  # every layout with num_tokens has it second to last
        raise ValueError(f"{name} must hold at least one token (num_tokens >= 1), got shape {shape_str(x.shape)}")


def check_dim(name: str, dim, x: torch.Tensor) -> None:
    """Require an int ``dim`` that indexes one of ``x``'s dimensions (negative counts from the end)."""
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(dim).__name__} ({dim!r})")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(
            f"{name}={dim} is out of range for a tensor with {x.dim()} dimensions (shape {shape_str(x.shape)}); "
            f"use -{x.dim()} to {x.dim() - 1}"
        )


def check_module_dtype(name: str, x: torch.Tensor, weight: torch.Tensor, module: str) -> None:
    """Require ``x`` to have the dtype of the module's weights: torch would fail deep inside a matmul."""
    if x.dtype != weight.dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but the weights of {module} are {weight.dtype}; convert the input with "
            f"{name}.to({weight.dtype}) or the module with .to({x.dtype})"
        )


def check_size(name: str, x: torch.Tensor, dim: int, expected: int, what: str, layout: str) -> None:
    """Require ``x.shape[dim] == expected``; ``what`` names the size (``"d_in"``)."""
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
    """Require a boolean mask that broadcasts to ``target_shape`` and lives on ``like``'s device."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor of shape {layout}, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must have dtype torch.bool (True marks a position to hide), got {mask.dtype} "
            f"with shape {shape_str(mask.shape)}. A Hugging Face style attention_mask (1 = real token, "
            f"0 = padding) converts with {name} = attention_mask == 0; .bool() would hide the real tokens instead"
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, target_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != torch.Size(target_shape):
        raise ValueError(
            f"{name} of shape {shape_str(mask.shape)} does not broadcast to the expected "
            f"shape {shape_str(target_shape)} {layout}"
        )
    check_same_device(name, mask, "the inputs", like)


def check_sequence(name: str, x, d_model: int, layout: str, weight: torch.Tensor, module: str) -> None:
    """Require a floating-point ``(batch, num_tokens, d_model)`` tensor of the dtype of ``module``'s weights."""
    check_tensor(name, x, (3,), layout)
    check_size(name, x, -1, d_model, "d_model", layout)
    check_module_dtype(name, x, weight, module)


def check_padding_mask(name: str, mask, x: torch.Tensor, what: str = "num_tokens", length: int | None = None):
    """``mask``: None or a boolean padding mask (True = padding) of shape ``(batch, what)`` or ``(what,)`` for
    ``x`` ``(batch, what, d_model)`` (``what`` has ``length`` positions if given): one entry per key, shared by
    the batch or not; a ``(batch, 1)`` mask, which would hide all of a sequence's keys or none, is refused.
    Returns it expanded to ``(batch, what)``: what ``MultiHeadAttention.forward_unchecked`` takes unchecked."""
    if mask is None:
        return None
    batch, length = x.shape[0], x.shape[1] if length is None else length
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


def check_token_id(name: str, value, vocab_size: int, what: str = "vocab_size") -> None:
    """Require one token id: an int (not a bool, not a float such as ``1.5``) in ``[0, vocab_size)``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int token id, got {type(value).__name__} ({value!r})")
    if not 0 <= value < vocab_size:
        raise ValueError(f"{name} must be a token id from 0 to {vocab_size - 1} ({what}={vocab_size}), got {value}")


def check_length(name: str, length: int, context_length: int, what: str = "num_tokens") -> None:
    """Require a sequence of at most ``context_length`` positions (``length`` of them, in ``name``)."""
    if length > context_length:
        raise ValueError(
            f"{name} has {what}={length}, more than context_length={context_length} positions the model was built "
            f"for; shorten it or build the model with a larger context_length"
        )


def check_no_nan(name: str, x: torch.Tensor) -> None:
    """Require a tensor without ``nan``: argmax and sampling would pick an arbitrary entry of one."""
    if not is_compiling() and bool(torch.isnan(x).any()):
        rows = torch.isnan(x).flatten(1).any(dim=1).nonzero().flatten().tolist() if x.dim() > 1 else []
        where = f" (rows {rows[:5]})" if rows else ""
        raise ValueError(f"{name} holds nan{where}, shape {shape_str(x.shape)}: no token can be picked from it")


def check_real(name: str, value, *, minimum: float | None = None, positive: bool = False) -> float:
    """Require a finite real number (not a bool), at least ``minimum``, or above 0 with ``positive``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be above 0, got {value!r}")
    return value


def check_class(name: str, cls, allowed: Sequence[type]) -> None:
    """Require a class that is (a subclass of) one of ``allowed``."""
    names = ", ".join(c.__name__ for c in allowed)
    if not isinstance(cls, type) or not issubclass(cls, tuple(allowed)):
        shown = cls.__name__ if isinstance(cls, type) else f"{type(cls).__name__} ({cls!r})"
        raise TypeError(f"{name} must be one of the classes {names} (or a subclass), got {shown}")


def check_positive_int(name: str, value, minimum: int = 1) -> None:
    """Require an int (not a bool, not a float such as ``2.0``) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


MIN_TEMPERATURE = 0.01
"""The smallest temperature accepted. Below it, softmax is as good as one-hot, and dividing logits by a tiny
temperature overflows to ``inf`` (in float16 already for logits above 655), which turns the probabilities into
``nan``. For the most likely token, sampling functions take ``temperature=0``."""


def check_temperature(temperature, *, zero_is_greedy: bool = False) -> None:
    """Require a softmax temperature: a real number (not a bool), finite and at least ``MIN_TEMPERATURE``.

    ``zero_is_greedy``: also accept exactly 0, which a sampling function reads as "take the most likely token".
    """
    greedy = " or 0 (greedy: the most likely token)" if zero_is_greedy else ""
    allowed = f"a finite number >= {MIN_TEMPERATURE}{greedy}"
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(f"temperature must be {allowed}, got {type(temperature).__name__} ({temperature!r})")
    if zero_is_greedy and temperature == 0:
        return
    if not (math.isfinite(temperature) and temperature >= MIN_TEMPERATURE):
        raise ValueError(f"temperature must be {allowed}, got {temperature!r}")


TOKEN_ID_DTYPES = (torch.int64, torch.int32)
"""The index dtypes ``nn.Embedding`` accepts (int8, int16 and uint8 ids fail inside it)."""


def check_token_ids(name: str, ids, vocab_size: int | None, layout: str = "(batch, num_tokens)") -> None:
    """Require a tensor of token ids: dtype int64 or int32, the rank of ``layout``, values in ``[0, vocab_size)``
    (or just >= 0 when ``vocab_size`` is None)."""
    ndim = len([part for part in layout.strip("()").split(",") if part.strip()])
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids {layout}, got {type(ids).__name__}")
    if ids.dtype not in TOKEN_ID_DTYPES:
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
    if not ids.numel() or is_compiling():  # the range check reads the values: eager mode only
        return
    low, high = int(ids.min()), int(ids.max())
    if vocab_size is None and low < 0:
        raise ValueError(f"{name} must hold token ids >= 0, got values from {low} to {high}")
    if vocab_size is not None and (low < 0 or high >= vocab_size):
        raise ValueError(
            f"{name} must hold token ids from 0 to {vocab_size - 1} (vocab_size={vocab_size}), "
            f"got values from {low} to {high}"
        )


def check_probability(name: str, value) -> None:
    """Require a dropout probability in [0, 1): p = 1 would drop everything and scale by 1/0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} ({value!r})")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")


def check_heads(width: int, num_heads: int, name: str = "d_out") -> None:
    """Require ``num_heads`` to divide ``width`` (named ``name`` in the message)."""
    check_positive_int("num_heads", num_heads)
    if width % num_heads != 0:
        raise ValueError(
            f"{name}={width} must be divisible by num_heads={num_heads} so that each head gets "
            f"{name} // num_heads dimensions ({name} % num_heads = {width % num_heads})"
        )


def check_labels(name: str, labels, count: int, what: str) -> None:
    """Require one label per row or column being labelled (``count`` of ``what``)."""
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise TypeError(f"{name} must be a list or tuple of {count} words, one per {what}, got {type(labels).__name__}")
    if len(labels) != count:
        raise ValueError(f"{name} has {len(labels)} labels but there are {count} {what}")


def check_attention_inputs(queries, keys, values) -> torch.Size:
    """Check queries ``(..., num_queries, d_k)``, keys ``(..., num_keys, d_k)`` and values ``(..., num_keys, d_v)``:
    tensors of one rank, dtype and device, matching sizes, ``d_k >= 1`` and ``num_keys >= 1``, leading (batch,
    head) dimensions that broadcast. Returns that broadcast leading shape."""
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
