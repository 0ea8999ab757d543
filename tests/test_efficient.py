"""online_softmax and tiled_attention against torch.softmax and F.scaled_dot_product_attention."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from attention_helpers import (
    attention_with_weights,
    merge_partial_attention,
    online_softmax,
    partial_attention,
    tiled_attention,
    tiled_attention_blocks,
)

# --- online softmax ---------------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 3, 7, 128])
@pytest.mark.parametrize(("shape", "dim"), [((10,), 0), ((4, 23), -1), ((3, 11, 5), 1), ((2, 3, 17), 0)])
def test_online_softmax_equals_torch_softmax(shape, dim, block_size):
    x = 3 * torch.randn(shape)
    result = online_softmax(x, dim=dim, block_size=block_size)
    torch.testing.assert_close(result, torch.softmax(x, dim=dim), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(result.sum(dim=dim), torch.ones(()).expand(result.sum(dim=dim).shape))


def test_online_softmax_rescales_when_a_later_block_holds_the_maximum():
    # increasing scores: every block raises the maximum, so every old sum must be rescaled
    x = torch.linspace(-50.0, 5000.0, 40)
    torch.testing.assert_close(online_softmax(x, block_size=4), torch.softmax(x, dim=-1))


def test_online_softmax_handles_minus_inf_like_torch_softmax():
    x = torch.randn(4, 12)
    x[0, :8] = float("-inf")  # the first two blocks see only -inf, the third finds the maximum
    x[1, 5] = float("-inf")
    x[2, :] = float("-inf")  # nothing to attend to: nan, as torch.softmax
    result = online_softmax(x, block_size=4)
    expected = torch.softmax(x, dim=-1)
    torch.testing.assert_close(result, expected, equal_nan=True)
    assert result[2].isnan().all() and not result[:2].isnan().any() and not result[3].isnan().any()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_online_softmax_in_half_precision_is_no_worse_than_torch(dtype):
    x = 4 * torch.randn(8, 300, dtype=torch.float64)
    exact = torch.softmax(x, dim=-1)
    ours = online_softmax(x.to(dtype), block_size=32)
    assert ours.dtype == dtype
    ours_error = (ours.double() - exact).abs().max()
    torch_error = (torch.softmax(x.to(dtype), dim=-1).double() - exact).abs().max()
    assert ours_error <= torch_error


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"block_size": 0}, ValueError, "block_size must be at least 1"),
        ({"block_size": 2.0}, TypeError, "block_size must be an int"),
        ({"block_size": True}, TypeError, "block_size must be an int"),
        ({"dim": 2}, ValueError, "dim=2 is out of range for a tensor with 2 dimensions (shape (3, 4))"),
    ],
)
def test_online_softmax_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        online_softmax(torch.randn(3, 4), **kwargs)


def test_online_softmax_rejects_integer_scores():
    with pytest.raises(TypeError, match="floating-point dtype, got torch.int64"):
        online_softmax(torch.arange(5))


# --- tiled attention --------------------------------------------------------------------------------

SIZES = [(1, 1), (5, 5), (64, 64), (100, 100), (130, 70), (70, 130), (257, 257)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("num_queries", "num_keys"), SIZES)
def test_tiled_attention_equals_torch_fused_kernel(num_queries, num_keys, causal):
    """Any number of tokens (not only multiples of the block), d_v != d_k, batch and head dimensions;
    with causal=True and num_queries != num_keys, F.sdpa's top-left aligned mask."""
    queries = torch.randn(2, 3, num_queries, 16)
    keys = torch.randn(2, 3, num_keys, 16)
    values = torch.randn(2, 3, num_keys, 24)
    expected = F.scaled_dot_product_attention(queries, keys, values, is_causal=causal)
    result = tiled_attention(queries, keys, values, causal=causal, block_size=32)
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_attention_backpropagates_the_same_gradients_as_torch(causal):
    """Plain PyTorch operations, so autograd differentiates the loop (storing every block: no memory saving)."""
    inputs = [torch.randn(2, 3, 70, 8, requires_grad=True) for _ in range(3)]
    ours = torch.autograd.grad(tiled_attention(*inputs, causal=causal, block_size=16).square().sum(), inputs)
    torch_grads = torch.autograd.grad(F.scaled_dot_product_attention(*inputs, is_causal=causal).square().sum(), inputs)
    for a, b in zip(ours, torch_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_size", [1, 7, 128, 1000])
def test_tiled_attention_equals_explicit_attention_for_every_block_size(block_size):
    queries, keys, values = torch.randn(50, 8), torch.randn(50, 8), torch.randn(50, 5)  # no leading dimensions
    mask = torch.triu(torch.ones(50, 50, dtype=torch.bool), diagonal=1)
    expected, _ = attention_with_weights(queries, keys, values, mask)
    torch.testing.assert_close(tiled_attention(queries, keys, values, True, block_size), expected)


def test_tiled_attention_broadcasts_leading_dimensions_like_torch():
    queries = torch.randn(2, 4, 40, 8)  # (batch, heads, num_queries, d_k)
    keys, values = torch.randn(1, 4, 33, 8), torch.randn(2, 1, 33, 8)
    expected = F.scaled_dot_product_attention(queries, keys.expand(2, 4, 33, 8), values.expand(2, 4, 33, 8))
    torch.testing.assert_close(tiled_attention(queries, keys, values, block_size=16), expected)


def test_tiled_attention_with_no_queries_returns_an_empty_result():
    result = tiled_attention(torch.randn(2, 0, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 3))
    assert result.shape == (2, 0, 3)


def test_tiled_attention_is_causal_changing_a_future_token_changes_no_earlier_output():
    queries, keys, values = torch.randn(3, 90, 8), torch.randn(3, 90, 8), torch.randn(3, 90, 8)
    before = tiled_attention(queries, keys, values, causal=True, block_size=16)
    keys[:, 60], values[:, 60] = 10.0, -10.0
    after = tiled_attention(queries, keys, values, causal=True, block_size=16)
    torch.testing.assert_close(after[:, :60], before[:, :60], atol=0, rtol=0)
    assert not torch.allclose(after[:, 60:], before[:, 60:])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tiled_attention_in_half_precision_is_no_worse_than_torch(dtype):
    generator = torch.Generator().manual_seed(1)
    queries, keys, values = (3 * torch.randn(2, 200, 64, generator=generator, dtype=torch.float64) for _ in range(3))
    exact = F.scaled_dot_product_attention(queries, keys, values, is_causal=True)
    half = [t.to(dtype) for t in (queries, keys, values)]
    ours = tiled_attention(*half, causal=True, block_size=64)
    assert ours.dtype == dtype
    ours_error = (ours.double() - exact).abs().max()
    torch_error = (F.scaled_dot_product_attention(*half, is_causal=True).double() - exact).abs().max()
    assert ours_error <= torch_error


def full_causal_blocks(num_queries, num_keys, block_size):
    """Blocks that hold at least one visible (query, key) pair, read off the full top-left causal mask."""
    visible = torch.ones(num_queries, num_keys, dtype=torch.bool).tril()
    padded = F.pad(visible, (0, -num_keys % block_size, 0, -num_queries % block_size))
    blocks = padded.unflatten(0, (-1, block_size)).unflatten(2, (-1, block_size))  # (qb, bq, kb, bk)
    return blocks.any(dim=3).any(dim=1)


@pytest.mark.parametrize(("num_queries", "num_keys", "block_size"), [(256, 256, 64), (100, 37, 16), (37, 100, 16)])
def test_causal_blocks_skip_exactly_the_blocks_entirely_in_the_future(num_queries, num_keys, block_size):
    blocks = tiled_attention_blocks(num_queries, num_keys, block_size, causal=True)
    assert torch.equal(blocks, full_causal_blocks(num_queries, num_keys, block_size))
    assert tiled_attention_blocks(num_queries, num_keys, block_size).all()


def test_square_causal_attention_computes_a_triangle_of_blocks():
    num_blocks = 4096 // 128
    computed = tiled_attention_blocks(4096, 4096, 128, causal=True).sum().item()
    assert computed == num_blocks * (num_blocks + 1) // 2  # 528 of 1024: about half is skipped


class OpRecorder(TorchDispatchMode):
    """Records every matrix product and the largest tensor any other operation creates."""

    def __init__(self):
        super().__init__()
        self.products, self.largest = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.bmm):
            self.products += 1
        outputs = result if isinstance(result, (tuple, list)) else [result]
        is_output = func.overloadpacket is torch.ops.aten.new_empty  # the result itself, (num_queries, d_v)
        for out in outputs:
            if isinstance(out, torch.Tensor) and not is_output:
                self.largest = max(self.largest, out.numel())
        return result


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_attention_runs_only_the_scheduled_blocks_and_never_holds_the_score_matrix(causal):
    num_tokens, block_size, d = 600, 64, 16
    queries, keys, values = torch.randn(num_tokens, d), torch.randn(num_tokens, d), torch.randn(num_tokens, d)
    with OpRecorder() as recorder:
        tiled_attention(queries, keys, values, causal=causal, block_size=block_size)
    # two products per computed block: scores = Q_i K_jᵀ, then weights @ V_j
    assert recorder.products == 2 * tiled_attention_blocks(num_tokens, num_tokens, block_size, causal).sum()
    assert recorder.largest == block_size * block_size  # one block of scores; the full matrix has 360,000
    assert recorder.largest < num_tokens * d  # smaller even than the inputs


