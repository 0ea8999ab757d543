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
import torch.nn.functional as F

from ..functional import causal_mask
from . import Exercise, Forbidden, Mistake, WrongFormError, as_number, hidden_generator, is_number

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


def _dropout_cases() -> list[tuple[torch.Tensor, float, bool, int]]:
    """(x, p, training, calls): training mode on hidden tensors, then evaluation mode and p = 0 (which return x), two
    calls (two masks) and p = 1 (zeros)."""
    generator = hidden_generator(SEED)
    small = _hidden_tensor(generator, 1, 7, 5)  # batch of 1, odd sizes
    large = _hidden_tensor(generator, 301, 199)  # enough entries to measure the fraction dropped
    return [
        (large, 0.3, True, 1),
        (large, 0.75, True, 1),
        (small, 0.2, True, 1),
        (small, 0.4, False, 1),
        (small, 0.0, True, 1),
        (large, 0.3, True, 2),
        (small, 1.0, True, 1),
    ]


def _describe_dropout(number, total, x, p, training, calls) -> str:
    if calls == 2:
        return f"on two calls with p = {p}"
    if not training:
        return "with training=False"
    return f"with p = {p:g}" if p in (0.0, 1.0) else f"on a hidden tensor of shape {tuple(x.shape)} with p = {p}"


def _calls(my_dropout, x: torch.Tensor, p: float, training: bool, calls: int):
    """The reader's dropout on x, in float64: one output, or (with ``calls`` 2) two stacked."""
    outputs = []
    for _ in range(calls):
        out = my_dropout(x, p, training)
        if out is None:
            return None
        if not isinstance(out, torch.Tensor):
            raise WrongFormError(f"expected a tensor, got {type(out).__name__}", "return a tensor")
        if out.shape != x.shape:
            raise WrongFormError(
                f"the output has shape {tuple(out.shape)}, expected {tuple(x.shape)}", "keep x's shape"
            )
        outputs.append(out.detach().double())  # compared in float64, whatever dtype the reader returned
    return outputs[0] if calls == 1 else torch.stack(outputs)


def _fraction_off(out: torch.Tensor, p: float) -> bool:
    """Whether the fraction dropped is more than five standard deviations from p (measured on large tensors)."""
    return out.numel() > 1000 and abs((out == 0).double().mean().item() - p) > _binomial_band(p, out.numel())


def _dropout_differs(out: torch.Tensor, case: tuple) -> str | None:
    """What is wrong with the output on ``case`` = (x, p, training, calls), or None: judged by properties that hold
    for every mask."""
    x, p, training, calls = case
    if calls == 2:
        return "two calls dropped exactly the same entries" if torch.equal(out[0] == 0, out[1] == 0) else None
    if not training or p == 0:
        return None if torch.allclose(out, x.double()) else "the output differs from x"
    if p == 1:
        if torch.equal(out, torch.zeros_like(out)):
            return None
        return "the output holds nan or inf" if not torch.isfinite(out).all() else "the output is not all zeros"
    if torch.isnan(out).any():
        return "the output holds nan"
    if _fraction_off(out, p):
        fraction, band = (out == 0).double().mean().item(), _binomial_band(p, out.numel())
        return f"you dropped {fraction:.1%} of the entries, expected about {p:.0%} (within {band:.1%})"
    kept = out != 0
    if not torch.allclose(out[kept], x.double()[kept] / (1 - p), rtol=1e-5, atol=1e-6):
        return "a surviving entry is not x / (1 - p)"
    return None


def _own_hint(p: float, training: bool, calls: int) -> str | None:
    """The hint for a case that is not plain training mode (two calls, evaluation mode, p = 0 or 1), else None."""
    if calls == 2:
        return "draw a new random mask at every call; do not seed or store the mask inside the function"
    if not training:
        return "in evaluation mode dropout does nothing: return x unchanged"
    if p == 0:
        return "with p = 0 no entry is dropped"
    if p == 1:
        return "with p = 1 every entry is dropped: return zeros (x * 0) rather than dividing by 1 - p = 0"
    return None


