"""Build PyTorch's own modules with this package's weights, for side-by-side comparisons.

The other direction, PyTorch module -> ours, is each class's ``from_torch`` constructor
(:meth:`MultiHeadAttention.from_torch`, :meth:`EncoderLayer.from_torch`, :meth:`Encoder.from_torch`,
:meth:`LayerNorm.from_torch`, :meth:`DecoderLayer.from_torch`, :meth:`EncoderDecoder.from_torch`).
The returned torch modules are batch-first, like ours.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import MultiHeadAttention
from .encoder import Encoder, EncoderLayer, LayerNorm
from .encoder_decoder import DecoderLayer, EncoderDecoder


def _same_settings(module: nn.Module, torch_module: nn.Module) -> nn.Module:
    return torch_module.to(next(module.parameters())).train(module.training)


def _layer_norm_to_torch(norm: LayerNorm) -> nn.LayerNorm:
    torch_norm = nn.LayerNorm(norm.parameters_shape, eps=norm.eps)
    with torch.no_grad():
        torch_norm.weight.copy_(norm.gamma)
        torch_norm.bias.copy_(norm.beta)
    return _same_settings(norm, torch_norm)


def _mha_to_torch(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    if mha.d_in != mha.d_out:
        raise ValueError(
            f"nn.MultiheadAttention projects queries with a square (embed_dim, embed_dim) matrix, so it needs "
            f"d_in == d_out; this module has d_in={mha.d_in}, d_out={mha.d_out}"
        )
    if mha.num_kv_heads != mha.num_heads:
        raise ValueError(
            f"nn.MultiheadAttention has one key/value head per query head; this module has num_heads={mha.num_heads} "
            f"and num_kv_heads={mha.num_kv_heads} (grouped-query attention)"
        )
    qkv_bias = mha.W_query.bias is not None
    if qkv_bias != (mha.out_proj.bias is not None):
        raise ValueError("nn.MultiheadAttention has one bias flag: qkv_bias and proj_bias must be equal")
    torch_mha = nn.MultiheadAttention(mha.d_out, mha.num_heads, dropout=mha.dropout.p, bias=qkv_bias, batch_first=True)
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(torch.cat([mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]))
        torch_mha.out_proj.weight.copy_(mha.out_proj.weight)
        if qkv_bias:
            torch_mha.in_proj_bias.copy_(torch.cat([mha.W_query.bias, mha.W_key.bias, mha.W_value.bias]))
            torch_mha.out_proj.bias.copy_(mha.out_proj.bias)
    return _same_settings(mha, torch_mha)


def _encoder_layer_to_torch(layer: EncoderLayer) -> nn.TransformerEncoderLayer:
    ffn = layer.ffn
    torch_layer = nn.TransformerEncoderLayer(
        layer.d_model,
        layer.attention.num_heads,
        dim_feedforward=ffn.linear1.out_features,
        dropout=layer.dropout1.p,
        activation="gelu" if isinstance(ffn.activation, nn.GELU) else "relu",
        layer_norm_eps=layer.norm1.eps,
        batch_first=True,
        norm_first=layer.norm_first,
    )
    torch_layer.self_attn = _mha_to_torch(layer.attention)
    torch_layer.norm1 = _layer_norm_to_torch(layer.norm1)
    torch_layer.norm2 = _layer_norm_to_torch(layer.norm2)
    torch_layer.linear1.load_state_dict(ffn.linear1.state_dict())
    torch_layer.linear2.load_state_dict(ffn.linear2.state_dict())
    return _same_settings(layer, torch_layer)


def _decoder_layer_to_torch(layer: DecoderLayer) -> nn.TransformerDecoderLayer:
    ffn = layer.ffn
    torch_layer = nn.TransformerDecoderLayer(
        layer.d_model,
        layer.self_attention.num_heads,
        dim_feedforward=ffn.linear1.out_features,
        dropout=layer.dropout1.p,
        activation="gelu" if isinstance(ffn.activation, nn.GELU) else "relu",
        layer_norm_eps=layer.norm1.eps,
        batch_first=True,
        norm_first=layer.norm_first,
    )
    torch_layer.self_attn = _mha_to_torch(layer.self_attention)
    torch_layer.multihead_attn = _mha_to_torch(layer.cross_attention)
    torch_layer.norm1 = _layer_norm_to_torch(layer.norm1)
    torch_layer.norm2 = _layer_norm_to_torch(layer.norm2)
    torch_layer.norm3 = _layer_norm_to_torch(layer.norm3)
    torch_layer.linear1.load_state_dict(ffn.linear1.state_dict())
    torch_layer.linear2.load_state_dict(ffn.linear2.state_dict())
    return _same_settings(layer, torch_layer)


def _encoder_to_torch(module: Encoder) -> nn.TransformerEncoder:
    layers = [_encoder_layer_to_torch(layer) for layer in module.layers]
    norm = None if module.norm is None else _layer_norm_to_torch(module.norm)
    # enable_nested_tensor=False: the nested-tensor fast path zeroes padded positions' outputs
    # instead of computing them, which would make padded comparisons differ for a reason unrelated
    # to the maths.
    torch_encoder = nn.TransformerEncoder(layers[0], len(layers), norm=norm, enable_nested_tensor=False)
    torch_encoder.layers = nn.ModuleList(layers)
    return _same_settings(module, torch_encoder)


def _encoder_decoder_to_torch(module: EncoderDecoder) -> nn.Transformer:
    layers = [_decoder_layer_to_torch(layer) for layer in module.decoder_layers]
    decoder = nn.TransformerDecoder(layers[0], len(layers), norm=_layer_norm_to_torch(module.decoder_norm))
    decoder.layers = nn.ModuleList(layers)
    encoder = _encoder_to_torch(module.encoder)
    first = module.decoder_layers[0]
    transformer = nn.Transformer(
        module.d_model,
        module.num_heads,
        len(module.encoder.layers),
        len(layers),
        dim_feedforward=first.ffn.linear1.out_features,
        dropout=first.dropout1.p,
        custom_encoder=nn.Identity(),  # placeholders: nn.Transformer re-initialises the stacks it is given
        custom_decoder=nn.Identity(),
        layer_norm_eps=first.norm1.eps,
        batch_first=True,
        norm_first=first.norm_first,
    )
    transformer.encoder, transformer.decoder = encoder, decoder
    return _same_settings(module, transformer)


def to_torch(module: nn.Module) -> nn.Module:
    """Return the PyTorch module equivalent to ``module``, with copies of its weights.

    =========================  ==========================================================
    ours                       PyTorch's
    =========================  ==========================================================
    ``LayerNorm``              ``nn.LayerNorm``
    ``MultiHeadAttention``     ``nn.MultiheadAttention(batch_first=True)`` (d_in == d_out)
    ``EncoderLayer``           ``nn.TransformerEncoderLayer(batch_first=True)``
    ``Encoder``                ``nn.TransformerEncoder(enable_nested_tensor=False)``
    ``DecoderLayer``           ``nn.TransformerDecoderLayer(batch_first=True)``
    ``EncoderDecoder``         ``nn.Transformer(batch_first=True)``, its encoder without nested tensors
    =========================  ==========================================================

    Causality is not a weight: run the torch attention module with a causal ``attn_mask``
    (``causal_mask(num_tokens)``) to compare it with a causal ``MultiHeadAttention``; likewise pass
    ``tgt_mask=causal_mask(tgt_len)`` (and ``memory_key_padding_mask``) to an ``nn.Transformer``.
    """
    if isinstance(module, LayerNorm):
        return _layer_norm_to_torch(module)
    if isinstance(module, MultiHeadAttention):
        return _mha_to_torch(module)
    if isinstance(module, EncoderLayer):
        return _encoder_layer_to_torch(module)
    if isinstance(module, Encoder):
        return _encoder_to_torch(module)
    if isinstance(module, DecoderLayer):
        return _decoder_layer_to_torch(module)
    if isinstance(module, EncoderDecoder):
        return _encoder_decoder_to_torch(module)
    raise TypeError(
        "to_torch converts LayerNorm, MultiHeadAttention, EncoderLayer, Encoder, DecoderLayer or EncoderDecoder, "
        f"got {type(module).__name__}"
    )
