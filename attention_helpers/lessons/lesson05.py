"""Checks for lesson 05 (dropout): the reader's own dropout function, and the expected number of attention
rows that dropout empties.

The reader's dropout draws its masks from torch's global generator; the check seeds it inside
``torch.random.fork_rng``, so the verdict repeats and the reader's own random state is left as it was.
Dropout is judged by properties that hold for every mask (each entry is 0 or ``x / (1 - p)``, a fraction
near ``p`` dropped, a new mask at each call), never by one particular mask, which differs across platforms.
"""

from __future__ import annotations

import math

import torch

from ..functional import causal_mask
from . import Exercise, Mistake, correct, hidden_generator, not_answered, not_yet, run_candidate

SEED = 505

DROPOUT_HINT = (
    "draw one uniform random number per entry (torch.rand_like(x)), drop the entry where it is below p, "
    "and divide the survivors by 1 - p"
)


def _hidden_tensor(generator: torch.Generator, *shape: int) -> torch.Tensor:
    """Random values of either sign, none of them near 0, so that a 0 in the output means a dropped entry."""
    magnitude = 0.5 + torch.rand(shape, generator=generator)
    sign = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0)
    return magnitude * sign


def _binomial_band(p: float, n: int) -> float:
    """Five standard deviations of the fraction of ``n`` entries dropped independently with probability p."""
    return 5 * math.sqrt(p * (1 - p) / n)


def exercise_1(my_dropout) -> bool:
    """``my_dropout(x, p, training)``: inverted dropout, judged on hidden tensors."""
    name = "Exercise 1"
    if my_dropout is None:
        return not_answered(name)
    if not callable(my_dropout):
        return not_yet(name, f"expected a function, got {type(my_dropout).__name__}", "define my_dropout with def")

    generator = hidden_generator(SEED)
    small = _hidden_tensor(generator, 1, 7, 5)  # batch of 1, odd sizes
    large = _hidden_tensor(generator, 301, 199)  # enough entries to measure the fraction dropped
    # Each family of checks in turn: the first mistake prints its verdict and stops the check.
    families = (_judge_training_mode, _judge_nothing_to_drop, _judge_fresh_masks, _judge_p_one)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        if all(family(name, my_dropout, small, large) for family in families):
            return correct(name, " on every hidden tensor, in training and evaluation mode")
    return False


def _run(name, my_dropout, x, p, training, case):
    """Run the reader's dropout on a copy of x; return (ok, output). Reports None, a non-tensor, a wrong
    shape and a changed input."""
    ran, out = run_candidate(
        name,
        my_dropout,
        x.clone(),
        p,
        training,
        hint=DROPOUT_HINT,
        case=case,
        in_place_hint="build a new tensor (torch.where, or x * mask / (1 - p)) instead of writing into x",
    )
    if not ran:
        return False, None
    if out is None:
        return False, not_yet(name, f"your function returned None {case}", "return the tensor after dropout")
    if not isinstance(out, torch.Tensor):
        return False, not_yet(name, f"expected a tensor {case}, got {type(out).__name__}", "return a tensor")
    if out.shape != x.shape:
        return False, not_yet(
            name, f"the output has shape {tuple(out.shape)} {case}, expected {tuple(x.shape)}", "keep x's shape"
        )
    return True, out.detach().double()  # compared in float64, whatever dtype the reader returned


def _judge_training_mode(name, my_dropout, small, large) -> bool:
    """Training mode: the fraction dropped, then the survivors' values, on hidden tensors."""
    for x, p in ((large, 0.3), (large, 0.75), (small, 0.2)):
        case = f"on a hidden tensor of shape {tuple(x.shape)} with p = {p}"
        ok, out = _run(name, my_dropout, x, p, True, case)
        if not ok:
            return False
        if torch.isnan(out).any():
            return not_yet(name, f"the output holds nan {case}", DROPOUT_HINT)
        dropped = out == 0
        if x.numel() > 1000 and not _judge_fraction(name, dropped, p, case):
            return False
        if not _judge_survivors(name, out[~dropped], x.double()[~dropped], p, case):
            return False
    return True


def _judge_fraction(name, dropped, p, case) -> bool:
    """The fraction of entries dropped is p, within five standard deviations; else which mistake it points to."""
    fraction, band = dropped.float().mean().item(), _binomial_band(p, dropped.numel())
    if abs(fraction - (1 - p)) <= band:
        return not_yet(
            name,
            f"you dropped {fraction:.1%} of the entries {case}: you keep an entry with probability p "
            "and drop it with probability 1 - p",
            "the keep/drop test is reversed: an entry is dropped where its random number is below p",
        )
    if abs(fraction - p) <= band:
        return True
    if (dropped.all(dim=-1) | (~dropped).all(dim=-1)).all():
        return not_yet(
            name,
            f"each row is dropped or kept as a whole {case}",
            "every entry needs a random number of its own: torch.rand_like(x), not one per row",
        )
    wrong_fraction = f"you dropped {fraction:.1%} of the entries {case}, expected about {p:.0%} (within {band:.1%})"
    return not_yet(name, wrong_fraction, DROPOUT_HINT)


