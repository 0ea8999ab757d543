"""Lesson 05's checks: nothing before an attempt, a named mistake for each plausible wrong answer, and the
right answers accepted."""

import math

import pytest
import torch

from attention_helpers.lessons import lesson05 as checks


def inverted_dropout(x, p, training=True):
    if not training:
        return x
    keep = torch.rand_like(x) >= p
    return x * keep if p == 1 else x * keep / (1 - p)


def unscaled(x, p, training=True):
    return x * (torch.rand_like(x) >= p) if training else x


def keep_and_drop_reversed(x, p, training=True):
    if not training:
        return x
    keep = torch.rand_like(x) < p  # keeps with probability p
    return x * keep if p == 1 else x * keep / (1 - p)


def divides_by_zero_at_p_one(x, p, training=True):
    return x * (torch.rand_like(x) >= p) / (1 - p) if training else x


def ignores_training_flag(x, p, training=True):
    return inverted_dropout(x, p, True)


def same_mask_every_call(x, p, training=True):
    if not training:
        return x
    keep = torch.rand(x.shape, generator=torch.Generator().manual_seed(0)) >= p
    return x * keep if p == 1 else x * keep / (1 - p)


def one_number_per_row(x, p, training=True):
    if not training:
        return x
    keep = torch.rand(*x.shape[:-1], 1) >= p
    return x * keep if p == 1 else x * keep / (1 - p)


def one_mask_per_column(x, p, training=True):
    if not training or p in (0, 1):
        return x * (1 - p)
    return x * (torch.rand(x.shape[-1]) >= p) / (1 - p)


def one_mask_for_the_batch(x, p, training=True):
    if not training or p in (0, 1):
        return x * (1 - p)
    return x * (torch.rand(x.shape[1:]) >= p) / (1 - p)


calls = [0]


def counter(x, p, training=True):
    """No randomness: a pattern that moves on at every call, dropping a fraction p."""
    if not training or p in (0, 1):
        return x * (1 - p)
    calls[0] += 1
    return x * ((torch.arange(x.numel()) * 7919 + 13 * calls[0]) % 1000 >= 1000 * p).view(x.shape) / (1 - p)


def seeds_itself(x, p, training=True):
    if not training or p in (0, 1):
        return x * (1 - p)
    torch.manual_seed(0)
    return x * (torch.rand_like(x) >= p) / (1 - p)


def numpy_mask(x, p, training=True):
    import numpy

    if not training or p in (0, 1):
        return x * (1 - p)
    return x * torch.from_numpy(numpy.random.rand(*x.shape) >= p) / (1 - p)


def nearly_fixed_count(x, p, training=True):
    """Drops round(p * n) - 1, round(p * n) or round(p * n) + 1 entries, at random places: the count has no spread."""
    if not training or p in (0, 1):
        return x * (1 - p)
    count = round(p * x.numel()) + int(torch.randint(-1, 2, ()))
    keep = torch.ones(x.numel(), dtype=torch.bool)
    keep[torch.randperm(x.numel())[:count]] = False
    return x * keep.view(x.shape) / (1 - p)


def in_place(x, p, training=True):
    if training:
        x.mul_(torch.rand_like(x) >= p).div_(1 - p if p < 1 else 1)
    return x


def test_unanswered(capsys):
    assert checks.exercise_1(None) is False
    assert checks.exercise_2(None) is False
    assert capsys.readouterr().out == (
        "Exercise 1: Not answered yet (the answer is still None).\n"
        "Exercise 2: Not answered yet (the answer is still None).\n"
    )


