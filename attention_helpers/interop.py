"""Convert between this package's modules and PyTorch's own, in both directions, for side-by-side comparisons.

=========================  ===========================================================
ours                       PyTorch's
=========================  ===========================================================
``LayerNorm``              ``nn.LayerNorm``
``MultiHeadAttention``     ``nn.MultiheadAttention(batch_first=True)`` (d_in == d_out)
``EncoderLayer``           ``nn.TransformerEncoderLayer(batch_first=True)``
``Encoder``                ``nn.TransformerEncoder(enable_nested_tensor=False)``
``DecoderLayer``           ``nn.TransformerDecoderLayer(batch_first=True)``
``EncoderDecoder``         ``nn.Transformer(batch_first=True)``, its encoder without nested tensors
=========================  ===========================================================

:func:`to_torch` goes from ours to PyTorch's, :func:`from_torch` the other way (each class's ``from_torch``
classmethod calls it). Both build the target module once, with the source's settings, then copy the weights
through one table of parameter names per pair.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_class
from .attention import MultiHeadAttention
from .encoder import Encoder, EncoderLayer, LayerNorm
from .encoder_decoder import DecoderLayer, EncoderDecoder

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
    return {**names, **_prefixed("norm.", "norm.", _LAYER_NORM)} if final_norm else names


def _encoder_decoder_names(num_encoder_layers: int, num_decoder_layers: int) -> Names:
    return {
        **_prefixed("encoder.", "encoder.", _encoder_names(num_encoder_layers, final_norm=True)),
        **{
            k: v
            for i in range(num_decoder_layers)
            for k, v in _prefixed(f"decoder_layers.{i}.", f"decoder.layers.{i}.", _DECODER_LAYER).items()
        },
        **_prefixed("decoder_norm.", "decoder.norm.", _LAYER_NORM),
    }


def _names(module: nn.Module) -> Names:
    """The table for one of our modules (stacks need their number of layers)."""
    if isinstance(module, LayerNorm):
        return _LAYER_NORM
    if isinstance(module, MultiHeadAttention):
        return _MHA
    if isinstance(module, EncoderLayer):
        return _ENCODER_LAYER
    if isinstance(module, Encoder):
        return _encoder_names(len(module.layers), module.norm is not None)
    if isinstance(module, DecoderLayer):
        return _DECODER_LAYER
    return _encoder_decoder_names(len(module.encoder.layers), len(module.decoder_layers))


def _ours_to_theirs(state: dict[str, torch.Tensor], names: Names) -> dict[str, torch.Tensor]:
    # an entry whose names are absent is a bias the module was built without (qkv_bias=False)
    return {their: torch.cat([state[n] for n in ours]) for ours, their in names.items() if ours[0] in state}


def _theirs_to_ours(state: dict[str, torch.Tensor], names: Names) -> dict[str, torch.Tensor]:
    return {
        n: part
        for ours, their in names.items()
        if their in state
        for n, part in zip(ours, state[their].chunk(len(ours)), strict=True)
    }


# ---------------------------------------------------------------------------------------------------------------
# ours -> PyTorch's: each builder makes the empty PyTorch module with our module's settings.


def _check_mha_for_torch(mha: MultiHeadAttention) -> bool:
    """Raise if ``nn.MultiheadAttention`` cannot hold ``mha``; return its one bias flag."""
    if mha.d_in != mha.d_out:
        raise ValueError(
            f"nn.MultiheadAttention projects queries with a square (embed_dim, embed_dim) matrix, so it needs "
            f"d_in == d_out; this module has d_in={mha.d_in}, d_out={mha.d_out}"
        )
    if getattr(mha, "num_kv_heads", mha.num_heads) != mha.num_heads:
        raise ValueError(
            f"nn.MultiheadAttention has one key/value head per query head; this module has num_heads={mha.num_heads} "
            f"and num_kv_heads={mha.num_kv_heads} (grouped-query attention)"
        )
    qkv_bias = mha.W_query.bias is not None
    if qkv_bias != (mha.out_proj.bias is not None):
        raise ValueError("nn.MultiheadAttention has one bias flag: qkv_bias and proj_bias must be equal")
    return qkv_bias


def _layer_norm_to_torch(norm: LayerNorm) -> nn.LayerNorm:
    return nn.LayerNorm(norm.parameters_shape, eps=norm.eps)


def _mha_to_torch(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    qkv_bias = _check_mha_for_torch(mha)
    return nn.MultiheadAttention(mha.d_out, mha.num_heads, dropout=mha.dropout.p, bias=qkv_bias, batch_first=True)


def _layer_settings(layer: EncoderLayer | DecoderLayer, attention: MultiHeadAttention) -> dict:
    """The keyword arguments of ``nn.Transformer{Encoder,Decoder}Layer`` for one of our layers."""
    _check_mha_for_torch(attention)
    return dict(
        d_model=layer.d_model,
        nhead=attention.num_heads,
        dim_feedforward=layer.ffn.linear1.out_features,
        dropout=layer.dropout1.p,
        activation="gelu" if isinstance(layer.ffn.activation, nn.GELU) else "relu",
        layer_norm_eps=layer.norm1.eps,
        batch_first=True,
        norm_first=layer.norm_first,
    )


def _encoder_layer_to_torch(layer: EncoderLayer) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(**_layer_settings(layer, layer.attention))


def _decoder_layer_to_torch(layer: DecoderLayer) -> nn.TransformerDecoderLayer:
    _check_mha_for_torch(layer.cross_attention)
    return nn.TransformerDecoderLayer(**_layer_settings(layer, layer.self_attention))


def _encoder_to_torch(module: Encoder) -> nn.TransformerEncoder:
    norm = None if module.norm is None else _layer_norm_to_torch(module.norm)
    # enable_nested_tensor=False: the nested-tensor fast path zeroes padded positions' outputs instead of
    # computing them. nn.TransformerEncoder copies the layer it is given num_layers times.
    layer = _encoder_layer_to_torch(module.layers[0])
    return nn.TransformerEncoder(layer, len(module.layers), norm=norm, enable_nested_tensor=False)


def _encoder_decoder_to_torch(module: EncoderDecoder) -> nn.Transformer:
    first = module.decoder_layers[0]
    decoder = nn.TransformerDecoder(
        _decoder_layer_to_torch(first), len(module.decoder_layers), norm=_layer_norm_to_torch(module.decoder_norm)
    )
    return nn.Transformer(
        **_layer_settings(first, first.self_attention),
        num_encoder_layers=len(module.encoder.layers),
        num_decoder_layers=len(module.decoder_layers),
        custom_encoder=_encoder_to_torch(module.encoder),  # ours: without nested tensors
        custom_decoder=decoder,
    )


_TO_TORCH = {
    LayerNorm: _layer_norm_to_torch,
    MultiHeadAttention: _mha_to_torch,
    EncoderLayer: _encoder_layer_to_torch,
    Encoder: _encoder_to_torch,
    DecoderLayer: _decoder_layer_to_torch,
    EncoderDecoder: _encoder_decoder_to_torch,
}


def to_torch(module: nn.Module) -> nn.Module:
    """Return the PyTorch module equivalent to ``module`` (see the module's table), with copies of its weights,
    on its device and dtype, in its training mode.

    Causality is not a weight: run the torch attention module with a causal ``attn_mask``
    (``causal_mask(num_tokens)``) to compare it with a causal ``MultiHeadAttention``; likewise pass
    ``tgt_mask=causal_mask(tgt_len)`` (and ``memory_key_padding_mask``) to an ``nn.Transformer``.
    """
    build = next((build for ours, build in _TO_TORCH.items() if isinstance(module, ours)), None)
    if build is None:
        raise TypeError(
            "to_torch converts LayerNorm, MultiHeadAttention, EncoderLayer, Encoder, DecoderLayer or EncoderDecoder, "
            f"got {type(module).__name__}"
        )
    torch_module = build(module).to(next(module.parameters()))
    torch_module.load_state_dict(_ours_to_theirs(module.state_dict(), _names(module)))
    return torch_module.train(module.training)


# ---------------------------------------------------------------------------------------------------------------
# PyTorch's -> ours: each builder checks what we cannot hold and makes our empty module with the same settings.


def _activation_name(activation) -> str:
    """``"relu"`` or ``"gelu"`` for a PyTorch layer's ``activation`` (a function or a module)."""
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    if activation is F.gelu or (isinstance(activation, nn.GELU) and activation.approximate == "none"):
        return "gelu"
    raise ValueError(f"only relu and gelu activations are supported, got {activation!r}")


def _check_torch_norm(torch_norm: nn.LayerNorm) -> None:
    if torch_norm.weight is None or torch_norm.bias is None:
        raise ValueError("torch_norm must have elementwise_affine=True and bias=True")


def _check_torch_mha(torch_mha: nn.MultiheadAttention) -> None:
    if torch_mha.bias_k is not None or torch_mha.add_zero_attn:
        raise ValueError("torch_mha with add_bias_kv=True or add_zero_attn=True has no equivalent here")
    embed_dim = torch_mha.embed_dim
    if torch_mha.kdim != embed_dim or torch_mha.vdim != embed_dim:
        raise ValueError(
            "this module projects queries, keys and values from inputs of the same width d_in, so it needs "
            f"kdim == vdim == embed_dim, got embed_dim={embed_dim}, kdim={torch_mha.kdim}, vdim={torch_mha.vdim}"
        )


def _torch_layer_settings(torch_layer: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer) -> dict:
    """Our layer's settings from a PyTorch layer, after checking that our layer can hold it."""
    if torch_layer.linear1.bias is None:
        kind = "EncoderLayer" if isinstance(torch_layer, nn.TransformerEncoderLayer) else "DecoderLayer"
        raise ValueError(f"torch_layer was built with bias=False, which this {kind} does not support")
    attentions = [torch_layer.self_attn] + [getattr(torch_layer, "multihead_attn", torch_layer.self_attn)]
    for attention in attentions:
        _check_torch_mha(attention)
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


def _layer_norm_from_torch(into: type[LayerNorm], torch_norm: nn.LayerNorm) -> LayerNorm:
    _check_torch_norm(torch_norm)
    return into(torch_norm.normalized_shape, eps=torch_norm.eps)


def _mha_from_torch(
    into: type[MultiHeadAttention],
    torch_mha: nn.MultiheadAttention,
    *,
    causal: bool = False,
    context_length: int | None = None,
) -> MultiHeadAttention:
    _check_torch_mha(torch_mha)
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


def _encoder_layer_from_torch(into: type[EncoderLayer], torch_layer: nn.TransformerEncoderLayer) -> EncoderLayer:
    return into(**_torch_layer_settings(torch_layer))


def _encoder_from_torch(into: type[Encoder], torch_encoder: nn.TransformerEncoder) -> Encoder:
    if torch_encoder.norm is not None:
        _check_torch_norm(torch_encoder.norm)
    settings = _stack_settings(torch_encoder.layers, "torch_encoder")
    return into(**settings, num_layers=len(torch_encoder.layers), final_norm=torch_encoder.norm is not None)


def _decoder_layer_from_torch(
    into: type[DecoderLayer], torch_layer: nn.TransformerDecoderLayer, *, context_length: int = 512
) -> DecoderLayer:
    return into(**_torch_layer_settings(torch_layer), context_length=context_length)


def _encoder_decoder_from_torch(
    into: type[EncoderDecoder], torch_transformer: nn.Transformer, *, context_length: int = 512
) -> EncoderDecoder:
    encoder, decoder = torch_transformer.encoder, torch_transformer.decoder
    if encoder.norm is None or decoder.norm is None:
        raise ValueError(
            "torch_transformer must end its encoder and its decoder with a LayerNorm, as nn.Transformer does"
        )
    _check_torch_norm(encoder.norm)
    _check_torch_norm(decoder.norm)
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


# PyTorch's class -> (our class, the argument's name in our classmethod, the builder)
_FROM_TORCH = {
    nn.LayerNorm: (LayerNorm, "torch_norm", _layer_norm_from_torch),
    nn.MultiheadAttention: (MultiHeadAttention, "torch_mha", _mha_from_torch),
    nn.TransformerEncoderLayer: (EncoderLayer, "torch_layer", _encoder_layer_from_torch),
    nn.TransformerEncoder: (Encoder, "torch_encoder", _encoder_from_torch),
    nn.TransformerDecoderLayer: (DecoderLayer, "torch_layer", _decoder_layer_from_torch),
    nn.Transformer: (EncoderDecoder, "torch_transformer", _encoder_decoder_from_torch),
}


def from_torch(torch_module: nn.Module, *, into: type[nn.Module] | None = None, **options) -> nn.Module:
    """Return our module equivalent to the PyTorch module ``torch_module`` (see the module's table), with copies
    of its weights, on its device and dtype, in its training mode.

    Options: ``causal`` (default ``False``: torch's attention has no built-in mask) and ``context_length`` for
    ``nn.MultiheadAttention``; ``context_length`` (default 512, the longest target) for ``nn.TransformerDecoderLayer``
    and ``nn.Transformer``. ``into`` is the class to build (a subclass of ours; each class's ``from_torch``
    passes itself); ``torch_module`` must then be the PyTorch class that converts to it.

    Ours is always batch-first. A torch module built with ``batch_first=False`` (torch's default) reads its
    input as ``(num_tokens, batch, d_model)``: fed the same tensor, it silently attends over the batch axis.
    Compare with a module built with ``batch_first=True``, or transpose (``x.transpose(0, 1)``).
    """
    if into is not None:
        check_class("into", into, [entry[0] for entry in _FROM_TORCH.values()])
    if into is None:
        entry = next((e for theirs, e in _FROM_TORCH.items() if isinstance(torch_module, theirs)), None)
        if entry is None:
            raise TypeError(
                "from_torch converts nn.LayerNorm, nn.MultiheadAttention, nn.TransformerEncoderLayer, "
                "nn.TransformerEncoder, nn.TransformerDecoderLayer or nn.Transformer, "
                f"got {type(torch_module).__name__}"
            )
        into = entry[0]
    else:
        theirs, entry = next((t, e) for t, e in _FROM_TORCH.items() if issubclass(into, e[0]))
        if not isinstance(torch_module, theirs):
            raise TypeError(f"{entry[1]} must be a torch.nn.{theirs.__name__}, got {type(torch_module).__name__}")
    module = entry[2](into, torch_module, **options).to(next(torch_module.parameters()))
    copied = _theirs_to_ours(torch_module.state_dict(), _names(module))
    missing = [name for name, _ in module.named_parameters() if name not in copied]
    if missing:  # a gap in the table, not the caller's mistake
        raise RuntimeError(f"from_torch copied no weights into {missing}")
    module.load_state_dict({**module.state_dict(), **copied})  # buffers (a causal mask) stay as built
    return module.train(torch_module.training)
