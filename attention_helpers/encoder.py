"""The transformer encoder: layer normalisation, the feed-forward network, positions and the stack. Each layer maps
``(batch, num_tokens, d_model)`` to that shape, post-LN (the original paper) or pre-LN (``norm_first=True``, GPT-2 on);
``dropout`` acts on the attention weights, in the feed-forward network and on every residual branch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_bool,
    check_choice,
    check_heads,
    check_instance,
    check_length,
    check_module_dtype,
    check_padding_mask,
    check_positive_int,
    check_positive_real,
    check_probability,
    check_sequence,
    check_size,
    check_tensor,
    normalized_shape,
    shape_str,
)
from ._convert import from_torch_into
from .attention import MultiHeadAttention

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def check_layer_settings(d_model, ffn_hidden, num_heads, dropout, norm_first, activation, eps) -> None:
    """What every encoder and decoder layer is built from: checked by a layer built on its own, and by a config."""
    check_positive_int("d_model", d_model)
    check_heads(d_model, num_heads, "d_model")
    check_positive_int("ffn_hidden", ffn_hidden)
    check_probability("dropout", dropout)
    check_bool("norm_first", norm_first)
    check_choice("activation", activation, ACTIVATIONS)
    check_positive_real("eps", eps)


@dataclass(frozen=True, kw_only=True)
class LayerConfig:
    """The settings every layer of an encoder or decoder stack shares, checked once, here."""

    d_model: int
    num_heads: int
    ffn_hidden: int
    dropout: float = 0.0
    norm_first: bool = False
    activation: str = "relu"
    eps: float = 1e-5

    def __post_init__(self):
        check_layer_settings(**self.layer_settings())

    def layer_settings(self) -> dict:
        """One layer's keyword arguments."""
        return {field.name: getattr(self, field.name) for field in fields(LayerConfig)}


@dataclass(frozen=True, kw_only=True)
class EncoderConfig(LayerConfig):
    """An :class:`Encoder`'s sizes, given by name: its layers' settings, ``num_layers``, and ``final_norm``, a
    LayerNorm after the last layer (usual with pre-LN, whose residual stream is otherwise never normalised)."""

    num_layers: int
    final_norm: bool = False

    def __post_init__(self):
        check_positive_int("num_layers", self.num_layers)
        check_bool("final_norm", self.final_norm)
        super().__post_init__()


class LayerNorm(nn.Module):
    """``gamma * (x - mean) / sqrt(var + eps) + beta`` over the trailing ``parameters_shape`` (``d_model`` or
    ``[d_model]``) of each token, the variance biased (divided by d, not d - 1), by PyTorch's fused ``F.layer_norm``
    (float16 statistics in float32: ``300**2`` overflows 65504)."""

    def __init__(self, parameters_shape: int | Sequence[int], eps: float = 1e-5):
        super().__init__()
        self.parameters_shape = normalized_shape(parameters_shape)
        self.eps = check_positive_real("eps", eps)
        self.gamma = nn.Parameter(torch.ones(self.parameters_shape))
        self.beta = nn.Parameter(torch.zeros(self.parameters_shape))

    def extra_repr(self) -> str:
        return f"{self.parameters_shape}, eps={self.eps}"

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        gamma = self.gamma
        try:  # the checks below cost nothing when the input is right: they run when torch refuses it
            if inputs.dtype == gamma.dtype:  # torch would take float16 inputs to float32 weights
                return F.layer_norm(inputs, self.parameters_shape, gamma, self.beta, self.eps)
        except (AttributeError, RuntimeError):
            pass
        n = len(self.parameters_shape)
        check_tensor("inputs", inputs, n, f"(..., {', '.join(map(str, self.parameters_shape))})")
        if tuple(inputs.shape[-n:]) != self.parameters_shape:
            raise ValueError(
                f"inputs of shape {shape_str(inputs.shape)} must end with parameters_shape "
                f"{shape_str(self.parameters_shape)}"
            )
        check_module_dtype("inputs", inputs, self.gamma, "LayerNorm")
        return F.layer_norm(inputs, self.parameters_shape, self.gamma, self.beta, self.eps)  # torch's own error

    @classmethod
    def from_torch(cls, torch_norm: nn.LayerNorm) -> LayerNorm:
        """Copy an ``nn.LayerNorm`` (with its affine weight and bias)."""
        return from_torch_into(cls, torch_norm, nn.LayerNorm)


def dropout_if_training(dropout: nn.Dropout, x: torch.Tensor) -> torch.Tensor:
    """In eval mode, ``x`` without the module call (a generation step would make a dozen that change nothing)."""
    return dropout(x) if dropout.training else x


def residual(x: torch.Tensor, sublayer, norm: nn.Module, dropout: nn.Dropout, norm_first: bool):
    """One sublayer with its residual connection: pre-LN (``norm_first``) ``x + dropout(sublayer(norm(x)))``, a
    residual stream no norm touches; post-LN ``norm(x + dropout(sublayer(x)))``. If ``sublayer`` returns a tuple
    (attention and its weights), so does this: the new ``x``, then the rest."""
    out = sublayer(norm(x) if norm_first else x)
    out, *rest = out if isinstance(out, tuple) else (out,)
    out = dropout_if_training(dropout, out)
    x = x + out if norm_first else norm(x + out)
    return (x, *rest) if rest else x


