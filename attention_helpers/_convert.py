"""The weight-name tables and builders that convert PyTorch's modules into this package's, with no import of them.

Each of our classes' ``from_torch`` classmethod calls :func:`from_torch_into` with itself; :mod:`interop` (which
imports the modules) adds the other direction and picks the class for ``ah.from_torch``. The tables map our
parameter names to PyTorch's, keyed by PyTorch's module, and serve both directions.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# What PyTorch's modules may hold that ours cannot is checked here, where their layouts are known.


def check_torch_norm(torch_norm) -> None:
    if torch_norm.weight is None or torch_norm.bias is None:
        raise ValueError("torch_norm must have elementwise_affine=True and bias=True")


def check_torch_mha(torch_mha) -> None:
    if torch_mha.bias_k is not None or torch_mha.add_zero_attn:
        raise ValueError("torch_mha with add_bias_kv=True or add_zero_attn=True has no equivalent here")
    embed_dim = torch_mha.embed_dim
    if torch_mha.kdim != embed_dim or torch_mha.vdim != embed_dim:
        raise ValueError(
            "this module projects queries, keys and values from inputs of the same width d_in, so it needs "
            f"kdim == vdim == embed_dim, got embed_dim={embed_dim}, kdim={torch_mha.kdim}, vdim={torch_mha.vdim}"
        )


# The tables of parameter names, ours -> PyTorch's, one per pair, used by both directions. A key holds several
# of our names where PyTorch keeps their tensors concatenated along dim 0 (query, key and value projections).
Names = dict[tuple[str, ...], str]


def _prefixed(ours: str, theirs: str, table: Names) -> Names:
    return {tuple(ours + name for name in names): theirs + their for names, their in table.items()}


_LAYER_NORM: Names = {("gamma",): "weight", ("beta",): "bias"}
_MHA: Names = {
    ("W_query.weight", "W_key.weight", "W_value.weight"): "in_proj_weight",
    ("W_query.bias", "W_key.bias", "W_value.bias"): "in_proj_bias",
    ("out_proj.weight",): "out_proj.weight",
    ("out_proj.bias",): "out_proj.bias",
}
_FFN: Names = {(f"ffn.{name}",): name for name in ("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias")}
_ENCODER_LAYER: Names = {
    **_prefixed("attention.", "self_attn.", _MHA),
    **_prefixed("norm1.", "norm1.", _LAYER_NORM),
    **_prefixed("norm2.", "norm2.", _LAYER_NORM),
    **_FFN,
}
_DECODER_LAYER: Names = {
    **_prefixed("self_attention.", "self_attn.", _MHA),
    **_prefixed("cross_attention.", "multihead_attn.", _MHA),
    **{k: v for i in (1, 2, 3) for k, v in _prefixed(f"norm{i}.", f"norm{i}.", _LAYER_NORM).items()},
    **_FFN,
}


def _encoder_names(num_layers: int, final_norm: bool) -> Names:
    names = {
        k: v for i in range(num_layers) for k, v in _prefixed(f"layers.{i}.", f"layers.{i}.", _ENCODER_LAYER).items()
    }
    return {**names, **_prefixed("final_norm.", "norm.", _LAYER_NORM)} if final_norm else names


def _encoder_decoder_names(num_encoder_layers: int, num_decoder_layers: int) -> Names:
    return {
        **_prefixed("encoder.", "encoder.", _encoder_names(num_encoder_layers, final_norm=True)),
        **{
            k: v
            for i in range(num_decoder_layers)
            for k, v in _prefixed(f"decoder_layers.{i}.", f"decoder.layers.{i}.", _DECODER_LAYER).items()
        },
        **_prefixed("final_norm.", "decoder.norm.", _LAYER_NORM),
    }


def torch_names(torch_module: nn.Module) -> Names:
    """The table (ours -> PyTorch's names) for a PyTorch module (stacks need their number of layers)."""
    if isinstance(torch_module, nn.LayerNorm):
        return _LAYER_NORM
    if isinstance(torch_module, nn.MultiheadAttention):
        return _MHA
    if isinstance(torch_module, nn.TransformerEncoderLayer):
        return _ENCODER_LAYER
    if isinstance(torch_module, nn.TransformerEncoder):
        return _encoder_names(len(torch_module.layers), torch_module.norm is not None)
    if isinstance(torch_module, nn.TransformerDecoderLayer):
        return _DECODER_LAYER
    return _encoder_decoder_names(len(torch_module.encoder.layers), len(torch_module.decoder.layers))


def ours_to_theirs(state: dict[str, torch.Tensor], names: Names) -> dict[str, torch.Tensor]:
    # an entry whose names are absent is a bias the module was built without (qkv_bias=False)
    return {their: torch.cat([state[n] for n in ours]) for ours, their in names.items() if ours[0] in state}


def theirs_to_ours(state: dict[str, torch.Tensor], names: Names) -> dict[str, torch.Tensor]:
    return {
        n: part
        for ours, their in names.items()
        if their in state
        for n, part in zip(ours, state[their].chunk(len(ours)), strict=True)
    }


def _activation_name(activation) -> str:
    """``"relu"`` or ``"gelu"`` for a PyTorch layer's ``activation`` (a function or a module)."""
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    if activation is F.gelu or (isinstance(activation, nn.GELU) and activation.approximate == "none"):
        return "gelu"
    raise ValueError(f"only relu and gelu activations are supported, got {activation!r}")


def _torch_layer_settings(torch_layer: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer) -> dict:
    """Our layer's settings from a PyTorch layer, after checking that our layer can hold it."""
    if torch_layer.linear1.bias is None:
        kind = "EncoderLayer" if isinstance(torch_layer, nn.TransformerEncoderLayer) else "DecoderLayer"
        raise ValueError(f"torch_layer was built with bias=False, which this {kind} does not support")
    attentions = [torch_layer.self_attn] + [getattr(torch_layer, "multihead_attn", torch_layer.self_attn)]
    for attention in attentions:
        check_torch_mha(attention)
        if attention.dropout != torch_layer.dropout.p:
            raise ValueError(
                f"torch_layer's attention dropout ({attention.dropout}) differs from its other dropouts "
                f"({torch_layer.dropout.p}); ours has one drop probability per layer"
            )
    return dict(  # our layers' keyword arguments
        d_model=torch_layer.linear1.in_features,
        num_heads=torch_layer.self_attn.num_heads,
        ffn_hidden=torch_layer.linear1.out_features,
        dropout=torch_layer.dropout.p,
        norm_first=torch_layer.norm_first,
        activation=_activation_name(torch_layer.activation),
        eps=torch_layer.norm1.eps,
    )


def _stack_settings(layers: nn.ModuleList, what: str) -> dict:
    """The settings every layer of a PyTorch stack shares (ours builds its layers alike)."""
    settings = _torch_layer_settings(layers[0])
    for i, layer in enumerate(layers):
        other = _torch_layer_settings(layer)
        for key, value in settings.items():
            if other[key] != value:
                raise ValueError(
                    f"{what} layer {i} has {key}={other[key]!r} but layer 0 has {key}={value!r}; "
                    "ours builds every layer of a stack with the same settings"
                )
    return settings


def _layer_norm_from_torch(into: type[nn.Module], torch_norm: nn.LayerNorm) -> nn.Module:
    check_torch_norm(torch_norm)
    return into(torch_norm.normalized_shape, eps=torch_norm.eps)


def _mha_from_torch(
    into: type[nn.Module],
    torch_mha: nn.MultiheadAttention,
    *,
    causal: bool = False,
    context_length: int | None = None,
) -> nn.Module:
    check_torch_mha(torch_mha)
    return into(
        torch_mha.embed_dim,
        torch_mha.embed_dim,
        context_length if causal else None,
        torch_mha.dropout,
        torch_mha.num_heads,
        qkv_bias=torch_mha.in_proj_bias is not None,
        causal=causal,
        proj_bias=torch_mha.out_proj.bias is not None,
    )


def _encoder_layer_from_torch(into: type[nn.Module], torch_layer: nn.TransformerEncoderLayer) -> nn.Module:
    return into(**_torch_layer_settings(torch_layer))


def _encoder_from_torch(into: type[nn.Module], torch_encoder: nn.TransformerEncoder) -> nn.Module:
    if torch_encoder.norm is not None:
        check_torch_norm(torch_encoder.norm)
    settings = _stack_settings(torch_encoder.layers, "torch_encoder")
    return into(**settings, num_layers=len(torch_encoder.layers), final_norm=torch_encoder.norm is not None)


def _decoder_layer_from_torch(
    into: type[nn.Module], torch_layer: nn.TransformerDecoderLayer, *, context_length: int = 512
) -> nn.Module:
    return into(**_torch_layer_settings(torch_layer), context_length=context_length)


def _encoder_decoder_from_torch(
    into: type[nn.Module], torch_transformer: nn.Transformer, *, context_length: int = 512
) -> nn.Module:
    encoder, decoder = torch_transformer.encoder, torch_transformer.decoder
    if encoder.norm is None or decoder.norm is None:
        raise ValueError(
            "torch_transformer must end its encoder and its decoder with a LayerNorm, as nn.Transformer does"
        )
    check_torch_norm(encoder.norm)
    check_torch_norm(decoder.norm)
    s = _stack_settings(decoder.layers, "torch_transformer's decoder")
    encoder_settings = _stack_settings(encoder.layers, "torch_transformer's encoder")
    for key, value in s.items():
        if encoder_settings[key] != value:
            raise ValueError(
                f"torch_transformer's encoder has {key}={encoder_settings[key]!r} but its decoder has {key}={value!r}; "
                "ours builds both stacks with the same settings"
            )
    layers = dict(num_encoder_layers=len(encoder.layers), num_decoder_layers=len(decoder.layers))
    return into(**s, **layers, context_length=context_length)


# PyTorch's class -> (the argument's name in our classmethod, the builder of our empty module)
_BUILDERS = {
    nn.LayerNorm: ("torch_norm", _layer_norm_from_torch),
    nn.MultiheadAttention: ("torch_mha", _mha_from_torch),
    nn.TransformerEncoderLayer: ("torch_layer", _encoder_layer_from_torch),
    nn.TransformerEncoder: ("torch_encoder", _encoder_from_torch),
    nn.TransformerDecoderLayer: ("torch_layer", _decoder_layer_from_torch),
    nn.Transformer: ("torch_transformer", _encoder_decoder_from_torch),
}


def from_torch_into(into: Callable[..., nn.Module], torch_module: nn.Module, expected: type[nn.Module], **options):
    """Build ``into`` (one of our classes, or a function of its settings that builds one) with the settings of
    ``torch_module``, which must be an ``expected``,
    copy its weights, and put it on the same device and dtype, in the same training mode."""
    name, build = _BUILDERS[expected]
    if not isinstance(torch_module, expected):
        raise TypeError(f"{name} must be a torch.nn.{expected.__name__}, got {type(torch_module).__name__}")
    module = build(into, torch_module, **options).to(next(torch_module.parameters()))
    copied = theirs_to_ours(torch_module.state_dict(), torch_names(torch_module))
    missing = [name for name, _ in module.named_parameters() if name not in copied]
    if missing:  # a gap in the table, not the caller's mistake
        raise RuntimeError(f"from_torch copied no weights into {missing}")
    module.load_state_dict({**module.state_dict(), **copied})  # buffers (a causal mask) stay as built
    return module.train(torch_module.training)
