"""Lesson 08's exercise checks: the rotate targets on hidden batches, and the causal model's accuracy band."""

import pytest
import torch

from attention_helpers.lessons import lesson08 as checks


def verdict(capsys, check, *args, **kwargs):
    result = check(*args, **kwargs)
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return result, out


def test_rotate_targets(capsys):
    assert verdict(capsys, checks.exercise_1, None) == (
        False,
        "Exercise 1: Not answered yet (the answer is still None).\n",
    )
    ok, out = verdict(capsys, checks.exercise_1, lambda x: torch.roll(x, 1, dims=-1))
    assert ok and out.startswith("Exercise 1: correct")
    for wrong, reason in (
        (lambda x: torch.roll(x, -1, dims=-1), "one place to the left"),
        (lambda x: x.flip(-1), "reversed"),
        (lambda x: torch.roll(x, 1, dims=0), "the rows (the batch) were rotated"),
    ):
        ok, out = verdict(capsys, checks.exercise_1, wrong)
        assert not ok and "not yet" in out and reason in out and "Hint: " in out


@pytest.fixture
def measured(monkeypatch):
    """The check's own training run replaced by a fixed figure (the real run is tested below, small)."""
    monkeypatch.setattr(checks, "_causal_reverse_accuracy", lambda *args: 0.55)


def test_causal_accuracy_band(capsys, measured):
    assert verdict(capsys, checks.exercise_2, None, seed=0) == (
        False,
        "Exercise 2: Not answered yet (the answer is still None).\n",
    )
    ok, out = verdict(capsys, checks.exercise_2, 0.57, seed=0)
    assert ok and out.startswith("Exercise 2: correct")
    for wrong, reason in (
        (1.0, "the model without a causal mask"),
        (0.289, "without positions"),
        (0.1, "random guess"),
        (55.0, "not a fraction"),
        (0.75, "outside the range"),
        ("0.55", "expected a number"),
    ):
        ok, out = verdict(capsys, checks.exercise_2, wrong, seed=0)
        assert not ok and reason in out and "Hint: " in out


def test_the_training_the_check_runs_measures_an_accuracy():
    small = dict(num_tokens=6, num_train=300, num_heldout=100, d_model=16, num_heads=2, num_layers=1, ffn_hidden=16)
    reference = checks._causal_reverse_accuracy(0, *small.values(), 20, 32, 3e-3)
    assert 0 <= reference <= 1


LESSON = dict(num_tokens=10, num_train=10_000, num_heldout=1_000, d_model=32, num_heads=2, num_layers=2, ffn_hidden=64)
LESSON |= dict(num_steps=200, batch_size=64, lr=3e-3)  # the parameters cell of notebooks/08


def test_the_check_trains_the_lessons_configuration_at_the_seed_it_is_given(capsys, monkeypatch):
    trained = []
    monkeypatch.setattr(checks, "_causal_reverse_accuracy", lambda *args: trained.append(args) or 0.55)
    ok, out = verdict(capsys, checks.exercise_2, 0.56, seed=7, **LESSON)
    assert ok and out.startswith("Exercise 2: correct")
    assert trained == [(7, *LESSON.values())]


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        (dict(num_steps=1), "not num_steps=1"),  # an untrained model: a random guess, 0.1, would pass
        (dict(num_layers=1, lr=1e-3), "not lr=0.001"),
        (dict(band=1.0), "not band=1.0: put the parameters cell back"),
    ],
)
def test_a_configuration_passed_to_the_check_is_refused_in_one_sentence_without_training(
    capsys, monkeypatch, changes, said
):
    trained = []
    monkeypatch.setattr(checks, "_causal_reverse_accuracy", lambda *args: trained.append(args) or 0.1)
    ok, out = verdict(capsys, checks.exercise_2, 0.1, seed=123, **{**LESSON, **changes})
    assert not ok and said in out, out
    assert trained == [], "nothing is trained for a configuration the check does not judge"


@pytest.mark.parametrize(
    "answer",
    [lambda x: torch.roll(x, -1, dims=-1), lambda x: x.flip(-1), lambda x: torch.roll(x, 1, dims=0), lambda x: x],
    ids=["left", "reversed", "rows", "unchanged"],
)
def test_exercise_1_hints_do_not_give_the_answer_away(capsys, answer):
    assert checks.exercise_1(answer) is False
    out = capsys.readouterr().out
    assert "Hint:" in out and "torch.roll(inputs, shifts=1" not in out and "shifts=1" not in out
