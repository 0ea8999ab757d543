import pytest
import torch
import torch.nn.functional as F

from attention_helpers import (
    attention_scores_loop,
    attention_with_weights,
    causal_mask,
    random_dot_products,
    softmax_naive,
    softmax_stable,
    softmax_with_temperature,
    toy_embeddings,
)


def test_scores_loop_equals_matrix_vector_product():
    inputs = toy_embeddings()
    for query in inputs:
        torch.testing.assert_close(attention_scores_loop(inputs, query), inputs @ query)
    inputs = torch.randn(7, 5)  # num_tokens != d
    query = torch.randn(5)
    torch.testing.assert_close(attention_scores_loop(inputs, query), inputs @ query)


@pytest.mark.parametrize("softmax", [softmax_naive, softmax_stable])
def test_softmaxes_equal_torch_softmax_on_moderate_scores(softmax):
    scores = torch.randn(4, 5, 6) * 3
    for dim in (0, 1, -1):
        torch.testing.assert_close(softmax(scores, dim=dim), torch.softmax(scores, dim=dim))


def test_naive_softmax_overflows_where_the_stable_one_does_not():
    scores = torch.tensor([1e4, 2e4, 3e4])
    assert torch.isnan(softmax_naive(scores)).any()  # exp(1e4) = inf, inf / inf = nan
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        stable = softmax_stable(scores.to(dtype))
        assert torch.isfinite(stable).all(), dtype
        torch.testing.assert_close(stable.float(), torch.softmax(scores, dim=-1))
    big = torch.tensor([[1e4, -1e4, 5e3], [0.0, 1e4, 1e4]], dtype=torch.float16)
    assert torch.isfinite(softmax_stable(big)).all()
    torch.testing.assert_close(softmax_stable(big).sum(-1), torch.ones(2, dtype=torch.float16))


def test_stable_softmax_is_shift_invariant():
    scores = torch.randn(3, 8)
    torch.testing.assert_close(softmax_stable(scores), softmax_stable(scores + 1000.0))


def test_causal_mask_hides_exactly_the_future():
    mask = causal_mask(5)
    assert mask.dtype == torch.bool and mask.shape == (5, 5)
    for i in range(5):
        for j in range(5):
            assert bool(mask[i, j]) == (j > i)


def _random_qkv(*batch, num_queries=5, num_keys=7, d_k=4, d_v=6, dtype=torch.float32):
    return (
        torch.randn(*batch, num_queries, d_k, dtype=dtype),
        torch.randn(*batch, num_keys, d_k, dtype=dtype),
        torch.randn(*batch, num_keys, d_v, dtype=dtype),
    )


def test_sdpa_matches_pytorch_without_mask():
    q, k, v = _random_qkv(2, 3)  # num_queries != num_keys, d_k != d_v
    context_vec, weights = attention_with_weights(q, k, v)
    torch.testing.assert_close(context_vec, F.scaled_dot_product_attention(q, k, v), atol=1e-6, rtol=1e-5)
    assert weights.shape == (2, 3, 5, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))


def test_sdpa_matches_pytorch_with_causal_and_random_masks():
    q, k, v = _random_qkv(2, num_queries=6, num_keys=6)
    context_vec, weights = attention_with_weights(q, k, v, mask=causal_mask(6))
    torch.testing.assert_close(
        context_vec, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6, rtol=1e-5
    )
    assert (weights.triu(1) == 0).all()

    mask = torch.rand(2, 6, 6) < 0.4
    mask[..., 0] = False  # every query keeps at least one key
    context_vec, weights = attention_with_weights(q, k, v, mask=mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)  # torch: True = may attend
    torch.testing.assert_close(context_vec, expected, atol=1e-6, rtol=1e-5)
    assert (weights[mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 6))


def test_fully_masked_row_gives_zero_weights_and_zero_context_with_finite_gradients():
    q, k, v = (t.requires_grad_() for t in _random_qkv(2, num_queries=4, num_keys=4))
    mask = causal_mask(4).expand(2, 4, 4).clone()
    mask[0, 2, :] = True  # query 2 of batch 0 may see nothing
    context_vec, weights = attention_with_weights(q, k, v, mask=mask)
    assert (weights[0, 2] == 0).all() and (context_vec[0, 2] == 0).all()
    assert torch.isfinite(context_vec).all()
    # The same convention as PyTorch's fused kernel.
    torch.testing.assert_close(
        context_vec, F.scaled_dot_product_attention(q, k, v, attn_mask=~mask), atol=1e-6, rtol=1e-5
    )
    context_vec.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_stays_finite_and_close(dtype):
    q, k, v = _random_qkv(2, num_queries=6, num_keys=6)
    reference, _ = attention_with_weights(q, k, v, mask=causal_mask(6))
    context_vec, weights = attention_with_weights(q.to(dtype), k.to(dtype), v.to(dtype), mask=causal_mask(6))
    assert context_vec.dtype == dtype and torch.isfinite(context_vec).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(context_vec.float(), reference, atol=3e-2, rtol=3e-2)
    # Masking with -inf (not -1e20, which overflows float16 to -inf anyway and breaks arithmetic) is exact.
    assert (weights.triu(1) == 0).all()


def test_dropout_is_applied_to_the_weights():
    q, k, v = _random_qkv(num_queries=50, num_keys=50)
    dropout = torch.nn.Dropout(0.5)
    _, kept = attention_with_weights(q, k, v)
    _, dropped = attention_with_weights(q, k, v, dropout=dropout)
    survivors = dropped != 0
    assert 0.4 < survivors.float().mean() < 0.6
    torch.testing.assert_close(dropped[survivors], kept[survivors] / 0.5)  # survivors scaled by 1 / (1 - p)


def test_softmax_accepts_any_rank():
    scores = torch.randn(2, 1, 3, 1, 2, 1, 2, 2, 5)  # 9 dimensions
    torch.testing.assert_close(softmax_stable(scores), torch.softmax(scores, dim=-1))


def test_temperature_one_is_softmax_low_sharpens_high_flattens():
    scores = torch.randn(4, 7)
    assert torch.allclose(softmax_with_temperature(scores, 1.0), torch.softmax(scores, dim=-1))
    cold = softmax_with_temperature(scores, 0.01)
    hot = softmax_with_temperature(scores, 1000.0)
    assert torch.allclose(cold, F.one_hot(scores.argmax(-1), 7).float(), atol=1e-4)  # all weight on the maximum
    assert torch.allclose(hot, torch.full_like(hot, 1 / 7), atol=1e-3)  # nearly uniform
    warm = softmax_with_temperature(scores, 2.0)
    assert torch.equal(warm.argsort(-1), scores.argsort(-1))  # the order of the scores is kept
    assert torch.allclose(cold.sum(-1), torch.ones(4))


@pytest.mark.parametrize(("temperature", "error"), [(0.0, ValueError), (-1.0, ValueError), ("1", TypeError)])
def test_temperature_must_be_a_positive_number(temperature, error):
    with pytest.raises(error, match="temperature"):
        softmax_with_temperature(torch.zeros(3), temperature)


@pytest.mark.parametrize("d_k", [1, 16, 256])
def test_random_dot_products_spread_like_sqrt_d_k(d_k):
    products = random_dot_products(d_k, num_pairs=20000, generator=torch.Generator().manual_seed(0))
    assert products.shape == (20000,)
    # variance of a sum of d_k independent products of two standard normals is d_k
    assert abs(products.std().item() / d_k**0.5 - 1) < 0.05
    assert abs(products.mean().item()) < 0.05 * d_k**0.5