class FeedForward(nn.Module):
    """``linear2(dropout(activation(linear1(x))))`` on every token, ``d_model`` -> ``ffn_hidden`` -> ``d_model``."""

    def __init__(self, d_model: int, ffn_hidden: int, dropout: float = 0.1, activation: str = "relu"):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("ffn_hidden", ffn_hidden)
        check_probability("dropout", dropout)
        check_choice("activation", activation, ACTIVATIONS)
        self.d_model = d_model
        self.linear1 = nn.Linear(d_model, ffn_hidden)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(ffn_hidden, d_model)

    def forward(self, x: torch.Tensor, *, checked: bool = False) -> torch.Tensor:
        if not checked:
            check_tensor("x", x, 1, "(..., d_model)")
            check_size("x", x, -1, self.d_model, "d_model", "(..., d_model)")
            check_module_dtype("x", x, self.linear1.weight, "FeedForward")
        return self.linear2(dropout_if_training(self.dropout, self.activation(self.linear1(x))))


class EncoderLayer(nn.Module):
    """Self-attention, then a feed-forward network, each in a :func:`residual` sublayer."""

    def __init__(
        self,
        d_model: int,
        ffn_hidden: int,
        num_heads: int,
        dropout: float,
        *,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
    ):
        super().__init__()
        check_layer_settings(d_model, ffn_hidden, num_heads, dropout, norm_first, activation, eps)
        self.d_model = d_model
        self.norm_first = norm_first
        self.attention = MultiHeadAttention(d_model, d_model, None, dropout, num_heads, qkv_bias=True, causal=False)
        self.norm1 = LayerNorm(d_model, eps=eps)
        self.dropout1 = nn.Dropout(dropout)
        self.ffn = FeedForward(d_model, ffn_hidden, dropout, activation)
        self.norm2 = LayerNorm(d_model, eps=eps)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, key_padding_mask=None, return_weights: bool = False, *, checked: bool = False):
        """``key_padding_mask`` ``(batch, num_tokens)``: True at padding; ``return_weights``: also the attention's."""
        if not checked:
            key_padding_mask = self.check_input(x, key_padding_mask, return_weights)
        attend = partial(self.attention, key_padding_mask=key_padding_mask, return_weights=return_weights, checked=True)
        out = residual(x, attend, self.norm1, self.dropout1, self.norm_first)
        x, attn_weights = out if return_weights else (out, None)
        x = residual(x, partial(self.ffn, checked=True), self.norm2, self.dropout2, self.norm_first)
        return (x, attn_weights) if return_weights else x

    def check_input(self, x, key_padding_mask, return_weights, module: str = "EncoderLayer"):
        """The checks of :meth:`forward` (or of a stack's, ``module``); returns the mask as ``(batch, num_tokens)``."""
        check_sequence("x", x, self.d_model, "(batch, num_tokens, d_model)", self.norm1.gamma, module, "num_tokens")
        check_bool("return_weights", return_weights)
        return check_padding_mask("key_padding_mask", key_padding_mask, x)

    @classmethod
    def from_torch(cls, torch_layer: nn.TransformerEncoderLayer) -> EncoderLayer:
        """Copy a ``torch.nn.TransformerEncoderLayer``'s weights and settings (ours is batch-first)."""
        return from_torch_into(cls, torch_layer, nn.TransformerEncoderLayer)


class Encoder(nn.Module):
    """A stack of :class:`EncoderLayer` s, ``Encoder(EncoderConfig(d_model=..., ...))``."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        check_instance("config", config, EncoderConfig, "an EncoderConfig (Encoder(EncoderConfig(d_model=..., ...)))")
        self.config = config
        self.layers = nn.ModuleList(EncoderLayer(**config.layer_settings()) for _ in range(config.num_layers))
        self.final_norm = LayerNorm(config.d_model, eps=config.eps) if config.final_norm else None

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None, return_weights: bool = False):
        """As :meth:`EncoderLayer.forward`; the weights of every layer are stacked as ``(num_layers, ...)``."""
        key_padding_mask = self.layers[0].check_input(x, key_padding_mask, return_weights, "Encoder")  # once
        all_weights = []
        for layer in self.layers:
            out = layer(x, key_padding_mask, return_weights, checked=True)
            x, attn_weights = out if return_weights else (out, None)
            all_weights.append(attn_weights)
        x = x if self.final_norm is None else self.final_norm(x)
        return (x, torch.stack(all_weights)) if return_weights else x

    @classmethod
    def from_torch(cls, torch_encoder: nn.TransformerEncoder) -> Encoder:
        """Copy a ``torch.nn.TransformerEncoder`` (its layers and optional final norm; ours is batch-first)."""
        return from_torch_into(lambda **settings: cls(EncoderConfig(**settings)), torch_encoder, nn.TransformerEncoder)


class PositionalEncoding(nn.Module):
    """Add the sinusoidal positions of "Attention Is All You Need" to embeddings: ``pe[pos, 2i] = sin(pos /
    10000^(2i / d_model))``, ``pe[pos, 2i + 1] = cos(...)``. Each pair of dimensions turns at its own frequency, so
    every position gets a distinct pattern. ``pe`` is a ``(context_length, d_model)`` buffer."""

    def __init__(self, d_model: int, context_length: int = 5000):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("context_length", context_length)
        self.d_model = d_model
        self.context_length = context_length
        position = torch.arange(context_length, dtype=torch.float64)[:, None]  # (context_length, 1)
        # 1 / 10000^(2i / d_model) for each pair index i: (ceil(d_model / 2),)
        inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
        angles = position * inv_freq  # (context_length, ceil(d_model / 2))
        pe = torch.zeros(context_length, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angles)
        pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])  # an odd d_model has one sine more than cosines
        self.register_buffer("pe", pe.float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, (3,), "(batch, num_tokens, d_model)", "num_tokens")
        check_size("x", x, -1, self.d_model, "d_model", "(batch, num_tokens, d_model)")
        check_length("x", x.shape[1], self.context_length, built="PositionalEncoding")
        return x + self.pe[: x.shape[1]].to(x.dtype)
