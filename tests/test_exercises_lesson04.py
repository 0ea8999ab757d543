"""Lesson 04's checks: nothing before an attempt, a named mistake for each plausible wrong answer, and the right
answers accepted."""

import pytest
import torch

import attention_helpers as ah
from attention_helpers import CausalAttention, causal_mask
from attention_helpers.lessons import lesson04 as checks

NOT_ANSWERED = "Not answered yet (the answer is still None).\n"


def sliding_window_mask(num_tokens, window):
    ones = torch.ones(num_tokens, num_tokens, dtype=torch.bool)
    return torch.triu(ones, diagonal=1) | torch.tril(ones, diagonal=-window)


def windowed_attention(queries, keys, values, window, mask=sliding_window_mask, fill=float("-inf"), scale=True):
    scores = queries @ keys.transpose(-2, -1)
    scores = scores.masked_fill(mask(queries.shape[-2], window), fill)
    if scale:
        scores = scores / keys.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ values


def verdict(check, answer, capsys):
    result = check(answer)
    return result, capsys.readouterr().out


@pytest.mark.parametrize("number", [1, 2, 3])
def test_unanswered_says_only_not_answered(number, capsys):
    result, out = verdict(getattr(checks, f"exercise_{number}"), None, capsys)
    assert result is False and out == f"Exercise {number}: {NOT_ANSWERED}"


def test_the_loop_reference_is_causal_and_counts_window_keys():
    for n in (1, 5, 8):
        assert torch.equal(checks.window_mask_loops(n, n), causal_mask(n))
        assert torch.equal(checks.window_mask_loops(n, n + 4), causal_mask(n))
        assert torch.equal(checks.window_mask_loops(n, 1), ~torch.eye(n, dtype=torch.bool))
        for w in range(1, n + 2):
            visible = (~checks.window_mask_loops(n, w)).sum(dim=-1)
            assert visible.tolist() == [min(i + 1, w) for i in range(n)]


def test_the_hidden_cases_cover_window_one_long_windows_and_odd_lengths():
    cases = checks.exercise_1.__self__.cases()
    assert all(n % 2 == 1 for n, _ in cases)
    assert any(w == 1 for _, w in cases) and any(w == n for n, w in cases) and any(w > n for n, w in cases)


def test_exercise_1_accepts_a_right_answer(capsys):
    result, out = verdict(checks.exercise_1, sliding_window_mask, capsys)
    assert result is True and out.startswith("Exercise 1: correct")


@pytest.mark.parametrize(
    ("wrong", "named", "hint"),
    [
        (lambda n, w: ~sliding_window_mask(n, w), "True where a key may be seen", "True must mark the keys to hide"),
        (lambda n, w: sliding_window_mask(n, w + 1), "one token too wide", "window - 1 tokens before it"),
        (lambda n, w: sliding_window_mask(n, max(w - 1, 1)), "one token too narrow", "window - 1 tokens before it"),
        (lambda n, w: causal_mask(n), "hides only the future", "more than window - 1 positions back"),
        (
            lambda n, w: sliding_window_mask(n, w) & sliding_window_mask(n, w).T,
            "see later tokens",
            "the future must stay hidden",
        ),
        (lambda n, w: sliding_window_mask(n, w).T, "transposed", "in the query's future"),
        (
            lambda n, w: sliding_window_mask(n, w).int(),
            "the dtype is torch.int32, expected torch.bool (convert with .bool())",
            "one row per query",
        ),
        (lambda n, w: sliding_window_mask(n + 1, w), "shape", "one row per query"),
    ],
)
def test_exercise_1_names_the_mistake(wrong, named, hint, capsys):
    result, out = verdict(checks.exercise_1, wrong, capsys)
    assert result is False and out.startswith("Exercise 1: not yet, ")
    assert named in out and hint in out.split("Hint: ")[1]


def test_exercise_2_accepts_a_right_answer(capsys):
    result, out = verdict(checks.exercise_2, windowed_attention, capsys)
    assert result is True and out.startswith("Exercise 2: correct")


@pytest.mark.parametrize(
    ("wrong", "named", "hint"),
    [
        (
            lambda q, k, v, w: windowed_attention(q, k, v, w, mask=lambda n, w: ~sliding_window_mask(n, w)),
            "you hid the keys the window allows",
            "where the mask is True",
        ),
        (
            lambda q, k, v, w: windowed_attention(q, k, v, w, mask=lambda n, w: causal_mask(n)),
            "plain causal attention",
            "your sliding-window mask",
        ),
        (
            lambda q, k, v, w: windowed_attention(q, k, v, w, scale=False),
            "not scaled",
            "square root of the keys' width",
        ),
        (lambda q, k, v, w: windowed_attention(q, k, v, w, fill=0.0), "filled their scores with 0", "minus infinity"),
        (
            lambda q, k, v, w: (
                torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1).masked_fill(
                    sliding_window_mask(q.shape[-2], w), 0.0
                )
                @ v
            ),
            "without renormalising",
            "before the softmax",
        ),
        (lambda q, k, v, w: q @ k.T, "your code raised", "scaled dot-product scores"),
    ],
)
def test_exercise_2_names_the_mistake(wrong, named, hint, capsys):
    result, out = verdict(checks.exercise_2, wrong, capsys)
    assert result is False and out.startswith("Exercise 2: not yet, ")
    assert named in out and hint in out.split("Hint: ")[1]


def test_exercise_2_reference_equals_torch_with_an_allowed_mask():
    for q, k, v, w in checks.exercise_2.__self__.cases():
        allowed = ~checks.window_mask_loops(q.shape[-2], w)  # PyTorch's boolean mask: True = may attend
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        assert torch.allclose(windowed_attention(q, k, v, w), expected, atol=1e-5)


def test_exercise_3(capsys):
    result, out = verdict(checks.exercise_3, lambda n, i, j: list(range(i, j + 1)), capsys)
    assert result is True and out.startswith("Exercise 3: correct")
    for wrong, named in (
        (lambda n, i, j: list(range(i, n)), "rows after"),
        (lambda n, i, j: [i, j], "rows between"),
        (lambda n, i, j: list(range(i, j)), f"row {5} changes too"),
        (lambda n, i, j: "all", "expected a list of row indices"),
    ):
        result, out = verdict(checks.exercise_3, wrong, capsys)
        assert result is False and out.startswith("Exercise 3: not yet, ") and named in out, out


def test_exercise_3_leaves_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    checks.exercise_3(lambda n, i, j: list(range(i, j + 1)))
    assert torch.equal(torch.rand(3), expected)
    assert CausalAttention  # the module the check runs


@pytest.mark.parametrize(
    ("library_attention", "named"),
    [
        (
            lambda q, k, v, w: ah.attention_with_weights(q, k, v, mask=sliding_window_mask(q.shape[-2], w))[0],
            "the package's attention_with_weights",
        ),
        (
            lambda q, k, v, w: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=~sliding_window_mask(q.shape[-2], w)
            ),
            "PyTorch's scaled_dot_product_attention kernel",
        ),
        (
            lambda q, k, v, w: torch._scaled_dot_product_attention_math(
                q, k, v, attn_mask=~sliding_window_mask(q.shape[-2], w)
            )[0],
            "PyTorch's _scaled_dot_product_attention_math kernel",
        ),
    ],
)
def test_exercise_2_rejects_the_library_attention_it_asks_for(library_attention, named, capsys):
    result, out = verdict(checks.exercise_2, library_attention, capsys)
    assert result is False and f"your code runs {named}" in out and "Hint: " in out