def test_exercise_1_accepts_inverted_dropout_and_leaves_the_global_generator_alone(capsys):
    state = torch.get_rng_state()
    assert checks.exercise_1(inverted_dropout) is True
    assert torch.equal(torch.get_rng_state(), state)

    # another right answer, drawing its masks another way, passes too: the check judges properties, not one mask
    def bernoulli_dropout(x, p, training=True):
        if not training:
            return x
        keep = torch.bernoulli(torch.full_like(x, 1 - p)).bool()
        return torch.where(keep, x / (1 - p) if p < 1 else x * 0, torch.zeros_like(x))

    assert checks.exercise_1(bernoulli_dropout) is True

    def uniform_in_place_then_where(x, p, training=True):
        if not training or p == 0:
            return x.clone()
        survives = torch.empty(x.shape).uniform_() > p
        return torch.where(survives, x * (1 / (1 - p) if p < 1 else 0.0), x.new_zeros(()))

    assert checks.exercise_1(uniform_in_place_then_where) is True
    out = capsys.readouterr().out.splitlines()
    assert out == ["Exercise 1: correct on every hidden tensor, in training and evaluation mode."] * 3


@pytest.mark.parametrize(
    ("answer", "problem", "hint"),
    [
        (unscaled, "the surviving entries equal x", "scale the survivors"),
        (keep_and_drop_reversed, "you keep an entry with probability p", "the keep/drop test is reversed"),
        (divides_by_zero_at_p_one, "with p = 1", "return zeros, without dividing by 1 - p = 0"),
        (ignores_training_flag, "the output differs from x with training=False", "in evaluation mode dropout does"),
        (
            same_mask_every_call,
            "two calls in a row dropped exactly the same entries",
            "a new random mask at every call",
        ),
        (one_number_per_row, "not dropped independently: neighbouring columns share", "a random number of its own"),
        (one_mask_per_column, "not dropped independently: neighbouring rows share", "a random number of its own"),
        (one_mask_for_the_batch, "not dropped independently: the sequences of the batch", "a random number of its own"),
        (counter, "not dropped independently", "no pattern"),
        (seeds_itself, "two calls in a row dropped exactly the same entries", "seed inside the function"),
        (numpy_mask, "the mask is not drawn from torch", "a new random mask at every call, from torch's generator"),
        (in_place, "changed its input x in place", "build a new tensor"),
        (nearly_fixed_count, "is nearly fixed, so they are not dropped independently", "never choose how many"),
        (
            lambda x, p, training=True: (nearly_fixed_count if p == 0.5 else inverted_dropout)(x, p, training),
            "is nearly fixed",  # at p = 0.5 dropping half the entries is right: not a reversed test
            "never choose how many",
        ),
        (lambda x, p, training=True: None, "returned None", "return the tensor after dropout"),
        (lambda x, p: x, "raised TypeError", "a random number of its own"),
    ],
)
def test_exercise_1_names_the_mistake(capsys, answer, problem, hint):
    assert checks.exercise_1(answer) is False
    out = capsys.readouterr().out
    assert out.startswith("Exercise 1: not yet, ") and out.count("\n") == 1
    assert problem in out.split(" Hint: ")[0] and hint in out.split(" Hint: ")[1]


def test_exercise_2_accepts_the_sum_over_rows(capsys):
    assert checks.exercise_2(lambda n, p: sum(p ** (i + 1) for i in range(n))) is True
    # a tensor of one number is a number too
    assert checks.exercise_2(lambda n, p: (torch.tensor(p, dtype=torch.float64) ** torch.arange(1, n + 1)).sum())
    # the closed form of the geometric sum, with p = 1, where it would divide by 1 - p = 0, on its own
    assert checks.exercise_2(lambda n, p: float(n) if p == 1 else p * (1 - p**n) / (1 - p))
    assert capsys.readouterr().out == "Exercise 2: correct on all 7 hidden cases.\n" * 3


