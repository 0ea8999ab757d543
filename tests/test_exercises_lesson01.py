"""Lesson 01's checks: nothing before an attempt, a named mistake for each plausible wrong answer, and the right
answers accepted."""

import pytest
import torch

from attention_helpers.lessons import lesson01 as checks

NOT_ANSWERED = "Not answered yet (the answer is still None).\n"


def cosine_matrix(x):
    unit = x / x.norm(dim=-1, keepdim=True)
    return unit @ unit.T


def most_similar(x):
    return cosine_matrix(x).fill_diagonal_(float("-inf")).argmax(dim=-1)


def verdict(check, answer, capsys):
    result = check(answer)
    return result, capsys.readouterr().out


@pytest.mark.parametrize("check", [checks.exercise_1, checks.exercise_2])
def test_unanswered_says_only_not_answered(check, capsys):
    result, out = verdict(check, None, capsys)
    name = "Exercise 1" if check is checks.exercise_1 else "Exercise 2"
    assert result is False and out == f"{name}: {NOT_ANSWERED}"


def test_the_cosine_reference_is_pytorchs_cosine_similarity():
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    expected = torch.tensor([[torch.nn.functional.cosine_similarity(a, b, dim=0).item() for b in x] for a in x])
    assert torch.allclose(checks.cosine_matrix_reference(x), expected, atol=1e-6)


def test_exercise_1_accepts_a_right_answer(capsys):
    result, out = verdict(checks.exercise_1, cosine_matrix, capsys)
    assert result is True and out.startswith("Exercise 1: correct")


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (lambda x: x @ x.T, "these are the dot products"),
        (lambda x: (x / x.norm(dim=-1, keepdim=True)) @ x.T, "only the rows were divided"),
        (lambda x: x.T @ x / (x.norm() ** 2), "one row and column per coordinate"),
        (lambda x: (x / x.norm(dim=0, keepdim=True)) @ (x / x.norm(dim=0, keepdim=True)).T, "(dim=0)"),
        (lambda x: 1 / 0, "your code raised ZeroDivisionError"),
        (lambda x: None, "returned None"),
    ],
)
def test_exercise_1_names_the_mistake(wrong, named, capsys):
    result, out = verdict(checks.exercise_1, wrong, capsys)
    assert result is False and out.startswith("Exercise 1: not yet, ") and "Hint: " in out
    assert named in out


def test_exercise_2_accepts_a_tensor_or_a_list(capsys):
    for answer in (most_similar, lambda x: most_similar(x).tolist()):
        result, out = verdict(checks.exercise_2, answer, capsys)
        assert result is True and out.startswith("Exercise 2: correct")


@pytest.mark.parametrize(
    ("wrong", "named", "hint"),
    [
        (lambda x: cosine_matrix(x).argmax(dim=-1), "its own best match", "hide the diagonal"),
        (lambda x: (x @ x.T).fill_diagonal_(float("-inf")).argmax(dim=-1), "ranked by dot product", "cosine"),
        (lambda x: cosine_matrix(x).fill_diagonal_(float("inf")).argmin(dim=-1), "least similar", "the largest cosine"),
        (lambda x: most_similar(x).float(), "expected integer indices", "integers"),
    ],
)
def test_exercise_2_names_the_mistake(wrong, named, hint, capsys):
    result, out = verdict(checks.exercise_2, wrong, capsys)
    assert result is False and out.startswith("Exercise 2: not yet, ")
    assert named in out and hint in out.split("Hint: ")[1]


def test_exercise_3_unanswered_right_and_named_mistakes(capsys):
    result, out = verdict(checks.exercise_3, None, capsys)
    assert result is False and out == f"Exercise 3: {NOT_ANSWERED}"
    for right in (lambda c: (c**2, 1.0), lambda c: [c * c, torch.tensor(1.0)], lambda c: torch.tensor([c * c, 1.0])):
        result, out = verdict(checks.exercise_3, right, capsys)
        assert result is True and out.startswith("Exercise 3: correct"), out
    for wrong, named, hint in (
        (lambda c: (c, 1.0), "do not change by c", "a factor c from a and one from b"),
        (lambda c: (c**2, c**2), "do not change like the dot products", "both lengths"),
        (lambda c: (c**2, 1.0 if c > 0 else -1.0), "the cosines keep their sign", "angle"),
        (lambda c: (abs(c) * c, 1.0), "the dot products keep their sign", "(-a) · (-b) = a · b"),
        (lambda c: 4, "expected a pair of numbers", "two numbers"),
    ):
        result, out = verdict(checks.exercise_3, wrong, capsys)
        assert result is False and out.startswith("Exercise 3: not yet, ")
        assert named in out and hint in out.split("Hint: ")[1], out


def cosine_in_place(x):
    x /= x.norm(dim=-1, keepdim=True)
    return x @ x.T


def most_similar_in_place(x):
    x /= x.norm(dim=-1, keepdim=True)
    return (x @ x.T).fill_diagonal_(float("-inf")).argmax(dim=-1)


@pytest.mark.parametrize(
    ("check", "answer"), [(checks.exercise_1, cosine_in_place), (checks.exercise_2, most_similar_in_place)]
)
def test_an_answer_that_changes_its_input_in_place_is_rejected(check, answer, capsys):
    result, out = verdict(check, answer, capsys)
    assert result is False and "changed its input x in place" in out and "Hint: " in out


def most_similar_by_sorting(x):
    """Right: cosines from torch's pairwise function, each row sorted, the best other index kept."""
    cosines = torch.nn.functional.cosine_similarity(x[:, None], x[None], dim=-1)
    order = cosines.argsort(dim=-1, descending=True)[:, :2]  # itself first, then its best match
    return torch.where(order[:, 0] == torch.arange(len(x)), order[:, 1], order[:, 0])


def most_similar_masking_with_eye(x):
    """Right: unit rows, the diagonal hidden with an identity mask below every cosine."""
    unit = torch.nn.functional.normalize(x, dim=-1)
    return (unit @ unit.T - 3 * torch.eye(len(x))).max(dim=-1).indices


def test_exercise_2_tries_two_and_three_tokens(capsys):
    for right in (most_similar, most_similar_by_sorting, most_similar_masking_with_eye):
        result, out = verdict(checks.exercise_2, right, capsys)
        assert result is True and out == "Exercise 2: correct on all 5 hidden inputs.\n", out
    zeros_when_few = lambda x: most_similar(x) if len(x) > 3 else torch.zeros(len(x), dtype=torch.long)  # noqa: E731
    result, out = verdict(checks.exercise_2, zeros_when_few, capsys)
    assert result is False and "with only 2 tokens, a token's pick is wrong" in out, out
    assert "each one's most similar other token is the other one" in out.split("Hint: ")[1], out