def _dropout_mistakes(x: torch.Tensor, p: float, training: bool, calls: int) -> list[Mistake]:
    """The named mistakes of exercise 1 on one case: what is wrong with its own hint, or, in training mode, the
    plausible mistakes."""
    hint = _own_hint(p, training, calls)
    if hint is not None:
        return [Mistake(lambda out: _dropout_differs(out, (x, p, training, calls)), hint, matches=lambda out: True)]
    x = x.double()

    def survivors_are(factor):
        return lambda out: (
            not _fraction_off(out, p) and torch.allclose(out[out != 0], x[out != 0] * factor, rtol=1e-5, atol=1e-6)
        )

    def reversed_test(out):
        fraction = (out == 0).double().mean().item()
        return out.numel() > 1000 and abs(fraction - (1 - p)) <= _binomial_band(p, out.numel())

    def whole_rows(out):
        dropped = out == 0
        return _fraction_off(out, p) and bool((dropped.all(dim=-1) | (~dropped).all(dim=-1)).all())

    return [
        Mistake("the output holds nan", DROPOUT_HINT, matches=lambda out: bool(out.isnan().any())),
        Mistake(
            lambda out: (
                f"you dropped {(out == 0).double().mean().item():.1%} of the entries: you keep an entry with "
                "probability p and drop it with probability 1 - p"
            ),
            "the keep/drop test is reversed: an entry is dropped where its random number is below p",
            matches=reversed_test,
        ),
        Mistake(
            "each row is dropped or kept as a whole",
            "every entry needs a random number of its own: torch.rand_like(x), not one per row",
            matches=whole_rows,
        ),
        Mistake(
            "the surviving entries equal x: they are not scaled",
            "divide the survivors by 1 - p, so that each entry keeps its expected value x",
            matches=survivors_are(1.0),
        ),
        Mistake(
            "the surviving entries are x / p",
            "the survivors are a fraction 1 - p of the entries, so they are divided by 1 - p, not p",
            matches=survivors_are(1 / p),
        ),
        Mistake(
            "the surviving entries are x * (1 - p)",
            "divide by 1 - p instead of multiplying: the survivors must grow to make up for the zeros",
            matches=survivors_are(1 - p),
        ),
    ]


# The exercise asks for dropout itself: the answer may not call torch's (nn.Dropout calls F.dropout, which calls
# torch.dropout).
DROPOUT_FORBIDDEN = Forbidden(
    {"dropout": "torch's dropout"},
    ((F.dropout, "F.dropout (what nn.Dropout runs)"),),
    "draw the mask yourself: torch.rand_like(x) >= p keeps each entry with probability 1 - p",
)

DROPOUT = Exercise(
    "Exercise 1",
    reference=lambda *case: case,
    cases=_dropout_cases,
    run=_calls,
    hint=DROPOUT_HINT,
    describe=_describe_dropout,
    mistakes=_dropout_mistakes,
    done=" on every hidden tensor, in training and evaluation mode",
    returned_none="return the tensor after dropout",
    in_place_hint="build a new tensor (torch.where, or x * mask / (1 - p)) instead of writing into x",
    differ=_dropout_differs,
    forbidden=DROPOUT_FORBIDDEN,
)


def exercise_1(my_dropout) -> bool:
    """``my_dropout(x, p, training)``: inverted dropout, judged on hidden tensors. The check seeds torch's global
    generator inside ``fork_rng``: the verdict repeats, and the reader's random state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        return DROPOUT.check(my_dropout)


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
            matches=lambda answer: not is_number(answer),
        ),
        *(Mistake(problem, hint, formula(num_tokens, p)) for formula, problem, hint in _EMPTY_ROW_MISTAKES),
    ],
    returned_none="return a float",
    convert=as_number,
    atol=1e-5,  # a float32 sum is right to about 1e-7 of it; every named mistake is off by far more
)


# ``expected_empty_rows(num_tokens, p)``: expected number of causal attention rows dropout empties.
exercise_2 = EMPTY_ROWS.check