@pytest.mark.parametrize(
    ("shapes", "error", "message"),
    [
        (((5, 8), (5, 7), (5, 8)), ValueError, "same last dimension d_k"),
        (((5, 8), (5, 8), (6, 8)), ValueError, "one row per key"),
        (((2, 5, 8), (5, 8), (5, 8)), ValueError, "same rank as queries"),
        (((8,), (8,), (8,)), ValueError, "at least 2 dimensions"),
        (((2, 5, 8), (3, 5, 8), (3, 5, 8)), ValueError, "do not broadcast together"),
        (((5, 8), (0, 8), (0, 8)), ValueError, "at least one key"),
    ],
)
def test_tiled_attention_rejects_bad_shapes(shapes, error, message):
    with pytest.raises(error, match=message):
        tiled_attention(*(torch.randn(s) for s in shapes))


def test_tiled_attention_rejects_bad_dtypes_and_block_sizes():
    q = torch.randn(5, 8)
    with pytest.raises(TypeError, match="values has dtype torch.float64 but queries has dtype torch.float32"):
        tiled_attention(q, q, q.double())
    with pytest.raises(TypeError, match="queries must have a floating-point dtype, got torch.int64"):
        tiled_attention(torch.ones(5, 8, dtype=torch.long), q, q)
    with pytest.raises(ValueError, match="block_size must be at least 1, got 0"):
        tiled_attention(q, q, q, block_size=0)
    with pytest.raises(TypeError, match="block_size must be an int"):
        tiled_attention(q, q, q, block_size=32.0)
    with pytest.raises(TypeError, match="queries must be a torch.Tensor"):
        tiled_attention(q.tolist(), q, q)
    with pytest.raises(ValueError, match="num_queries must be at least 1"):
        tiled_attention_blocks(0, 5)


