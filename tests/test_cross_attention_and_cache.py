"""MultiHeadAttention's two decoder features: cross-attention (``context=``) and the KV cache (``use_cache=``)."""

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
        actual, weights = ours(x, padding, return_weights=True, context=context)
        assert weights.shape == (3, num_heads, 5, 9)
        close(weights.sum(-1), torch.ones(3, num_heads, 5))
        if padded:
            assert (weights[2, :, :, 1:] == 0).all()
    else:
        actual = ours(x, padding, context=context)
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
    close(mha(x, context=x), mha(x))


def test_cross_attention_ignores_the_order_of_the_context_tokens_and_each_query_is_on_its_own():
    mha = perturb_(MultiHeadAttention(6, 12, None, 0.0, 3, causal=False))
    x, context = torch.randn(2, 4, 6), torch.randn(2, 10, 6)
    padding = _padding(2, 10, [0, 3])
    out = mha(x, padding, context=context)
    order = torch.randperm(10)
    close(mha(x, padding[:, order], context=context[:, order]), out)
    # each query reads the context alone: one query at a time gives the same rows
    close(torch.cat([mha(x[:, i : i + 1], padding, context=context) for i in range(4)], dim=1), out)
    # and a change in the context changes the output
    assert not torch.allclose(mha(x, padding, context=context + 1), out)


def test_cross_attention_bad_input_names_what_is_wrong():
    cross = MultiHeadAttention(6, 12, None, 0.0, 3, causal=False)
    x = torch.randn(2, 4, 6)
    with pytest.raises(ValueError, match="causal=False"):
        MultiHeadAttention(6, 12, 8, 0.0, 3)(x, context=torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match=r"context must have shape .* d_in=6.*\(2, 5, 7\)"):
        cross(x, context=torch.randn(2, 5, 7))
    with pytest.raises(ValueError, match="context has batch=3 but x has batch=2"):
        cross(x, context=torch.randn(3, 5, 6))
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(2, 4\).*\(2, 5\)"):
        cross(x, torch.zeros(2, 4, dtype=torch.bool), context=torch.randn(2, 5, 6))
    with pytest.raises(TypeError, match="context must have a floating-point dtype"):
        cross(x, context=torch.ones(2, 5, 6, dtype=torch.long))
    with pytest.raises(TypeError, match="context has dtype torch.float64 but x has dtype torch.float32"):
        cross(x, context=torch.ones(2, 5, 6, dtype=torch.float64))


# --- KV cache -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 1, 3], [9]])
@pytest.mark.parametrize("explicit", [False, True], ids=["fast", "explicit"])
def test_cached_chunks_give_the_same_output_as_one_full_pass(chunks, explicit):
    """Under a causal mask earlier keys and values never change, so feeding the tokens a few at a time with the
    cache must reproduce the full pass, row for row, attention weights included."""
    mha = perturb_(MultiHeadAttention(6, 12, 10, 0.0, 3, qkv_bias=True)).eval()
    x = torch.randn(2, 9, 6)
    full, full_weights = mha(x, return_weights=True)
    outputs, start = [], 0
    for size in chunks:
        piece = x[:, start : start + size]
        if explicit:
            out, weights = mha(piece, return_weights=True, use_cache=True)
            close(weights, full_weights[:, :, start : start + size, : start + size])
        else:
            out = mha(piece, use_cache=True)
        outputs.append(out)
        start += size
        assert mha.cache_k.shape == mha.cache_v.shape == (2, 3, start, 4)  # (batch, num_heads, cached, head_dim)
    close(torch.cat(outputs, dim=1), full)


def test_cache_with_a_padding_mask_over_all_keys_matches_the_full_pass():
    mha = perturb_(MultiHeadAttention(6, 12, 10, 0.0, 3)).eval()
    x = torch.randn(2, 6, 6)
    padding = torch.zeros(2, 6, dtype=torch.bool)
    padding[1, 2] = True  # a hole in the middle of sequence 1
    full = mha(x, padding)
    steps = [mha(x[:, i : i + 1], padding[:, : i + 1], use_cache=True) for i in range(6)]
    close(torch.cat(steps, dim=1)[:, 3:], full[:, 3:])
    close(torch.cat(steps, dim=1)[0], full[0])


def test_reset_cache_starts_a_new_sequence_and_the_cache_is_not_saved():
    mha = perturb_(MultiHeadAttention(6, 12, 10, 0.0, 3)).eval()
    first, second = torch.randn(1, 4, 6), torch.randn(1, 4, 6)
    mha(first, use_cache=True)
    assert mha.num_cached_tokens == 4
    assert "cache_k" not in mha.state_dict() and "cache_v" not in mha.state_dict()
    mha.reset_cache()
    assert mha.cache_k is None and mha.cache_v is None and mha.num_cached_tokens == 0
    close(mha(second, use_cache=True), mha(second))


def test_cache_bad_use_names_what_is_wrong():
    mha = MultiHeadAttention(6, 12, 5, 0.0, 3)
    mha(torch.randn(2, 4, 6), use_cache=True)
    with pytest.raises(ValueError, match=r"holds 4 tokens and x adds 2.*context_length=5.*reset_cache"):
        mha(torch.randn(2, 2, 6), use_cache=True)
    with pytest.raises(ValueError, match="batch=2 but x has batch=3"):
        mha(torch.randn(3, 1, 6), use_cache=True)
    with pytest.raises(ValueError, match="needs a causal module"):
        MultiHeadAttention(6, 12, None, 0.0, 3, causal=False)(torch.randn(2, 4, 6), use_cache=True)
    with pytest.raises(ValueError, match="causal=False"):
        mha(torch.randn(2, 1, 6), use_cache=True, context=torch.randn(2, 3, 6))
    # with the cache, the padding mask covers every key: the 4 cached tokens and the new one
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(2, 3\).*\(2, 5\)"):
        mha(torch.randn(2, 1, 6), torch.zeros(2, 3, dtype=torch.bool), use_cache=True)
