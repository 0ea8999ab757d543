"""interop: ours -> PyTorch's (to_torch) and back (from_torch), checked against PyTorch's own modules."""

import warnings

import pytest
import torch
from torch import nn

import attention_helpers as ah
from attention_helpers import interop

D_MODEL, HEADS, FFN, SRC_LEN, TGT_LEN = 12, 3, 20, 7, 5  # d_model != the feed-forward width


def _perturbed(module: nn.Module) -> nn.Module:
    """Random values everywhere, so that a LayerNorm's ones and zeros cannot hide a swapped name."""
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.3)
    return module.eval()


def _transformer(*args, **kwargs) -> nn.Transformer:
    with warnings.catch_warnings():  # nn.Transformer warns when its encoder cannot use nested tensors
        warnings.simplefilter("ignore", UserWarning)
        return nn.Transformer(*args, **kwargs)


# name: (a factory for ours, a factory for PyTorch's, from_torch options)
PAIRS = {
    "LayerNorm": (
        lambda: ah.LayerNorm(D_MODEL, eps=1e-6),
        lambda: nn.LayerNorm(D_MODEL, eps=1e-6),
        {},
    ),
    "MultiHeadAttention": (
        lambda: ah.MultiHeadAttention(D_MODEL, D_MODEL, 16, 0.0, HEADS, qkv_bias=True, causal=True),
        lambda: nn.MultiheadAttention(D_MODEL, HEADS, bias=True, batch_first=True),
        {"causal": True, "context_length": 16},
    ),
    "MultiHeadAttention without biases": (
        lambda: ah.MultiHeadAttention(D_MODEL, D_MODEL, None, 0.0, HEADS, causal=False, proj_bias=False),
        lambda: nn.MultiheadAttention(D_MODEL, HEADS, bias=False, batch_first=True),
        {},
    ),
    "EncoderLayer": (
        lambda: ah.EncoderLayer(D_MODEL, FFN, HEADS, 0.0, norm_first=True, activation="gelu"),
        lambda: nn.TransformerEncoderLayer(
            D_MODEL, HEADS, FFN, 0.0, activation="gelu", batch_first=True, norm_first=True
        ),
        {},
    ),
    "Encoder": (
        lambda: ah.Encoder(
            ah.EncoderConfig(d_model=D_MODEL, ffn_hidden=FFN, num_heads=HEADS, num_layers=3, final_norm=True)
        ),
        lambda: nn.TransformerEncoder(
            nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, 0.0, batch_first=True),
            3,
            norm=nn.LayerNorm(D_MODEL),
            enable_nested_tensor=False,
        ),
        {},
    ),
    "DecoderLayer": (
        lambda: ah.DecoderLayer(D_MODEL, FFN, HEADS, 0.0, context_length=32),
        lambda: nn.TransformerDecoderLayer(D_MODEL, HEADS, FFN, 0.0, batch_first=True),
        {"context_length": 32},
    ),
    "EncoderDecoder": (
        lambda: ah.EncoderDecoder(
            ah.EncoderDecoderConfig(
                d_model=D_MODEL,
                num_heads=HEADS,
                num_encoder_layers=2,
                num_decoder_layers=3,
                ffn_hidden=FFN,
                dropout=0.0,
                norm_first=True,
                context_length=32,
            )
        ),
        lambda: _transformer(D_MODEL, HEADS, 2, 3, FFN, 0.0, batch_first=True, norm_first=True),
        {"context_length": 32},
    ),
}


def _run_torch(module: nn.Module, generator: torch.Generator) -> torch.Tensor:
    """Run one of PyTorch's modules the way its ours counterpart runs (causal where ours is)."""
    src = torch.randn(2, SRC_LEN, D_MODEL, generator=generator)
    tgt = torch.randn(2, TGT_LEN, D_MODEL, generator=generator)
    padding = torch.zeros(2, SRC_LEN, dtype=torch.bool)
    padding[1, -2:] = True
    causal = ah.causal_mask(TGT_LEN)
    if isinstance(module, nn.LayerNorm):
        return module(src)
    if isinstance(module, nn.MultiheadAttention):
        return module(src, src, src, key_padding_mask=padding, need_weights=False)[0]
    if isinstance(module, nn.TransformerEncoderLayer):
        return module(src, src_key_padding_mask=padding)
    if isinstance(module, nn.TransformerEncoder):
        return module(src, src_key_padding_mask=padding)
    if isinstance(module, nn.TransformerDecoderLayer):
        return module(tgt, src, tgt_mask=causal, memory_key_padding_mask=padding)
    return module(src, tgt, tgt_mask=causal, src_key_padding_mask=padding, memory_key_padding_mask=padding)


