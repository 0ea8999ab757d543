"""The exercise checks tell right from wrong, say why, and never raise on a wrong answer."""

import pytest
import torch

import attention_helpers as ah


def test_unanswered_exercise_gives_nothing_away(capsys):
    assert ah.check_answer("Exercise 1", None, torch.ones(2), hint="use ones") is False
    assert capsys.readouterr().out == "Exercise 1: Not answered yet (the answer is still None).\n"
    assert ah.check_function("Exercise 2", None, ah.softmax_stable, [], hint="h") is False
    assert capsys.readouterr().out == "Exercise 2: Not answered yet (the answer is still None).\n"


@pytest.mark.parametrize(
    ("answer", "expected", "verdict", "reason"),
    [
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.00001]), True, "correct"),
        (
            torch.tensor([1.0, 2.1]),
            torch.tensor([1.0, 2.0]),
            False,
            "some values differ (largest difference 0.1 at index (1,))",
        ),
        (torch.ones(2, 3), torch.ones(3, 2), False, "expected shape (3, 2), got (2, 3)"),  # a transposed answer
        ([1.0, 2.0], torch.ones(2), False, "expected a tensor, got list"),
        (torch.tensor([True, False]), torch.tensor([True, False]), True, "correct"),
        (torch.tensor([1, 0]), torch.tensor([True, False]), False, "the dtype is torch.int64, expected torch.bool"),
        # a 0/1 float mask for a boolean one: the values are right, only the dtype is not
        (
            torch.triu(torch.ones(4, 4), diagonal=1),
            torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1),
            False,
            "the values are right but the dtype is torch.float32, expected torch.bool (convert with .bool())",
        ),
        (torch.tensor([True, True]), torch.tensor([True, False]), False, "1 of 2 entries differ"),
        (0.25, 0.25, True, "correct"),
        (True, 1, False, "expected a number, got bool"),
        ("post-LN", "post-LN", True, "correct"),
        ("pre-LN", "post-LN", False, "that is not it"),
        ((2, 6, 4), (2, 6, 4), True, "correct"),
        (torch.Size([2, 6, 4]), (2, 6, 4), True, "correct"),
        ((2, 4, 6), (2, 6, 4), False, "item 2 of 3 is not right: that is not the right number"),
        ((2, 6), (2, 6, 4), False, "expected 3 items, got 2"),
        (
            (torch.ones(5, 5), torch.ones(5, 5)),
            (torch.ones(5, 5), torch.ones(5, 3)),
            False,
            "item 2 of 2 is not right: expected shape (5, 3), got (5, 5)",
        ),
        ((1, (2, 3)), (1, (2, 4)), False, "item 2 of 2, its item 2 of 2 is not right: that is not the right number"),
    ],
)
def test_answers_are_judged_with_a_reason(capsys, answer, expected, verdict, reason):
    assert ah.check_answer("Q", answer, expected, hint="h") is verdict
    out = capsys.readouterr().out
    assert reason in out and out.startswith("Q: ")
    assert ("Hint: h" in out) is not verdict


def test_function_check_runs_every_case_and_reports_failures(capsys):
    cases = [(torch.randn(3, 5),), (torch.randn(2, 4) * 1000,)]
    assert ah.check_function("softmax", lambda x: torch.softmax(x, -1), ah.softmax_stable, cases, hint="h")
    assert "correct on all 2 cases" in capsys.readouterr().out
    # the naive softmax passes small scores but overflows on the second case
    assert not ah.check_function("softmax", ah.softmax_naive, ah.softmax_stable, cases, hint="subtract the max")
    assert "case 2 of 2" in capsys.readouterr().out
    assert not ah.check_function("softmax", lambda x: x.softmax(dim=0), ah.softmax_stable, cases, hint="h")
    assert "case 1 of 2" in capsys.readouterr().out


def test_function_check_reports_an_exception_instead_of_raising(capsys):
    def broken(x):
        return x @ x  # (3, 5) @ (3, 5) cannot be multiplied

    assert not ah.check_function("f", broken, ah.softmax_stable, [(torch.randn(3, 5),)], hint="h")
    assert "raised RuntimeError" in capsys.readouterr().out
    with pytest.raises(TypeError, match="must be a function"):
        ah.check_function("f", 3, ah.softmax_stable, [], hint="h")
