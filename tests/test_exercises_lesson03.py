"""Lesson 03's checks: nothing before an attempt, a named mistake for each plausible wrong answer, and the right
answers accepted."""

import math

import pytest
import torch

from attention_helpers.lessons import lesson03 as checks

NOT_ANSWERED = "Not answered yet (the answer is still None).\n"


def self_attention(x, W_query, W_key, W_value, scale=None, dim=-1, mix_inputs=False, transposed=False):
    queries, keys, values = x @ W_query, x @ W_key, x @ W_value
    scores = queries @ keys.transpose(-2, -1)
    if transposed:
        scores = scores.transpose(-2, -1)
    scale = math.sqrt(keys.shape[-1]) if scale is None else scale(x, keys, values)
    weights = torch.softmax(scores / scale, dim=dim)
    return weights @ (x if mix_inputs else values)


def verdict(check, answer, capsys):
    result = check(answer)
    return result, capsys.readouterr().out


@pytest.mark.parametrize("number", [1, 2])
def test_unanswered_says_only_not_answered(number, capsys):
    result, out = verdict(getattr(checks, f"exercise_{number}"), None, capsys)
    assert result is False and out == f"Exercise {number}: {NOT_ANSWERED}"


def test_exercise_1_agrees_with_torch_on_its_reference():
    """The check's reference is the package's attention; PyTorch's own kernel gives the same context vectors."""
    for x, W_query, W_key, W_value in checks.exercise_1.__self__.cases():
        q, k, v = x @ W_query, x @ W_key, x @ W_value
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        assert torch.allclose(self_attention(x, W_query, W_key, W_value), expected, atol=1e-5)


def test_exercise_1_accepts_a_right_answer(capsys):
    result, out = verdict(checks.exercise_1, self_attention, capsys)
    assert result is True and out.startswith("Exercise 1: correct")


@pytest.mark.parametrize(
    ("wrong", "named", "hint"),
    [
        (lambda *a: self_attention(*a, scale=lambda x, k, v: 1.0), "not scaled", "square root of the keys' width"),
        (lambda *a: self_attention(*a, scale=lambda x, k, v: k.shape[-1]), "divided the scores by d_k", "root"),
        (lambda *a: self_attention(*a, scale=lambda x, k, v: math.sqrt(x.shape[-1])), "sqrt(d_in)", "keys"),
        (lambda *a: self_attention(*a, scale=lambda x, k, v: math.sqrt(v.shape[-1])), "values' width", "keys"),
        (lambda *a: self_attention(*a, dim=-2), "softmax runs over the queries", "dim=-1"),
        (
            lambda *a: self_attention(*a, transposed=True),
            "scores are transposed",
            "queries first, keys transposed second",
        ),
        (
            lambda *a: self_attention(*a, mix_inputs=True),
            "you mixed the inputs, not the values",
            "projected by W_value",
        ),
        (
            lambda x, wq, wk, wv: torch.softmax((x @ wq) @ (x @ wk).T / 2, dim=-1) @ (x @ wv),
            "your code raised",
            "score every query against every key",
        ),
    ],
)
def test_exercise_1_names_the_mistake(wrong, named, hint, capsys):
    result, out = verdict(checks.exercise_1, wrong, capsys)
    assert result is False and out.startswith("Exercise 1: not yet, ")
    assert named in out and hint in out.split("Hint: ")[1]


def test_exercise_2_accepts_a_right_answer(capsys):
    result, out = verdict(checks.exercise_2, lambda d_k, std: (math.sqrt(d_k) * std**2,) * 2, capsys)
    assert result is True and out.startswith("Exercise 2: correct")


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (lambda d_k, std: (math.sqrt(d_k), math.sqrt(d_k)), "you gave sqrt(d_k)"),
        (lambda d_k, std: (math.sqrt(d_k) * std, 1.0), "multiplied sqrt(d_k) by std once"),
        (lambda d_k, std: (d_k * std**4, 1.0), "the variance, not the spread"),
        (lambda d_k, std: (math.sqrt(d_k) * std**2, math.sqrt(d_k)), "T = sqrt(d_k) does not bring"),
        (lambda d_k, std: math.sqrt(d_k) * std**2, "expected a pair"),
    ],
)
def test_exercise_2_names_the_mistake(wrong, named, capsys):
    result, out = verdict(checks.exercise_2, wrong, capsys)
    assert result is False and out.startswith("Exercise 2: not yet, ") and "Hint: " in out
    assert named in out


@pytest.mark.parametrize(
    "answer",
    [
        lambda x, Wq, Wk, Wv: torch.nn.functional.scaled_dot_product_attention(x @ Wq, x @ Wk, x @ Wv),
        lambda x, Wq, Wk, Wv: __import__("attention_helpers").attention_with_weights(x @ Wq, x @ Wk, x @ Wv)[0],
        lambda x, Wq, Wk, Wv: torch._scaled_dot_product_attention_math(
            *((x @ W).reshape(-1, 1, x.shape[-2], W.shape[-1]) for W in (Wq, Wk, Wv))
        )[0].reshape(*x.shape[:-1], Wv.shape[-1]),
        lambda x, Wq, Wk, Wv: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            *((x @ W).reshape(-1, 1, x.shape[-2], W.shape[-1]) for W in (Wq, Wk, Wv))
        )[0].reshape(*x.shape[:-1], Wv.shape[-1]),
    ],
    ids=["F.scaled_dot_product_attention", "ah.attention_with_weights", "math kernel", "flash kernel"],
)
def test_exercise_1_may_not_call_a_ready_made_attention(capsys, answer):
    result, out = verdict(checks.exercise_1, answer, capsys)
    assert result is False
    assert ("scaled_dot_product" in out or "attention_with_weights" in out) and "not to call a ready-made" in out