@pytest.mark.parametrize(
    ("answer", "problem", "hint"),
    [
        (lambda n, p: 0.0 if p == 1 else sum(p ** (i + 1) for i in range(n)), "p = 1.0", "every row is empty"),
        (lambda n, p: 1.0 if p == 0 else sum(p ** (i + 1) for i in range(n)), "p = 0.0", "no row is ever empty"),
        (lambda n, p: p * (1 - p**n) / (1 - p), "your code divides by zero", "needs p = 1 on its own"),
        (lambda n, p: float(torch.tensor(p) * (1 - torch.tensor(p) ** n) / (1 - torch.tensor(p))), "p = 1.0", "p = 1"),
    ],
    ids=["0 at p = 1", "1 at p = 0", "closed form", "closed form in torch (nan)"],
)
def test_exercise_2_tries_p_0_and_p_1(capsys, answer, problem, hint):
    assert checks.exercise_2(answer) is False
    out = capsys.readouterr().out
    assert out.startswith("Exercise 2: not yet, your") and out.count("\n") == 1, out
    assert problem in out.split(" Hint: ")[0] and hint in out.split(" Hint: ")[1], out


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (lambda n, p: sum(p**k for k in range(n)), "first row as always empty"),
        (lambda n, p: p**n, "one row of all num_tokens weights"),
        (lambda n, p: n * p, "counts one dropped weight as an empty row"),
        (lambda n, p: sum((1 - p) ** k for k in range(1, n + 1)), "rows that keep all their weights"),
        (lambda n, p: 1 - math.prod(1 - p**k for k in range(1, n + 1)), "at least one row is empty"),
        (lambda n, p: sum(p**k for k in range(1, n + 1)) / n, "expected fraction of empty rows"),
        (lambda n, p: 0.09, "not the right number"),  # the old exercise's answer for one row, for every input
    ],
)
def test_exercise_2_names_the_wrong_formula(capsys, answer, problem):
    assert checks.exercise_2(answer) is False
    out = capsys.readouterr().out
    assert out.startswith("Exercise 2: not yet, ") and problem in out and "Hint: " in out


def test_exercise_1_accepts_another_dtype_and_never_raises(capsys):
    assert checks.exercise_1(lambda x, p, training=True: inverted_dropout(x.double(), p, training)) is True
    assert checks.exercise_1(lambda x, p, training=True: (torch.rand_like(x) >= p).int()) is False  # the mask only
    assert checks.exercise_1(lambda x, p, training=True: [0.0]) is False
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Exercise 1: correct") and all(line.startswith("Exercise 1: not yet") for line in out[1:])


@pytest.mark.parametrize(
    "answer",
    [
        lambda x, p, training=True: torch.nn.Dropout(p).train(training)(x),
        lambda x, p, training=True: torch.nn.functional.dropout(x, p, training),
        lambda x, p, training=True: torch.dropout(x, p, training),
        lambda x, p, training=True: torch.native_dropout(x, p, training)[0],
        lambda x, p, training=True: torch.nn.functional.dropout1d(x, p, training),
        lambda x, p, training=True: torch.ops.aten.native_dropout.default(x, p, training)[0],
        lambda x, p, training=True: torch.nn.functional.alpha_dropout(x, p, training),
    ],
    ids=["nn.Dropout", "F.dropout", "torch.dropout", "native_dropout", "dropout1d", "aten", "alpha_dropout"],
)
def test_exercise_1_may_not_call_torchs_dropout(capsys, answer):
    """The exercise says "without nn.Dropout": torch's own dropout is what the learner is asked to write."""
    assert checks.exercise_1(answer) is False
    out = capsys.readouterr().out
    assert "your code runs PyTorch's" in out and "dropout" in out and "draw the mask yourself" in out


@pytest.mark.parametrize(
    "answer",
    [
        lambda n, p: (p ** torch.arange(1, n + 1)).sum(),  # a float32 tensor
        lambda n, p: float((p ** torch.arange(1, n + 1, dtype=torch.float32)).sum()),
        lambda n, p: __import__("numpy").float32(sum(p ** (i + 1) for i in range(n))),
    ],
    ids=["float32 tensor", "float32 item", "numpy float32"],
)
def test_exercise_2_accepts_the_sum_in_float32_and_numpys_scalars(capsys, answer):
    assert checks.exercise_2(answer) is True, capsys.readouterr().out
