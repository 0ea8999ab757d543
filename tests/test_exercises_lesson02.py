"""Lesson 02's checks: nothing before an attempt, a named mistake for each plausible wrong answer, and the right
answers accepted."""

import pytest
import torch

import attention_helpers as ah
from attention_helpers.lessons import lesson02 as checks

NOT_ANSWERED = "Not answered yet (the answer is still None).\n"


def my_softmax(x, dim=-1, temperature=1.0):
    scaled = x / temperature
    exp_shifted = torch.exp(scaled - scaled.amax(dim=dim, keepdim=True))
    return exp_shifted / exp_shifted.sum(dim=dim, keepdim=True)


def naive(x, dim=-1, temperature=1.0):
    exp_x = torch.exp(x / temperature)
    return exp_x / exp_x.sum(dim=dim, keepdim=True)


def global_maximum(x, dim=-1, temperature=1.0):
    scaled = x / temperature
    exp_shifted = torch.exp(scaled - scaled.max())
    return exp_shifted / exp_shifted.sum(dim=dim, keepdim=True)


def context_vectors(x):
    return torch.softmax(x @ x.transpose(-2, -1), dim=-1) @ x


def verdict(check, answer, capsys):
    result = check(answer)
    return result, capsys.readouterr().out


@pytest.mark.parametrize("number", [1, 2, 3])
def test_unanswered_says_only_not_answered(number, capsys):
    result, out = verdict(getattr(checks, f"exercise_{number}"), None, capsys)
    assert result is False and out == f"Exercise {number}: {NOT_ANSWERED}"


def test_exercise_1_accepts_a_right_answer(capsys):
    result, out = verdict(checks.exercise_1, my_softmax, capsys)
    assert result is True and out.startswith("Exercise 1: correct")


@pytest.mark.parametrize(
    ("wrong", "named", "hint"),
    [
        (naive, "overflows to inf", "subtract the maximum"),
        (global_maximum, "maximum of the whole tensor", "each slice's own maximum"),
        (lambda x, dim, t: my_softmax(x, -1, t), "not those along dim=0", "along dim"),
        (lambda x, dim, t: my_softmax(x, dim, 1.0), "temperature is ignored", "divide the scores"),
        (lambda x, dim, t: my_softmax(x, dim, 1 / t), "multiplied by the temperature", "divide"),
        (lambda x, dim, t: torch.exp(x / t - (x / t).amax(dim=dim, keepdim=True)), "do not sum to 1", "sum"),
    ],
)
def test_exercise_1_names_the_mistake(wrong, named, hint, capsys):
    result, out = verdict(checks.exercise_1, wrong, capsys)
    assert result is False and out.startswith("Exercise 1: not yet, ")
    assert named in out and hint in out.split("Hint: ")[1]


def test_exercise_1_survives_a_function_that_raises(capsys):
    result, out = verdict(checks.exercise_1, lambda x, dim, t: x.sum(dim=7), capsys)
    assert result is False and "your code raised IndexError" in out


def test_exercise_2_accepts_a_right_answer(capsys):
    result, out = verdict(checks.exercise_2, context_vectors, capsys)
    assert result is True and out.startswith("Exercise 2: correct")


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (lambda x: torch.softmax(x @ x.transpose(-2, -1), dim=1) @ x, "softmax runs over the queries"),
        (lambda x: torch.softmax(x @ x.transpose(-2, -1), dim=-1), "you returned the attention weights"),
        (lambda x: (x @ x.transpose(-2, -1)) @ x, "not normalised"),
        (lambda x: torch.softmax(x @ x.permute(2, 1, 0), dim=-1) @ x, "your code raised RuntimeError"),
    ],
)
def test_exercise_2_names_the_mistake(wrong, named, capsys):
    result, out = verdict(checks.exercise_2, wrong, capsys)
    assert result is False and out.startswith("Exercise 2: not yet, ") and "Hint: " in out
    assert named in out


def test_exercise_3(capsys):
    result, out = verdict(checks.exercise_3, ("same", "sharper", "flatter"), capsys)
    assert result is True and out == "Exercise 3: correct.\n"
    result, out = verdict(checks.exercise_3, ("sharper", "sharper", "flatter"), capsys)
    assert result is False and 'adding 10 to every score does not make the weights "sharper"' in out
    assert "only sees the differences" in out
    result, out = verdict(checks.exercise_3, ("same", "flatter", "sharper"), capsys)
    assert result is False and "temperature of 0.1" in out
    result, out = verdict(checks.exercise_3, "same", capsys)
    assert result is False and "expected a tuple of three words" in out


@pytest.mark.parametrize(
    ("library_softmax", "named"),
    [
        (lambda x, dim, t: torch.softmax(x / t, dim=dim), "softmax kernel"),
        (lambda x, dim, t: (x / t).softmax(dim), "softmax kernel"),
        (lambda x, dim, t: torch.nn.functional.softmax(x / t, dim=dim), "softmax kernel"),
        (lambda x, dim, t: torch.special.softmax(x / t, dim), "softmax kernel"),
        (lambda x, dim, t: (x / t).log_softmax(dim).exp(), "log_softmax kernel"),
        (lambda x, dim, t: torch.ops.aten.softmax.int(x / t, dim), "softmax kernel"),
        (lambda x, dim, t: torch.ops.aten._softmax.default(x / t, dim, False), "softmax kernel"),
        (lambda x, dim, t: torch.nn.functional.softmin(-x / t, dim), "softmin kernel"),
        (lambda x, dim, t: torch._safe_softmax(x / t, dim), "_safe_softmax kernel"),
        (lambda x, dim, t: ah.softmax_stable(x / t, dim), "the package's softmax_stable"),
        (lambda x, dim, t: ah.softmax_with_temperature(x, t, dim), "the package's softmax_with_temperature"),
        (lambda x, dim, t: ah.online_softmax(x / t, dim), "the package's online_softmax"),
    ],
)
def test_exercise_1_rejects_the_library_softmax_it_asks_for(library_softmax, named, capsys):
    result, out = verdict(checks.exercise_1, library_softmax, capsys)
    assert (
        result is False
        and "your code runs " in out
        and named in out
        and "exp, a maximum and a sum" in out.split("Hint: ")[1]
    )


def test_exercise_2_names_scores_scaled_by_sqrt_d(capsys):
    def scaled(x):
        return torch.softmax(x @ x.transpose(-2, -1) / x.shape[-1] ** 0.5, dim=-1) @ x

    result, out = verdict(checks.exercise_2, scaled, capsys)
    assert result is False and "divided the scores by sqrt(d)" in out