# --- partial attention and its merge -----------------------------------------------------------------


def _split_points(num_keys, num_blocks, generator):
    """num_blocks - 1 distinct cut points in 1..num_keys-1, drawn at random: blocks of uneven sizes."""
    return sorted(torch.randperm(num_keys - 1, generator=generator)[: num_blocks - 1].add(1).tolist())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_blocks", [1, 2, 3, 5])
def test_merged_partial_attention_equals_sdpa_over_all_keys(num_blocks, causal):
    gen = torch.Generator().manual_seed(num_blocks)
    q, k = torch.randn(2, 3, 11, 8, generator=gen), torch.randn(2, 3, 11, 8, generator=gen)
    v = torch.randn(2, 3, 11, 5, generator=gen)  # d_v != d_k
    cuts = [0, *_split_points(11, num_blocks, gen), 11]
    outs, lses = [], []
    for start, end in zip(cuts[:-1], cuts[1:], strict=True):
        out, lse = partial_attention(q, k[..., start:end, :], v[..., start:end, :], causal=causal, key_offset=start)
        outs.append(out)
        lses.append(lse)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(merge_partial_attention(outs, lses), expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(
        merge_partial_attention(outs[::-1], lses[::-1]), expected, atol=1e-6, rtol=1e-5
    )  # any order


def test_partial_attention_of_a_middle_block_of_queries_is_masked_by_position():
    # queries 4..7 of a causal sequence of 10 against keys 6..9: query 6 sees key 6 only, query 4 none
    q, k, v = torch.randn(1, 10, 4), torch.randn(1, 10, 4), torch.randn(1, 10, 3)
    out, lse = partial_attention(q[:, 4:8], k[:, 6:], v[:, 6:], causal=True, query_offset=4, key_offset=6)
    assert torch.isneginf(lse[0, :2]).all() and (out[0, :2] == 0).all(), "queries before every key see nothing"
    torch.testing.assert_close(out[0, 2], v[0, 6])  # one visible key: its value, weight 1
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, 4:8]
    head, head_lse = partial_attention(q[:, 4:8], k[:, :6], v[:, :6], causal=True, query_offset=4, key_offset=0)
    torch.testing.assert_close(merge_partial_attention([head, out], [head_lse, lse]), full)


