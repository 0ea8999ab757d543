"""float16 and bfloat16 at large magnitudes: every path must be no worse than PyTorch's own.

Each case is built so that an intermediate overflows float16's largest number (65504) if computed in the
obvious order: the raw product Q·Kᵀ before the division by sqrt(d_k), LayerNorm's squared deviations, a
softmax sum over many terms. PyTorch's own functions avoid each of these, so ours must too.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_helpers import (
    CausalAttention,
    Encoder,
    EncoderConfig,
    LayerNorm,
    MultiHeadAttention,
    SelfAttentionV2,
    attention_with_weights,
    softmax_stable,
    to_torch,
)

LOW = [torch.float16, torch.bfloat16]


def relative_error(actual: torch.Tensor, reference: torch.Tensor) -> float:
    assert torch.isfinite(actual).all(), "non-finite values"
    return ((actual.float() - reference.float()).abs().max() / reference.float().abs().max()).item()


def no_worse_than_torch(ours, torchs, reference, dtype):
    """Ours is finite and within float rounding of the float32 reference wherever torch's own is."""
    assert torch.isfinite(torchs).all(), "the case should be one torch's own function handles"
    tolerance = {torch.float16: 0.01, torch.bfloat16: 0.05}[dtype]
    assert relative_error(ours, reference) <= max(tolerance, 2 * relative_error(torchs, reference))


def _identity_projections(module: nn.Module) -> nn.Module:
    """Queries = keys = values = x, so that the scores are x·x: large inputs give large raw products."""
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            linear = getattr(module, name)
            linear.weight.copy_(torch.eye(linear.weight.shape[0], linear.weight.shape[1]))
            if linear.bias is not None:
                linear.bias.zero_()
        if hasattr(module, "out_proj"):
            module.out_proj.weight.copy_(torch.eye(module.out_proj.weight.shape[0]))
            module.out_proj.bias.zero_()
    return module


def _large_tokens(num_tokens=4, d=64, low=30.0, high=40.0):
    """Tokens with entries between 30 and 40: x·x ~ 64 · 35² ≈ 78,000 > 65,504, while x·x / 8 ≈ 9,800 fits."""
    return low + (high - low) * torch.rand(1, num_tokens, d, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("dtype", LOW)
def test_scaled_dot_product_attention_scales_before_the_product(dtype):
    q = torch.full((1, 4, 64), 40.0)
    x = _large_tokens()
    for queries in (q, x):
        reference = F.scaled_dot_product_attention(queries, queries, queries)
        low = queries.to(dtype)
        ours, weights = attention_with_weights(low, low, low)
        no_worse_than_torch(ours, F.scaled_dot_product_attention(low, low, low), reference, dtype)
        assert torch.isfinite(weights).all()


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("return_weights", [False, True], ids=["fast path", "explicit path"])
def test_multihead_attention_at_large_magnitudes(dtype, return_weights):
    mha = _identity_projections(MultiHeadAttention(64, 64, 8, 0.0, 1, qkv_bias=True)).eval()
    x = _large_tokens()
    with torch.no_grad():
        reference = mha(x)
        torch_mha = to_torch(mha).to(dtype)
        mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)
        torchs = torch_mha(x.to(dtype), x.to(dtype), x.to(dtype), attn_mask=mask, need_weights=False)[0]
        out = mha.to(dtype)(x.to(dtype), return_weights=return_weights)
        ours = out[0] if return_weights else out
    no_worse_than_torch(ours, torchs, reference, dtype)


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("cls", [SelfAttentionV2, CausalAttention])
def test_single_head_modules_at_large_magnitudes(dtype, cls):
    module = _identity_projections(cls(64, 64) if cls is SelfAttentionV2 else cls(64, 64, 8, 0.0)).eval()
    x = _large_tokens()
    causal = cls is CausalAttention
    with torch.no_grad():
        reference = module(x)
        low = x.to(dtype)
        torchs = F.scaled_dot_product_attention(low, low, low, is_causal=causal)
        no_worse_than_torch(module.to(dtype)(low), torchs, reference, dtype)


