import pytest
import torch
import torch.nn.functional as F
from conftest import perturb_
from torch import nn

from attention_helpers import (
    CausalAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttentionV1,
    SelfAttentionV2,
    causal_mask,
    to_torch,
    toy_embeddings,
)

ATOL = 1e-5


def close(actual, expected, atol=ATOL):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-4)


# --- single head ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("d_in", "d_out"), [(3, 2), (5, 7)])
def test_v2_weights_moved_into_v1_give_identical_outputs(d_in, d_out):
    v2 = SelfAttentionV2(d_in, d_out)
    v1 = SelfAttentionV1(d_in, d_out)
    with torch.no_grad():  # nn.Linear stores (d_out, d_in); V1 multiplies by (d_in, d_out)
        v1.W_query.copy_(v2.W_query.weight.T)
        v1.W_key.copy_(v2.W_key.weight.T)
        v1.W_value.copy_(v2.W_value.weight.T)
    x = torch.randn(6, d_in)
    close(v1(x), v2(x))
    batch = torch.stack([x, x.flip(0)])
    close(v1(batch)[0], v1(x))
    close(v2(batch)[1], v2(x.flip(0)))


def test_v2_matches_pytorch_sdpa():
    sa = perturb_(SelfAttentionV2(5, 7, qkv_bias=True))
    x = torch.randn(3, 6, 5)
    expected = F.scaled_dot_product_attention(sa.W_query(x), sa.W_key(x), sa.W_value(x))
    context_vec, weights = sa(x, return_weights=True)
    close(context_vec, expected)
    close(weights.sum(-1), torch.ones(3, 6))