def test_merge_gives_zeros_to_a_query_no_block_can_see_like_sdpa():
    # Keys at positions 6..11 in two blocks, queries at 3..8 (causal): queries 3, 4, 5 see no key at all.
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 6, 8, generator=gen), torch.randn(2, 3, 6, 8, generator=gen)
    v = torch.randn(2, 3, 6, 5, generator=gen)  # d_v != d_k, several heads
    query_pos, key_pos = torch.arange(3, 9), torch.arange(6, 12)
    visible = key_pos[None, :] <= query_pos[:, None]  # (6, 6): True where a query may see a key
    # Written from the definition: softmax over the visible keys, and 0 where there are none.
    scores = (q @ k.transpose(-2, -1) / 8**0.5).masked_fill(~visible, float("-inf"))
    expected = torch.zeros(2, 3, 6, 5)
    rows = visible.any(dim=1)
    expected[..., rows, :] = torch.softmax(scores[..., rows, :], dim=-1) @ v
    parts = [
        partial_attention(q, k[..., s, :], v[..., s, :], causal=True, query_offset=3, key_offset=6 + s.start)
        for s in (slice(0, 2), slice(2, 6))
    ]
    merged = merge_partial_attention([o for o, _ in parts], [lse for _, lse in parts])
    assert not merged.isnan().any(), "a query that sees no key must not get nan"
    assert (merged[..., :3, :] == 0).all(), "a query that sees no key gets zeros"
    torch.testing.assert_close(merged, expected)
    # PyTorch's own kernel follows the same rule.
    torch.testing.assert_close(merged, F.scaled_dot_product_attention(q, k, v, attn_mask=visible))


def test_merge_of_blocks_none_of_which_a_query_sees_backpropagates_finite_gradients():
    q = torch.randn(4, 6, requires_grad=True)
    k, v = torch.randn(5, 6, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    parts = [
        partial_attention(q, k[s], v[s], causal=True, key_offset=2 + s.start) for s in (slice(0, 2), slice(2, 5))
    ]  # queries 0, 1 see no key
    merge_partial_attention([o for o, _ in parts], [lse for _, lse in parts]).sum().backward()
    assert all(t.grad.isfinite().all() for t in (q, k, v)), "no nan may flow back from a query that sees nothing"
    assert (q.grad[:2] == 0).all(), "a query that sees no key has no influence, so no gradient"


def test_partial_attention_lse_is_the_log_of_the_softmax_denominator():
    q, k, v = torch.randn(5, 6), torch.randn(9, 6), torch.randn(9, 2)
    _, lse = partial_attention(q, k, v)
    torch.testing.assert_close(lse, torch.logsumexp(q @ k.T / 6**0.5, dim=-1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_partial_attention_in_half_precision_is_no_worse_than_sdpa(dtype):
    q, k, v = (1000 * torch.rand(1, 2, 16, 8) for _ in range(3))  # entries up to 1e3
    reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    parts = [
        partial_attention(q.to(dtype), k[..., s, :].to(dtype), v[..., s, :].to(dtype))
        for s in (slice(0, 7), slice(7, 16))
    ]
    ours = merge_partial_attention([o for o, _ in parts], [lse for _, lse in parts]).to(dtype)
    torch_half = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype))
    assert torch.isfinite(ours).all()
    our_err = (ours.double() - reference).abs().max()
    torch_err = (torch_half.double() - reference).abs().max()
    assert our_err <= torch_err + 1e-3 * reference.abs().max(), (our_err, torch_err)


def test_merge_partial_attention_rejects_mismatched_blocks():
    out, lse = partial_attention(torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2))
    with pytest.raises(ValueError, match="one lse per output"):
        merge_partial_attention([out, out], [lse])
    with pytest.raises(ValueError, match="outs\\[1\\]"):
        merge_partial_attention([out, out[:2]], [lse, lse[:2]])
    with pytest.raises(TypeError, match="dtype"):
        merge_partial_attention([out, out.double()], [lse, lse.double()])
    with pytest.raises(ValueError, match="key_offset"):
        partial_attention(torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2), causal=True, key_offset=-1)