@pytest.mark.parametrize("dtype", LOW)
def test_layer_norm_statistics_do_not_overflow(dtype):
    x = torch.tensor([[300.0, -300.0, 0.0, 0.0], [1000.0, 2000.0, -3000.0, 50.0]])
    reference = nn.LayerNorm(4)(x)
    with torch.no_grad():
        torchs = nn.LayerNorm(4).to(dtype)(x.to(dtype))
        ours = LayerNorm(4).to(dtype)(x.to(dtype))
    no_worse_than_torch(ours, torchs, reference.detach(), dtype)
    assert ours.dtype == dtype


@pytest.mark.parametrize("dtype", LOW)
def test_softmax_over_many_equal_scores_does_not_overflow_its_sum(dtype):
    scores = torch.zeros(70_000)
    reference = torch.softmax(scores, dim=-1)
    ours = softmax_stable(scores.to(dtype))
    no_worse_than_torch(ours, torch.softmax(scores.to(dtype), dim=-1), reference, dtype)
    assert ours.dtype == dtype


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_at_large_magnitudes(dtype, norm_first):
    torch.manual_seed(0)
    encoder = Encoder(
        EncoderConfig(d_model=64, ffn_hidden=128, num_heads=4, num_layers=2, norm_first=norm_first)
    ).eval()
    x = _large_tokens(num_tokens=6) * 8  # entries up to 320: squared deviations overflow float16
    with torch.no_grad():
        reference = encoder(x)
        torchs = to_torch(encoder).to(dtype)(x.to(dtype))
        ours = encoder.to(dtype)(x.to(dtype))
    no_worse_than_torch(ours, torchs, reference, dtype)


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("magnitude", [1.0, 100.0, 300.0, 1000.0])
def test_scaled_dot_product_attention_is_no_worse_than_torch_up_to_entries_of_1e3(dtype, magnitude):
    """Random queries, keys and values with entries up to about ``magnitude`` (d_k != d_v, heads, a batch)."""
    generator = torch.Generator().manual_seed(0)
    q, k = (magnitude * torch.randn(2, 3, n, 8, generator=generator) for n in (5, 7))
    v = magnitude * torch.randn(2, 3, 7, 6, generator=generator)
    reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    low = [t.to(dtype) for t in (q, k, v)]
    ours, weights = attention_with_weights(*low)
    assert ours.dtype == weights.dtype == dtype
    no_worse_than_torch(ours, F.scaled_dot_product_attention(*low), reference, dtype)
    assert torch.isfinite(weights).all() and torch.allclose(weights.float().sum(-1), torch.ones(2, 3, 5), atol=1e-2)


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("magnitude", [100.0, 1000.0])
def test_multihead_attention_returning_weights_is_finite_where_torch_is(dtype, magnitude):
    """The explicit path (return_weights=True) against the fused one, PyTorch's kernel, at entries up to 1e3."""
    mha = _identity_projections(MultiHeadAttention(8, 8, 6, 0.0, 2, qkv_bias=True)).eval()
    x = magnitude * torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = mha.double()(x.double())
        low = mha.to(dtype)
        fused = low(x.to(dtype))
        explicit, weights = low(x.to(dtype), return_weights=True)
    no_worse_than_torch(explicit, fused, reference, dtype)
    assert torch.isfinite(weights).all(), "the attention weights hold nan or inf"


def test_sampling_float16_logits_at_the_smallest_temperature_does_not_overflow():
    """700 / 0.01 = 70,000 is past float16's largest number: in float16 the logits become inf and then nan."""
    from attention_helpers import sample_next_token

    logits = torch.tensor([[700.0, 690.0, -5.0], [1.0, 650.0, 649.0]], dtype=torch.float16)
    generator = torch.Generator().manual_seed(0)
    picks = torch.cat([sample_next_token(logits, 0.01, generator=generator) for _ in range(20)], dim=1)
    assert (picks[0] == 0).all() and (picks[1] == 1).all(), "T = 0.01 must pick each row's largest logit"