@pytest.mark.parametrize("name", PAIRS)
def test_from_torch_of_to_torch_gives_back_ours(name):
    make_ours, _, options = PAIRS[name]
    ours = _perturbed(make_ours())
    back = ah.from_torch(ah.to_torch(ours), **options)
    assert type(back) is type(ours) and not back.training
    assert back.state_dict().keys() == ours.state_dict().keys()
    for key, value in ours.state_dict().items():
        torch.testing.assert_close(back.state_dict()[key], value, rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("name", PAIRS)
def test_to_torch_of_from_torch_computes_what_theirs_computes(name):
    _, make_theirs, options = PAIRS[name]
    theirs = _perturbed(make_theirs())
    back = ah.to_torch(ah.from_torch(theirs, **options))
    assert type(back) is type(theirs) and not back.training
    with torch.no_grad():
        expected = _run_torch(theirs, torch.Generator().manual_seed(1))
        torch.testing.assert_close(_run_torch(back, torch.Generator().manual_seed(1)), expected)


@pytest.mark.parametrize("name", PAIRS)
def test_the_function_and_the_classmethod_give_the_same_module(name):
    make_ours, make_theirs, options = PAIRS[name]
    theirs = _perturbed(make_theirs())
    by_function = interop.from_torch(theirs, **options)
    by_method = type(make_ours()).from_torch(theirs, **options)
    assert type(by_function) is type(by_method)
    assert by_function.state_dict().keys() == by_method.state_dict().keys()
    for key, value in by_method.state_dict().items():
        torch.testing.assert_close(by_function.state_dict()[key], value, rtol=0, atol=0, msg=key)


def test_from_torch_keeps_dtype_and_builds_subclasses():
    class Norm(ah.LayerNorm):
        pass

    norm = Norm.from_torch(nn.LayerNorm(D_MODEL).double())
    assert type(norm) is Norm and norm.gamma.dtype == torch.float64
    assert ah.to_torch(norm).weight.dtype == torch.float64


def test_an_encoder_is_built_once_nothing_discarded(monkeypatch):
    """Encoder.from_torch of a 3-layer encoder builds 3 EncoderLayers and 3 attention modules, not 6."""
    built = {"EncoderLayer": 0, "MultiHeadAttention": 0}
    for cls in (ah.EncoderLayer, ah.MultiHeadAttention):
        original = cls.__init__

        def counting(self, *args, _original=original, _name=cls.__name__, **kwargs):
            built[_name] += 1
            _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)
    ah.Encoder.from_torch(PAIRS["Encoder"][1]())
    assert built == {"EncoderLayer": 3, "MultiHeadAttention": 3}


@pytest.mark.parametrize("module", [nn.Linear(2, 3), nn.TransformerDecoder(nn.TransformerDecoderLayer(4, 2), 1)])
def test_from_torch_of_an_unsupported_module_names_it(module):
    with pytest.raises(TypeError, match=f"got {type(module).__name__}"):
        ah.from_torch(module)


def test_from_torch_refuses_what_ours_cannot_hold():
    encoder = PAIRS["Encoder"][1]()
    encoder.layers[1].norm_first = True
    with pytest.raises(ValueError, match="layer 1 has norm_first=True"):
        ah.from_torch(encoder)
    transformer = _transformer(D_MODEL, HEADS, 1, 1, FFN, 0.0, batch_first=True, activation="gelu")
    transformer.encoder.layers[0].activation = nn.ReLU()
    with pytest.raises(ValueError, match="activation"):
        ah.from_torch(transformer)
    with pytest.raises(ValueError, match="bias=False"):
        ah.from_torch(nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, batch_first=True, bias=False))
    with pytest.raises(ValueError, match="elementwise_affine"):
        ah.from_torch(nn.LayerNorm(D_MODEL, elementwise_affine=False))
    with pytest.raises(TypeError, match="torch_encoder must be a torch.nn.TransformerEncoder, got LayerNorm"):
        ah.Encoder.from_torch(nn.LayerNorm(D_MODEL))
    with pytest.raises(TypeError, match="unexpected keyword argument 'causal'"):
        ah.from_torch(nn.LayerNorm(D_MODEL), causal=True)
