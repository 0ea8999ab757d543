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

:func:`to_torch` goes from ours to PyTorch's, :func:`from_torch` the other way (as each class's ``from_torch``
classmethod does). Both build the target module once, with the source's settings, then copy the weights through
one table of parameter names per pair (in :mod:`attention_helpers._convert`, which the modules use too: this
module imports them, never the reverse).
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import check_class
from ._convert import ours_to_theirs, torch_names
from .attention import MultiHeadAttention
from .encoder import Encoder, EncoderLayer, LayerNorm
from .encoder_decoder import DecoderLayer, EncoderDecoder

# ---------------------------------------------------------------------------------------------------------------
# ours -> PyTorch's: each builder makes the empty PyTorch module with our module's settings.


def _layer_norm_to_torch(norm: LayerNorm) -> nn.LayerNorm:
    return nn.LayerNorm(norm.parameters_shape, eps=norm.eps)


def check_mha_for_torch(mha) -> bool:
    """Raise if ``nn.MultiheadAttention`` cannot hold ``mha``; return its one bias flag (a bias that ``mha``
    lacks, with the other present, becomes zeros)."""
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
    return mha.W_query.bias is not None or mha.out_proj.bias is not None


def _mha_to_torch(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    bias = check_mha_for_torch(mha)
    return nn.MultiheadAttention(mha.d_out, mha.num_heads, dropout=mha.dropout.p, bias=bias, batch_first=True)


def _layer_settings(layer: EncoderLayer | DecoderLayer, attention: MultiHeadAttention) -> dict:
    """The keyword arguments of ``nn.Transformer{Encoder,Decoder}Layer`` for one of our layers."""
    check_mha_for_torch(attention)
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
    check_mha_for_torch(layer.cross_attention)
    return nn.TransformerDecoderLayer(**_layer_settings(layer, layer.self_attention))


def _encoder_to_torch(module: Encoder) -> nn.TransformerEncoder:
    norm = None if module.final_norm is None else _layer_norm_to_torch(module.final_norm)
    # enable_nested_tensor=False: the nested-tensor fast path zeroes padded positions' outputs instead of
    # computing them. nn.TransformerEncoder copies the layer it is given num_layers times.
    layer = _encoder_layer_to_torch(module.layers[0])
    return nn.TransformerEncoder(layer, len(module.layers), norm=norm, enable_nested_tensor=False)


def _encoder_decoder_to_torch(module: EncoderDecoder) -> nn.Transformer:
    first = module.decoder_layers[0]
    decoder = nn.TransformerDecoder(
        _decoder_layer_to_torch(first), len(module.decoder_layers), norm=_layer_norm_to_torch(module.final_norm)
    )
    return nn.Transformer(
        **_layer_settings(first, first.self_attention),
        num_encoder_layers=len(module.encoder.layers),
        num_decoder_layers=len(module.decoder_layers),
        custom_encoder=_encoder_to_torch(module.encoder),  # ours: without nested tensors
        custom_decoder=decoder,
    )


# our class -> (PyTorch's class, the builder of the empty PyTorch module)
_PAIRS = {
    LayerNorm: (nn.LayerNorm, _layer_norm_to_torch),
    MultiHeadAttention: (nn.MultiheadAttention, _mha_to_torch),
    EncoderLayer: (nn.TransformerEncoderLayer, _encoder_layer_to_torch),
    Encoder: (nn.TransformerEncoder, _encoder_to_torch),
    DecoderLayer: (nn.TransformerDecoderLayer, _decoder_layer_to_torch),
    EncoderDecoder: (nn.Transformer, _encoder_decoder_to_torch),
}


def to_torch(module: nn.Module) -> nn.Module:
    """Return the PyTorch module equivalent to ``module`` (see the module's table), with copies of its weights,
    on its device and dtype, in its training mode. A bias ours lacks while PyTorch's has it (``qkv_bias=False``
    with ``proj_bias=True``, the defaults) is zeros there.

    Causality is not a weight: run the torch attention module with a causal ``attn_mask``
    (``causal_mask(num_tokens)``) to compare it with a causal ``MultiHeadAttention``; likewise pass
    ``tgt_mask=causal_mask(tgt_len)`` (and ``memory_key_padding_mask``) to an ``nn.Transformer``.
    """
    build = next((build for ours, (_, build) in _PAIRS.items() if isinstance(module, ours)), None)
    if build is None:
        raise TypeError(
            "to_torch converts LayerNorm, MultiHeadAttention, EncoderLayer, Encoder, DecoderLayer or EncoderDecoder, "
            f"got {type(module).__name__}"
        )
    torch_module = build(module).to(next(module.parameters()))
    zeros = {name: torch.zeros_like(t) for name, t in torch_module.state_dict().items()}  # for a bias ours lacks
    torch_module.load_state_dict({**zeros, **ours_to_theirs(module.state_dict(), torch_names(torch_module))})
    return torch_module.train(module.training)


def from_torch(torch_module: nn.Module, *, into: type[nn.Module] | None = None, **options) -> nn.Module:
    """Return our module equivalent to the PyTorch module ``torch_module`` (see the module's table), with copies
    of its weights, on its device and dtype, in its training mode.

    Options: ``causal`` (default ``False``: torch's attention has no built-in mask) and ``context_length`` for
    ``nn.MultiheadAttention``; ``context_length`` (default 512, the longest target) for ``nn.TransformerDecoderLayer``
    and ``nn.Transformer``. ``into`` is the class to build (a subclass of ours); ``torch_module`` must then be the
    PyTorch class that converts to it.

    Ours is always batch-first. A torch module built with ``batch_first=False`` (torch's default) reads its
    input as ``(num_tokens, batch, d_model)``: fed the same tensor, it silently attends over the batch axis.
    Compare with a module built with ``batch_first=True``, or transpose (``x.transpose(0, 1)``).
    """
    if into is not None:
        check_class("into", into, list(_PAIRS))
    if into is None:
        into = next((ours for ours, (theirs, _) in _PAIRS.items() if isinstance(torch_module, theirs)), None)
        if into is None:
            raise TypeError(
                "from_torch converts nn.LayerNorm, nn.MultiheadAttention, nn.TransformerEncoderLayer, "
                "nn.TransformerEncoder, nn.TransformerDecoderLayer or nn.Transformer, "
                f"got {type(torch_module).__name__}"
            )
    return into.from_torch(torch_module, **options)  # each class knows how its settings build it
