"""MultiHeadAttention's cross-attention (``memory=``): queries from one sequence, keys and values from another."""

import pytest
import torch
from conftest import perturb_
from torch import nn

from attention_helpers import MultiHeadAttention


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-4)


def _padding(batch, num_keys, pad_counts):
    """Boolean (batch, num_keys), True on the last pad_counts[b] keys of sequence b."""
    return torch.arange(num_keys)[None, :] >= torch.tensor([num_keys - p for p in pad_counts])[:, None]


# --- cross-attention ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_heads", [1, 3, 4])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("explicit", [False, True], ids=["fast", "explicit"])
def test_cross_attention_equals_torch_multihead_attention_forward_and_backward(num_heads, padded, explicit):
    torch_mha = perturb_(nn.MultiheadAttention(12, num_heads, batch_first=True))
    ours = MultiHeadAttention.from_torch(torch_mha)
    x = torch.randn(3, 5, 12, requires_grad=True)  # 5 queries
    context = torch.randn(3, 9, 12, requires_grad=True)  # 9 keys and values
    padding = _padding(3, 9, [0, 2, 8]) if padded else None
    expected, _ = torch_mha(x, context, context, key_padding_mask=padding, need_weights=False)
    if explicit:
        actual, weights = ours(x, padding, return_weights=True, memory=context)
        assert weights.shape == (3, num_heads, 5, 9)
        close(weights.sum(-1), torch.ones(3, num_heads, 5))
        if padded:
            assert (weights[2, :, :, 1:] == 0).all()
    else:
        actual = ours(x, padding, memory=context)
    close(actual, expected)
    grads = torch.autograd.grad(actual.square().sum(), [x, context, *ours.parameters()])
    torch_grads = torch.autograd.grad(expected.square().sum(), [x, context, *torch_mha.parameters()])
    close(grads[0], torch_grads[0])
    close(grads[1], torch_grads[1])
    torch_params = dict(torch_mha.named_parameters())
    ours_grads = dict(zip([n for n, _ in ours.named_parameters()], grads[2:], strict=True))
    close(torch.cat([ours_grads[f"W_{n}.weight"] for n in ("query", "key", "value")]), torch_grads[2])
    assert list(torch_params)[0] == "in_proj_weight"


def test_cross_attention_to_itself_is_self_attention_with_d_in_not_d_out():
    mha = perturb_(MultiHeadAttention(6, 12, None, 0.0, 3, qkv_bias=True, causal=False))
    x = torch.randn(2, 7, 6)
    close(mha(x, memory=x), mha(x))


def test_cross_attention_ignores_the_order_of_the_context_tokens_and_each_query_is_on_its_own():
    mha = perturb_(MultiHeadAttention(6, 12, None, 0.0, 3, causal=False))
    x, context = torch.randn(2, 4, 6), torch.randn(2, 10, 6)
    padding = _padding(2, 10, [0, 3])
    out = mha(x, padding, memory=context)
    order = torch.randperm(10)
    close(mha(x, padding[:, order], memory=context[:, order]), out)
    # each query reads the context alone: one query at a time gives the same rows
    close(torch.cat([mha(x[:, i : i + 1], padding, memory=context) for i in range(4)], dim=1), out)
    # and a change in the context changes the output
    assert not torch.allclose(mha(x, padding, memory=context + 1), out)


def test_cross_attention_bad_input_names_what_is_wrong():
    cross = MultiHeadAttention(6, 12, None, 0.0, 3, causal=False)
    x = torch.randn(2, 4, 6)
    with pytest.raises(ValueError, match="causal=False"):
        MultiHeadAttention(6, 12, 8, 0.0, 3)(x, memory=torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match=r"memory must have shape .* d_in=6.*\(2, 5, 7\)"):
        cross(x, memory=torch.randn(2, 5, 7))
    with pytest.raises(ValueError, match="memory has batch=3 but x has batch=2"):
        cross(x, memory=torch.randn(3, 5, 6))
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(2, 4\).*\(2, 5\)"):
        cross(x, torch.zeros(2, 4, dtype=torch.bool), memory=torch.randn(2, 5, 6))
    with pytest.raises(TypeError, match="memory must have a floating-point dtype"):
        cross(x, memory=torch.ones(2, 5, 6, dtype=torch.long))
    with pytest.raises(TypeError, match="memory has dtype torch.float64 but x has dtype torch.float32"):
        cross(x, memory=torch.ones(2, 5, 6, dtype=torch.float64))