def _judge_survivors(name, survivors, kept_x, p, case) -> bool:
    """The entries not dropped (float64) are x / (1 - p), from ``kept_x``, the same entries of x; else which
    wrong scale they have."""
    if torch.allclose(survivors, kept_x / (1 - p), rtol=1e-5, atol=1e-6):
        return True
    if torch.allclose(survivors, kept_x, rtol=1e-5, atol=1e-6):
        return not_yet(
            name,
            f"the surviving entries equal x {case}: they are not scaled",
            "divide the survivors by 1 - p, so that each entry keeps its expected value x",
        )
    if torch.allclose(survivors, kept_x / p, rtol=1e-5, atol=1e-6):
        return not_yet(
            name,
            f"the surviving entries are x / p {case}",
            "the survivors are a fraction 1 - p of the entries, so they are divided by 1 - p, not p",
        )
    if torch.allclose(survivors, kept_x * (1 - p), rtol=1e-5, atol=1e-6):
        return not_yet(
            name,
            f"the surviving entries are x * (1 - p) {case}",
            "divide by 1 - p instead of multiplying: the survivors must grow to make up for the zeros",
        )
    return not_yet(name, f"a surviving entry is not x / (1 - p) {case}", DROPOUT_HINT)


def _judge_nothing_to_drop(name, my_dropout, small, large) -> bool:
    """p = 0 and evaluation mode return x (checked after training mode, whose checks name a reversed test)."""
    for p, training, case, hint in (
        (0.4, False, "with training=False", "in evaluation mode dropout does nothing: return x unchanged"),
        (0.0, True, "with p = 0", "with p = 0 no entry is dropped"),
    ):
        ok, out = _run(name, my_dropout, small, p, training, case)
        if not ok:
            return False
        if not torch.allclose(out, small.double()):
            return not_yet(name, f"the output differs from x {case}", hint)
    return True


def _judge_fresh_masks(name, my_dropout, small, large) -> bool:
    """Two calls draw two different masks."""
    ok, second = _run(name, my_dropout, large, 0.3, True, "on a second call")
    ok, third = _run(name, my_dropout, large, 0.3, True, "on a third call") if ok else (False, None)
    if ok and torch.equal(second == 0, third == 0):
        return not_yet(
            name,
            "two calls dropped exactly the same entries",
            "draw a new random mask at every call; do not seed or store the mask inside the function",
        )
    return ok


def _judge_p_one(name, my_dropout, small, large) -> bool:
    """p = 1 drops everything: no division by 1 - p = 0."""
    ok, out = _run(name, my_dropout, small, 1.0, True, "with p = 1")
    if not ok or torch.equal(out, torch.zeros_like(out)):
        return ok
    problem = "the output holds nan or inf" if not torch.isfinite(out).all() else "the output is not all zeros"
    return not_yet(
        name,
        f"{problem} with p = 1",
        "with p = 1 every entry is dropped: return zeros (x * 0) rather than dividing by 1 - p = 0",
    )


def _expected_empty_rows(num_tokens: int, p: float) -> float:
    """The reference: row i of causal weights has i + 1 visible (non-zero) weights, each dropped on its own."""
    visible = (~causal_mask(num_tokens)).sum(dim=-1).double()  # (num_tokens,): 1, 2, ..., num_tokens
    return float((p**visible).sum())


# (num_tokens, p): odd and even lengths, a single token, rates that tell each wrong formula apart
_EMPTY_ROW_CASES = ((6, 0.3), (1, 0.5), (9, 0.8), (13, 0.1), (4, 0.65))

# Plausible wrong formulas and what they mean.
_EMPTY_ROW_MISTAKES = (
    (
        lambda n, p: sum(p**k for k in range(n)),
        "you counted the first row as always empty (p ** 0 = 1)",
        "row i sees i + 1 tokens, itself included: the first row sees one token, so it is emptied with probability p",
    ),
    (
        lambda n, p: p**n,
        "that is the chance that one row of all num_tokens weights is emptied",
        "each row sees a different number of tokens; the expected count is the sum of every row's probability",
    ),
    (
        lambda n, p: n * p,
        "that counts one dropped weight as an empty row",
        "a row is empty only when every weight it can see is dropped: p ** (weights it sees)",
    ),
    (
        lambda n, p: sum((1 - p) ** k for k in range(1, n + 1)),
        "that is the expected number of rows that keep all their weights",
        "a weight is dropped with probability p, not 1 - p",
    ),
    (
        lambda n, p: 1 - math.prod(1 - p**k for k in range(1, n + 1)),
        "that is the probability that at least one row is empty",
        "the expected number of empty rows is the sum of each row's probability of being empty",
    ),
    (
        lambda n, p: sum(p**k for k in range(1, n + 1)) / n,
        "that is the expected fraction of empty rows",
        "the question asks for the number of rows: do not divide by num_tokens",
    ),
)


def _as_number(answer):
    """A one-element tensor as the number it holds; anything else as it is."""
    return answer.item() if isinstance(answer, torch.Tensor) and answer.numel() == 1 else answer


EMPTY_ROWS = Exercise(
    "Exercise 2",
    reference=_expected_empty_rows,
    cases=lambda: _EMPTY_ROW_CASES,
    hint="row i sees i + 1 weights; all of them are dropped with probability p ** (i + 1); add over the rows",
    describe=lambda number, total, num_tokens, p: f"for num_tokens = {num_tokens}, p = {p}",
    mistakes=lambda num_tokens, p: [
        Mistake(
            lambda answer: f"expected a number, got {type(answer).__name__}",
            "return a float",
            matches=lambda answer: isinstance(answer, bool) or not isinstance(answer, (int, float)),
        ),
        *(Mistake(problem, hint, formula(num_tokens, p)) for formula, problem, hint in _EMPTY_ROW_MISTAKES),
    ],
    returned_none="return a float",
    convert=_as_number,
    atol=1e-9,
)


def exercise_2(expected_empty_rows) -> bool:
    """``expected_empty_rows(num_tokens, p)``: expected number of causal attention rows dropout empties."""
    return EMPTY_ROWS.check(expected_empty_rows)