def test_causal_attention_matches_pytorch_sdpa_forward_and_backward():
    ca = perturb_(CausalAttention(5, 7, context_length=10, dropout=0.0, qkv_bias=True))
    x = torch.randn(3, 8, 5, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    ours = ca(x)
    ref = F.scaled_dot_product_attention(ca.W_query(x_ref), ca.W_key(x_ref), ca.W_value(x_ref), is_causal=True)
    close(ours, ref)
    grads = torch.autograd.grad(ours.square().sum(), [x, *ca.parameters()])
    ref_grads = torch.autograd.grad(ref.square().sum(), [x_ref, *ca.parameters()])
    for g, r in zip(grads, ref_grads, strict=True):
        close(g, r)


def test_causal_attention_weights_are_lower_triangular_rows_summing_to_one():
    ca = CausalAttention(3, 2, context_length=6, dropout=0.0)
    _, weights = ca(torch.stack([toy_embeddings()] * 2), return_weights=True)
    assert (weights.triu(1) == 0).all()
    close(weights.sum(-1), torch.ones(2, 6))


@pytest.mark.parametrize(
    "make",
    [
        lambda: CausalAttention(5, 7, 9, 0.0),
        lambda: MultiHeadAttentionWrapper(5, 3, 9, 0.0, num_heads=2),
        lambda: MultiHeadAttention(5, 8, 9, 0.0, num_heads=4),
    ],
    ids=["CausalAttention", "Wrapper", "MultiHeadAttention"],
)
def test_changing_a_token_changes_no_earlier_output(make):
    module = perturb_(make()).eval()
    x = torch.randn(2, 9, 5)
    with torch.no_grad():
        base = module(x)
        for j in range(9):
            changed = x.clone()
            changed[:, j] += torch.randn(2, 5) * 10
            out = module(changed)
            assert torch.equal(out[:, :j], base[:, :j]), f"token {j} leaked into earlier outputs"
            assert not torch.allclose(out[:, j], base[:, j]), f"token {j} did not affect its own output"


def test_register_buffer_mask_follows_the_module():
    ca = CausalAttention(3, 2, 6, 0.0)
    assert "mask" in dict(ca.named_buffers()) and "mask" not in dict(ca.named_parameters())
    assert ca.to(torch.float64).mask.dtype == torch.bool  # .to(dtype) leaves a boolean mask alone
    assert ca.to("meta").mask.device.type == "meta"  # .to(device) moves it with the weights


# --- the wrapper ---------------------------------------------------------------------------------------


def test_wrapper_with_one_head_equals_causal_attention():
    torch.manual_seed(123)
    single = CausalAttention(5, 7, 8, 0.0)
    torch.manual_seed(123)
    wrapper = MultiHeadAttentionWrapper(5, 7, 8, 0.0, num_heads=1)
    x = torch.randn(3, 8, 5)
    close(wrapper(x), single(x))


def test_wrapper_concatenates_its_heads_in_order():
    """Each slice of the output is one head's attention, computed here by F.scaled_dot_product_attention from
    that head's own projections."""
    wrapper = perturb_(MultiHeadAttentionWrapper(5, 3, 8, 0.0, num_heads=4))
    x = torch.randn(2, 8, 5)
    out, weights = wrapper(x, return_weights=True)
    assert out.shape == (2, 8, 4 * 3) and weights.shape == (2, 4, 8, 8)
    for h, head in enumerate(wrapper.heads):
        expected = F.scaled_dot_product_attention(head.W_query(x), head.W_key(x), head.W_value(x), is_causal=True)
        close(out[..., 3 * h : 3 * (h + 1)], expected)


# --- multi-head attention: its two paths -----------------------------------------------------------------


def _padding(batch, num_tokens, pad_counts):
    mask = torch.zeros(batch, num_tokens, dtype=torch.bool)
    for b, count in enumerate(pad_counts):
        if count:
            mask[b, -count:] = True
    return mask


@pytest.mark.parametrize("num_heads", [1, 2, 4])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_fast_and_explicit_paths_agree_forward_and_backward(num_heads, causal, padded):
    mha = perturb_(MultiHeadAttention(6, 12, 10, 0.0, num_heads, qkv_bias=True, causal=causal))
    x = torch.randn(3, 9, 6, requires_grad=True)
    padding = _padding(3, 9, [0, 3, 8]) if padded else None
    fast = mha(x, padding)
    explicit, weights = mha(x, padding, return_weights=True)
    close(fast, explicit)
    assert weights.shape == (3, num_heads, 9, 9)
    g_fast = torch.autograd.grad(fast.square().sum(), [x, *mha.parameters()])
    g_explicit = torch.autograd.grad(explicit.square().sum(), [x, *mha.parameters()])
    for a, b in zip(g_fast, g_explicit, strict=True):
        close(a, b)


def test_weights_respect_causality_and_padding():
    mha = MultiHeadAttention(6, 12, 10, 0.0, 3)
    padding = _padding(2, 7, [0, 2])
    _, weights = mha(torch.randn(2, 7, 6), padding, return_weights=True)
    close(weights.sum(-1), torch.ones(2, 3, 7))
    assert (weights.triu(1) == 0).all()
    assert (weights[1, :, :, -2:] == 0).all()


# --- multi-head attention against PyTorch ------------------------------------------------------------------


def _torch_forward(torch_mha, x, causal, padding):
    attn_mask = causal_mask(x.shape[1]) if causal else None
    out, _ = torch_mha(x, x, x, attn_mask=attn_mask, key_padding_mask=padding, need_weights=False)
    return out


@pytest.mark.parametrize("num_heads", [1, 3, 4])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("explicit", [False, True], ids=["fast", "explicit"])
def test_equals_torch_multihead_attention_forward_and_backward(num_heads, causal, padded, explicit):
    torch_mha = perturb_(nn.MultiheadAttention(12, num_heads, batch_first=True))
    ours = MultiHeadAttention.from_torch(torch_mha, causal=causal, context_length=16)
    x = torch.randn(3, 9, 12, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    padding = _padding(3, 9, [0, 4, 1]) if padded else None
    out = ours(x, padding, return_weights=True)[0] if explicit else ours(x, padding)
    ref = _torch_forward(torch_mha, x_ref, causal, padding)
    close(out, ref)
    g_ours = torch.autograd.grad(out.square().sum(), [x, *ours.parameters()])
    g_torch = torch.autograd.grad(ref.square().sum(), [x_ref, *torch_mha.parameters()])
    # torch keeps q, k, v in one in_proj_weight (and in_proj_bias); ours are three Linear layers.
    named = dict(zip([n for n, _ in ours.named_parameters()], g_ours[1:], strict=True))
    torch_named = dict(zip([n for n, _ in torch_mha.named_parameters()], g_torch[1:], strict=True))
    close(g_ours[0], g_torch[0])
    close(
        torch.cat([named["W_query.weight"], named["W_key.weight"], named["W_value.weight"]]),
        torch_named["in_proj_weight"],
    )
    close(torch.cat([named["W_query.bias"], named["W_key.bias"], named["W_value.bias"]]), torch_named["in_proj_bias"])
    close(named["out_proj.weight"], torch_named["out_proj.weight"])
    close(named["out_proj.bias"], torch_named["out_proj.bias"])


def test_per_head_weights_equal_torchs_unaveraged_weights():
    torch_mha = perturb_(nn.MultiheadAttention(8, 2, batch_first=True)).eval()
    ours = MultiHeadAttention.from_torch(torch_mha).eval()
    x = torch.randn(2, 5, 8)
    _, per_head = torch_mha(x, x, x, need_weights=True, average_attn_weights=False)
    _, weights = ours(x, return_weights=True)
    close(weights, per_head)


@pytest.mark.parametrize("causal", [True, False])
def test_to_torch_round_trip(causal):
    ours = perturb_(MultiHeadAttention(8, 8, 12, 0.0, 4, qkv_bias=True, causal=causal))
    x = torch.randn(2, 6, 8)
    close(ours(x), _torch_forward(to_torch(ours), x, causal, None))


@pytest.mark.parametrize(("d_in", "d_out", "num_heads"), [(5, 12, 3), (3, 8, 2)])
def test_d_in_smaller_than_d_out_equals_torch_on_zero_padded_input(d_in, d_out, num_heads):
    """nn.MultiheadAttention's query projection is square, so it cannot take d_in != d_out directly.
    Padding x with zeros up to d_out features, and putting our (d_out, d_in) projection weights in the
    first d_in columns of torch's, gives exactly our maths in torch's module."""
    ours = perturb_(MultiHeadAttention(d_in, d_out, 10, 0.0, num_heads, qkv_bias=True))
    torch_mha = nn.MultiheadAttention(d_out, num_heads, batch_first=True)
    with torch.no_grad():
        torch_mha.in_proj_weight.zero_()
        for i, linear in enumerate((ours.W_query, ours.W_key, ours.W_value)):
            torch_mha.in_proj_weight[i * d_out : (i + 1) * d_out, :d_in] = linear.weight
        torch_mha.in_proj_bias.copy_(torch.cat([ours.W_query.bias, ours.W_key.bias, ours.W_value.bias]))
        torch_mha.out_proj.load_state_dict(ours.out_proj.state_dict())
    x = torch.randn(4, 7, d_in)
    padded_x = F.pad(x, (0, d_out - d_in))
    close(ours(x), _torch_forward(torch_mha, padded_x, True, None))
    close(ours(x, return_weights=True)[0], _torch_forward(torch_mha, padded_x, True, None))


def test_equals_functional_sdpa_with_d_in_not_d_out():
    mha = perturb_(MultiHeadAttention(5, 12, 10, 0.0, 3, qkv_bias=True))
    x = torch.randn(2, 8, 5)

    def heads(t):  # (2, 8, 12) -> (2, 3, 8, 4)
        return t.unflatten(-1, (3, 4)).transpose(1, 2)

    ref = F.scaled_dot_product_attention(
        heads(mha.W_query(x)), heads(mha.W_key(x)), heads(mha.W_value(x)), is_causal=True
    )
    ref = mha.out_proj(ref.transpose(1, 2).flatten(2))
    close(mha(x, return_weights=True)[0], ref)


# --- properties -----------------------------------------------------------------------------------------


def test_non_causal_attention_is_permutation_equivariant():
    mha = perturb_(MultiHeadAttention(6, 12, None, 0.0, 4, causal=False)).eval()
    x = torch.randn(2, 9, 6)
    perm = torch.randperm(9)
    with torch.no_grad():
        close(mha(x[:, perm]), mha(x)[:, perm])
        close(mha(x[:, perm], return_weights=True)[0], mha(x)[:, perm])


def test_permutation_check_catches_merging_heads_without_moving_the_head_axis_back():
    """Seed 004 reshapes (batch, heads, tokens, head_dim) straight to (batch, tokens, d_out): that
    mixes tokens and heads. The equivariance property above fails for such a module."""
    mha = perturb_(MultiHeadAttention(6, 12, None, 0.0, 4, causal=False)).eval()

    def buggy(x):
        b, n, _ = x.shape
        q, k, v = (lin(x).view(b, n, 4, 3).transpose(1, 2) for lin in (mha.W_query, mha.W_key, mha.W_value))
        context = F.scaled_dot_product_attention(q, k, v)  # (b, heads, n, head_dim)
        return mha.out_proj(context.reshape(b, n, 12))  # the bug: no transpose(1, 2) first

    x = torch.randn(2, 9, 6)
    perm = torch.randperm(9)
    with torch.no_grad():
        assert not torch.allclose(buggy(x[:, perm]), buggy(x)[:, perm], atol=1e-3)


def test_fully_masked_query_gives_a_finite_defined_output():
    """Causal attention where token 0 is padding: query 0 can see no key at all. Its attention weights
    are all zero, so its output is out_proj's bias alone; no nan, in either path or in the gradients."""
    mha = perturb_(MultiHeadAttention(6, 12, 10, 0.0, 3))
    x = torch.randn(2, 5, 6, requires_grad=True)
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[0, 0] = True
    fast = mha(x, padding)
    explicit, weights = mha(x, padding, return_weights=True)
    assert (weights[0, :, 0] == 0).all()
    close(fast[0, 0], mha.out_proj.bias)
    close(fast, explicit)
    fast.sum().backward()
    assert torch.isfinite(x.grad).all() and all(torch.isfinite(p.grad).all() for p in mha.parameters())


@pytest.mark.parametrize(("dtype", "rel_tol"), [(torch.float16, 0.01), (torch.bfloat16, 0.08)])
def test_low_precision_multihead_attention_is_finite(dtype, rel_tol):
    mha = perturb_(MultiHeadAttention(6, 12, 10, 0.0, 3), std=0.5).eval()
    x = torch.randn(2, 10, 6) * 4
    with torch.no_grad():
        reference = mha(x)
        low = mha.to(dtype)
        fast = low(x.to(dtype))
        explicit, weights = low(x.to(dtype), return_weights=True)
    for t in (fast, explicit, weights):
        assert t.dtype == dtype and torch.isfinite(t).all()
    # Large inputs (|scores| in the tens) on purpose; bfloat16 keeps only 8 bits of mantissa.
    scale = reference.abs().max()
    assert (fast.float() - reference).abs().max() < rel_tol * scale
    assert (explicit.float() - reference).abs().max() < rel_tol * scale


# --- dropout ----------------------------------------------------------------------------------------------


def test_dropout_keeps_the_expected_attention_weights_and_is_off_in_eval():
    torch.manual_seed(5)
    mha = MultiHeadAttention(6, 12, 10, 0.3, 3)
    torch.manual_seed(5)
    no_dropout = MultiHeadAttention(6, 12, 10, 0.0, 3)  # same weights, since dropout creates no parameters
    x = torch.randn(1, 6, 6)
    with torch.no_grad():
        _, expected = no_dropout(x, return_weights=True)
        mha.eval()
        close(mha(x), no_dropout(x))  # eval: dropout is off
        close(mha(x, return_weights=True)[1], expected)
        mha.train()
        samples = mha(x.expand(4000, 6, 6), return_weights=True)[1]  # one call: 4000 independent dropout masks
    dropped = samples == 0
    assert abs(dropped[:, expected[0] > 0].float().mean().item() - 0.3) < 0.01
    # The mean of many dropped-and-rescaled weights is the undropped weight (standard error ~0.2%).
    close(samples.mean(0, keepdim=True), expected, atol=0.02)


def test_training_with_dropout_is_random_and_eval_equals_no_dropout():
    torch.manual_seed(1)
    with_dropout = MultiHeadAttention(6, 12, 10, 0.5, 3)
    torch.manual_seed(1)
    without = MultiHeadAttention(6, 12, 10, 0.0, 3)
    x = torch.randn(2, 8, 6)
    assert not torch.allclose(with_dropout(x), with_dropout(x))
    close(with_dropout.eval()(x), without(x))


# --- the book's numbers ------------------------------------------------------------------------------------


BOOK_CASES = {
    # name: (seed, constructor arguments, input: "tokens" (6, 3) or "batch" (2, 6, 3), dropout in training mode)
    "SelfAttentionV1": (123, (3, 2), "tokens"),
    "SelfAttentionV2": (789, (3, 2), "tokens"),
    "CausalAttention": (123, (3, 2, 6, 0.0), "batch"),
    "CausalAttention with dropout": (123, (3, 2, 6, 0.5), "batch"),
    "MultiHeadAttentionWrapper": (123, (3, 2, 6, 0.0, 2), "batch"),
    "MultiHeadAttention": (123, (3, 2, 6, 0.0, 2), "batch"),
    "MultiHeadAttention with dropout": (123, (3, 4, 6, 0.5, 2), "batch"),
    "MultiHeadAttention d_in 5 -> d_out 12, qkv_bias": (7, (5, 12, 8, 0.0, 3, True), "wide"),
}


@pytest.mark.parametrize("case", BOOK_CASES)
def test_same_seed_gives_the_books_numbers(case):
    """Same seed, same arguments: our classes must create the book's parameters in the book's order and compute
    the book's outputs, dropout masks included (the tests seed the generator before each forward pass)."""
    import book_reference

    seed, args, kind = BOOK_CASES[case]
    class_name = case.split(" ")[0]
    ours_cls, book_cls = globals()[class_name], getattr(book_reference, class_name)
    inputs = {"tokens": toy_embeddings(), "batch": torch.stack([toy_embeddings(), toy_embeddings()])}
    inputs["wide"] = torch.randn(2, 8, 5, generator=torch.Generator().manual_seed(0))
    x = inputs[kind]
    torch.manual_seed(seed)
    ours = ours_cls(*args)
    torch.manual_seed(seed)
    book = book_cls(*args)
    torch.manual_seed(seed + 1)
    ours_out = ours(x)
    torch.manual_seed(seed + 1)
    book_out = book(x)
    close(ours_out, book_out, atol=1e-6)
    assert [name for name, _ in ours.named_parameters()] == [name for name, _ in book.named_parameters()]


def test_one_padding_row_serves_the_whole_batch():
    mha = perturb_(MultiHeadAttention(6, 12, 10, 0.0, 3))
    x = torch.randn(3, 7, 6)
    padding = torch.tensor([False] * 5 + [True] * 2)  # (num_tokens,)
    close(mha(x, padding), mha(x, padding.expand(3, 7)))


def test_from_torch_documents_that_ours_is_batch_first():
    """A batch_first=False torch module reads (num_tokens, batch, d): fed our layout it attends over the batch.
    The from_torch docstrings say so, and transposing is the fix they give."""
    from attention_helpers import Encoder, EncoderLayer, interop

    torch_mha = perturb_(nn.MultiheadAttention(8, 2, batch_first=False)).eval()
    ours = MultiHeadAttention.from_torch(torch_mha).eval()
    x = torch.randn(3, 5, 8)  # (batch, num_tokens, d)
    with torch.no_grad():
        assert not torch.allclose(torch_mha(x, x, x)[0], ours(x), atol=1e-3)
        xt = x.transpose(0, 1)
        close(torch_mha(xt, xt, xt)[0].transpose(0, 1), ours(x))
    doc = " ".join(interop.from_torch.__doc__.split())
    assert "batch-first" in doc and "batch_first=False" in doc and "x.transpose(0, 1)" in doc
    for constructor in (MultiHeadAttention.from_torch, EncoderLayer.from_torch, Encoder.from_torch):
        assert "batch" in constructor.__doc__, constructor
