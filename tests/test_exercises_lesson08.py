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


def test_the_check_trains_the_configuration_it_is_given(capsys):
    small = dict(num_tokens=6, num_train=300, num_heldout=100, d_model=16, num_heads=2, num_layers=1, ffn_hidden=16)
    reference = checks._causal_reverse_accuracy(0, *small.values(), 20, 32, 3e-3)
    assert 0 <= reference <= 1
    ok, _ = verdict(capsys, checks.exercise_2, reference, seed=0, num_steps=20, batch_size=32, **small)
    assert ok


def test_a_changed_configuration_is_judged_against_its_own_training(capsys, monkeypatch):
    """A learner who changes num_layers measures about 0.3: right for that configuration, not "without positions"."""
    trained = []
    monkeypatch.setattr(checks, "_causal_reverse_accuracy", lambda *args: trained.append(args) or 0.3)
    ok, out = verdict(capsys, checks.exercise_2, 0.31, seed=0, num_layers=1, lr=1e-3)
    assert ok and out.startswith("Exercise 2: correct")
    assert trained[-1][6] == 1 and trained[-1][-1] == 1e-3, "the check must train the configuration it is given"
    ok, out = verdict(capsys, checks.exercise_2, 0.25, seed=0, num_layers=1, lr=1e-3)
    assert not ok and "outside the range" in out and "without positions" not in out
    ok, out = verdict(capsys, checks.exercise_2, 1.0, seed=0, num_layers=1)
    assert not ok and "without a causal mask" not in out


@pytest.mark.parametrize(
    "answer",
    [lambda x: torch.roll(x, -1, dims=-1), lambda x: x.flip(-1), lambda x: torch.roll(x, 1, dims=0), lambda x: x],
    ids=["left", "reversed", "rows", "unchanged"],
)
def test_exercise_1_hints_do_not_give_the_answer_away(capsys, answer):
    assert checks.exercise_1(answer) is False
    out = capsys.readouterr().out
    assert "Hint:" in out and "torch.roll(inputs, shifts=1" not in out and "shifts=1" not in out
