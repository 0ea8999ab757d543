"""Lesson 06's checks: nothing before an attempt, a named mistake for each plausible wrong answer, and the
right answers accepted."""

import pytest
import torch

import attention_helpers as ah
from attention_helpers.lessons import lesson06 as checks

RIGHT_SHAPES = (4, (2, 3, 5, 4), (2, 3, 5, 5), (2, 5, 12))


def split(t, num_heads):
    """(batch, num_tokens, d_out) -> (batch, num_heads, num_tokens, head_dim)"""
    batch, num_tokens, d_out = t.shape
    return t.view(batch, num_tokens, num_heads, d_out // num_heads).transpose(1, 2)


def fused(x, W_qkv, W_out, num_heads, causal, *, merge_transposed=True, scaled=True):
    """Written here independently of the check's own variants, from the lesson's recipe."""
    batch, num_tokens, _ = x.shape
    queries, keys, values = (split(t, num_heads) for t in (x @ W_qkv.T).chunk(3, dim=-1))
    attn_scores = queries @ keys.transpose(-2, -1)
    if scaled:
        attn_scores = attn_scores / queries.shape[-1] ** 0.5
    if causal:
        future = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
        attn_scores = attn_scores.masked_fill(future, -torch.inf)
    context_vec = torch.softmax(attn_scores, dim=-1) @ values  # (batch, num_heads, num_tokens, head_dim)
    if merge_transposed:
        context_vec = context_vec.transpose(1, 2)
    return context_vec.reshape(batch, num_tokens, -1) @ W_out.T


def test_unanswered(capsys):
    assert checks.exercise_1(None) is False
    assert checks.exercise_2(None) is False
    assert capsys.readouterr().out == (
        "Exercise 1: Not answered yet (the answer is still None).\n"
        "Exercise 2: Not answered yet (the answer is still None).\n"
    )


def test_exercise_1_right_shapes(capsys):
    assert checks.exercise_1(RIGHT_SHAPES) is True
    assert checks.exercise_1([4, [2, 3, 5, 4], torch.Size([2, 3, 5, 5]), (2, 5, 12)]) is True  # lists and Size too
    assert capsys.readouterr().out == "Exercise 1: correct.\n" * 2


@pytest.mark.parametrize(
    ("index", "wrong", "hint"),
    [
        (0, 12, "the heads share d_out between them"),
        (1, (2, 5, 3, 4), "the heads are moved in front of the tokens"),
        (2, (2, 3, 5, 4), "one weight per (query, key) pair"),
        (2, (2, 5, 5), "every head computes its own weights"),
        (3, (2, 5, 4), "the heads are merged back side by side"),
        (3, (2, 5, 7), "the output is d_out wide"),  # no specific slip: the general hint
    ],
)
def test_exercise_1_names_the_slip(capsys, index, wrong, hint):
    answer = list(RIGHT_SHAPES)
    answer[index] = wrong
    assert checks.exercise_1(tuple(answer)) is False
    out = capsys.readouterr().out
    assert out.startswith("Exercise 1: not yet, ") and hint in out.split(" Hint: ")[1]


def test_exercise_2_accepts_view_transpose_and_einsum(capsys):
    def with_einsum(x, W_qkv, W_out, num_heads, causal):
        batch, num_tokens, _ = x.shape
        d_out = W_out.shape[0]
        qkv = (x @ W_qkv.T).view(batch, num_tokens, 3, num_heads, d_out // num_heads)
        queries, keys, values = qkv.unbind(dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", queries, keys) / queries.shape[-1] ** 0.5
        if causal:
            scores = scores.masked_fill(torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1), -torch.inf)
        context_vec = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(dim=-1), values)
        return context_vec.reshape(batch, num_tokens, d_out) @ W_out.T

    assert checks.exercise_2(fused) is True
    assert checks.exercise_2(with_einsum) is True
    assert capsys.readouterr().out == "Exercise 2: correct on all 5 hidden cases.\n" * 2


@pytest.mark.parametrize(
    ("answer", "problem", "hint"),
    [
        (
            lambda *args: fused(*args, merge_transposed=False),
            "reshaping (batch, num_heads, num_tokens, head_dim) straight to (batch, num_tokens, d_out)",
            "move the head axis back next to head_dim before merging",
        ),
        (
            lambda *args: fused(*args, scaled=False),
            "the 1 / sqrt(head_dim) is missing",
            "divide each head's scores by sqrt(head_dim)",
        ),
        (
            # both at once: no single variant matches, the permutation test names the mixing
            lambda *args: fused(*args, merge_transposed=False, scaled=False),
            "shuffling the input tokens does not shuffle your output rows the same way",
            "heads and positions got mixed in a reshape",
        ),
        (
            lambda x, W_qkv, W_out, num_heads, causal: fused(x, W_qkv, W_out, num_heads, False),
            "no causal mask with causal=True",
            "hide the scores above the diagonal",
        ),
        (
            lambda x, W_qkv, W_out, num_heads, causal: fused(x, W_qkv, W_out, num_heads, True),
            "the causal mask is applied with causal=False",
            "apply the mask only when causal is True",
        ),
        (
            lambda x, W_qkv, W_out, num_heads, causal: fused(x, W_qkv, W_out.T, num_heads, causal),
            "x @ W_out instead of x @ W_out.T",
            "it needs transposing",
        ),
        (lambda x, W_qkv, W_out, num_heads, causal: x, "expected shape (2, 7, 12), got (2, 7, 5)", "One projection"),
        (lambda x, W_qkv, W_out, num_heads: x, "raised TypeError", "One projection"),
    ],
)
def test_exercise_2_names_the_mistake(capsys, answer, problem, hint):
    assert checks.exercise_2(answer) is False
    out = capsys.readouterr().out
    assert out.startswith("Exercise 2: not yet, ") and out.count("\n") == 1
    before, after = out.split(" Hint: ")
    assert problem in before and hint in after


def test_exercise_2_reference_is_the_package_layer_not_the_checks_own_variant():
    """The mistakes are named with the check's own variants; the right answer must come from MultiHeadAttention."""
    generator = torch.Generator().manual_seed(0)
    x, W_qkv, W_out = checks._fused_inputs(generator, 2, 7, 5, 12)
    for causal in (True, False):
        expected = checks._fused_reference(x, W_qkv, W_out, 3, causal)
        torch.testing.assert_close(checks._multi_head(x, W_qkv, W_out, 3, causal), expected)
        torch.testing.assert_close(fused(x, W_qkv, W_out, 3, causal), expected)


def test_checks_never_raise_on_odd_answers(capsys):
    assert checks.exercise_1((torch.tensor(4), torch.ones(4), "shape", None)) is False
    assert checks.exercise_1("4, (2, 3, 5, 4)") is False
    assert checks.exercise_2(lambda *args: "not a tensor") is False
    assert checks.exercise_2(3) is False
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and all(" not yet, " in line and " Hint: " in line for line in out)


def _weights_into_mha(x, W_qkv, W_out, num_heads, causal):
    d_out, d_in = W_out.shape[0], x.shape[-1]
    mha = ah.MultiHeadAttention(d_in, d_out, x.shape[1], 0.0, num_heads, causal=causal, proj_bias=False)
    with torch.no_grad():
        for layer, weight in zip((mha.W_query, mha.W_key, mha.W_value), W_qkv.chunk(3), strict=True):
            layer.weight.copy_(weight)
        mha.out_proj.weight.copy_(W_out)
    return mha(x)


def _with_torch_kernel(x, W_qkv, W_out, num_heads, causal):
    batch, num_tokens, _ = x.shape
    queries, keys, values = (split(t, num_heads) for t in (x @ W_qkv.T).chunk(3, dim=-1))
    context_vec = torch.nn.functional.scaled_dot_product_attention(queries, keys, values, is_causal=causal)
    return context_vec.transpose(1, 2).reshape(batch, num_tokens, -1) @ W_out.T


def _with_package_function(x, W_qkv, W_out, num_heads, causal):
    batch, num_tokens, _ = x.shape
    queries, keys, values = (split(t, num_heads) for t in (x @ W_qkv.T).chunk(3, dim=-1))
    mask = ah.causal_mask(num_tokens) if causal else None
    context_vec, _ = ah.attention_with_weights(queries, keys, values, mask=mask)
    return context_vec.transpose(1, 2).reshape(batch, num_tokens, -1) @ W_out.T


def _with_math_kernel(x, W_qkv, W_out, num_heads, causal):
    batch, num_tokens, _ = x.shape
    queries, keys, values = (split(t, num_heads) for t in (x @ W_qkv.T).chunk(3, dim=-1))
    context_vec = torch._scaled_dot_product_attention_math(queries, keys, values, is_causal=causal)[0]
    return context_vec.transpose(1, 2).reshape(batch, num_tokens, -1) @ W_out.T


def _with_native_multi_head_attention(x, W_qkv, W_out, num_heads, causal):
    mask = ah.causal_mask(x.shape[1]) if causal else None
    d_out = W_out.shape[0]  # the fused kernel wants d_in == d_out: it fails on most cases, after it ran
    return torch._native_multi_head_attention(
        x, x, x, d_out, num_heads, W_qkv, torch.zeros(3 * d_out), W_out, torch.zeros(d_out), mask, need_weights=False
    )[0]


def _with_torch_module(x, W_qkv, W_out, num_heads, causal):
    d_out = W_out.shape[0]
    mha = torch.nn.MultiheadAttention(
        d_out, num_heads, bias=False, batch_first=True, kdim=x.shape[-1], vdim=x.shape[-1]
    )
    return mha(x, x, x, need_weights=False)[0]


def _with_attend_heads(x, W_qkv, W_out, num_heads, causal):
    mha = ah.MultiHeadAttention(x.shape[-1], W_out.shape[0], x.shape[1], 0.0, num_heads, causal=causal)
    queries, keys, values = (split(t, num_heads) for t in (x @ W_qkv.T).chunk(3, dim=-1))
    return mha.out_proj(mha.merge_heads(mha.attend_heads(queries, keys, values, causal=causal)))


@pytest.mark.parametrize(
    ("library_attention", "named"),
    [
        (_weights_into_mha, "the package's MultiHeadAttention.__init__"),
        (_with_torch_kernel, "PyTorch's scaled_dot_product_attention kernel"),
        (_with_package_function, "the package's attention_with_weights"),
        (_with_math_kernel, "PyTorch's _scaled_dot_product_attention_math kernel"),
        (_with_native_multi_head_attention, "PyTorch's _native_multi_head_attention kernel"),
        (_with_torch_module, "PyTorch's multi_head_attention_forward kernel"),
        (_with_attend_heads, "the package's MultiHeadAttention.__init__"),
    ],
)
def test_exercise_2_rejects_the_library_attention_it_asks_for(library_attention, named, capsys):
    assert checks.exercise_2(library_attention) is False
    out = capsys.readouterr().out
    assert f"your code runs {named}" in out and "not a ready-made attention" in out


def _diagonal_masked(x, W_qkv, W_out, num_heads, causal):
    batch, num_tokens, _ = x.shape
    queries, keys, values = (split(t, num_heads) for t in (x @ W_qkv.T).chunk(3, dim=-1))
    scores = queries @ keys.transpose(-2, -1) / queries.shape[-1] ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(), -1e9)
    context_vec = torch.softmax(scores, dim=-1) @ values
    return context_vec.transpose(1, 2).reshape(batch, num_tokens, -1) @ W_out.T


def _no_output_projection(x, W_qkv, W_out, num_heads, causal):
    return fused(x, W_qkv, torch.eye(W_out.shape[0]), num_heads, causal)


@pytest.mark.parametrize(
    ("answer", "named"),
    [(_diagonal_masked, "hides each token's own key too"), (_no_output_projection, "not projected by W_out")],
)
def test_exercise_2_names_a_masked_diagonal_and_a_missing_projection(answer, named, capsys):
    assert checks.exercise_2(answer) is False
    assert named in capsys.readouterr().out


def test_exercise_1_names_a_wrong_item_by_what_it_is(capsys):
    """A wrong shape that matches no named mistake is named by what it is, not by its place in nested tuples."""
    assert checks.exercise_1((4, (2, 3, 5, 4), (2, 3, 5, 5), (2, 5, 3))) is False
    out = capsys.readouterr().out
    assert "the output's shape (2, 5, 3) is not right" in out and "item" not in out
