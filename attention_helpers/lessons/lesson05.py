"""Lesson 05's checks: dropout, judged by properties that hold for every mask (each entry 0 or ``x / (1 - p)``, a
fraction near ``p`` dropped independently, a new mask at each call, torch's seed repeating it), never by one mask;
and the expected number of causal attention rows dropout empties."""

from __future__ import annotations

import math

import torch

from ..functional import causal_mask
from . import DROPOUT_KERNELS, Exercise, Mistake, WrongFormError, as_number, hidden_generator, plain

SEED = 505


def _hidden_tensor(generator: torch.Generator, *shape: int) -> torch.Tensor:
    """Random values of either sign, none of them near 0, so that a 0 in the output means a dropped entry."""
    magnitude = 0.5 + torch.rand(shape, generator=generator)
    sign = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0)
    return magnitude * sign


def _band(p: float, n: int) -> float:
    """Five standard deviations of the fraction of ``n`` events of probability ``p``."""
    return 5 * math.sqrt(p * (1 - p) / n)


def _dropout_cases() -> list[tuple[torch.Tensor, float, bool, int]]:
    """(x, p, training, seed): large tensors (enough entries to measure the fraction dropped and its independence)
    at several seeds and rates, a batch of 1, evaluation mode, p = 0 and p = 1."""
    generator = hidden_generator(SEED)
    small, large = (_hidden_tensor(generator, *shape) for shape in ((1, 7, 5), (6, 101, 97)))
    training = [(large, 0.3, True, 1), (large, 0.75, True, 2), (large, 0.5, True, 3), (small, 0.2, True, 4)]
    return [*training, (small, 0.4, False, 5), (small, 0.0, True, 6), (small, 1.0, True, 7)]


def _calls(my_dropout, x: torch.Tensor, p: float, training: bool, seed: int):
    """The reader's dropout on x six times, in float64: after torch.manual_seed(seed), four times more, and after
    torch.manual_seed(seed) once more; the reader's random state is put back afterwards."""
    outputs = []
    with torch.random.fork_rng(devices=[]):
        for reseed in (True, False, False, False, False, True):
            if reseed:
                torch.manual_seed(SEED + seed)
            out = plain(my_dropout(x, p, training))
            if out is None:
                return None
            if not isinstance(out, torch.Tensor) or out.shape != x.shape:
                got = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
                raise WrongFormError(f"expected a tensor of shape {tuple(x.shape)}, got {got}", "keep x's shape")
            outputs.append(out.double())
    return torch.stack(outputs)


def _joint_drops(dropped: torch.Tensor, p: float) -> str | None:
    """The axis whose neighbours are dropped together most unlike p * p (a mask drawn once per row, column or
    batch, or a pattern), or None when every axis is within five standard deviations."""
    deviations = {}
    for axis, name in enumerate(("the sequences of the batch", "neighbouring rows", "neighbouring columns")):
        pairs = dropped.narrow(axis, 0, dropped.shape[axis] - 1) & dropped.narrow(axis, 1, dropped.shape[axis] - 1)
        deviations[name] = abs(pairs.double().mean().item() - p * p) / _band(p * p, pairs.numel())
    worst = max(deviations, key=deviations.get)
    return worst if deviations[worst] > 1 else None


def _dropout_differs(outs: torch.Tensor, case: tuple) -> str | None:
    """What is wrong with the six outputs on ``case``, or None: judged by properties every mask has."""
    x, p, training, _ = case
    x = x.double()
    if not training or p == 0:
        return None if torch.allclose(outs, x.expand_as(outs)) else "the output differs from x"
    if p == 1:
        return None if torch.equal(outs, torch.zeros_like(outs)) else "the output is not all zeros"
    if torch.isnan(outs).any():
        return "the output holds nan"
    dropped = outs == 0
    if x.numel() > 1000:
        band = _band(p, x.numel())
        for was_dropped in dropped:
            fraction = was_dropped.double().mean().item()
            together = _joint_drops(was_dropped, p)
            if together is not None and abs(fraction - (1 - p)) > band:
                return f"the entries are not dropped independently: {together} share their drops"
            if abs(fraction - p) > band:  # about 1 - p: the keep/drop test is reversed
                expected = REVERSED if abs(fraction - (1 - p)) <= band < abs(p - 0.5) else f", expected about {p:.0%}"
                return f"you dropped {fraction:.1%} of the entries{expected}"
        spread = math.sqrt(x.numel() * p * (1 - p))  # of the count dropped; 5 independent counts all within 0.04
        off = (dropped[:-1].flatten(1).sum(dim=1) - p * x.numel()).abs().max().item()  # of it: once in 3e7
        if off < 0.04 * spread:
            return f"{FIXED}: within {off:.0f} of p * {x.numel()} at every call, where it should vary by {spread:.0f}"

    def survivors_are(factor: float) -> bool:
        return torch.allclose(outs[~dropped], x.expand_as(outs)[~dropped] * factor, rtol=1e-5, atol=1e-6)

    if not survivors_are(1 / (1 - p)):  # named when it is one of three slips
        slips = {"equal x: they are not scaled": 1.0, "are x / p": 1 / p, "are x * (1 - p)": 1 - p}
        return "the surviving entries " + next((s for s, f in slips.items() if survivors_are(f)), "are not x / (1 - p)")
    if torch.equal(dropped[0], dropped[1]):
        return "two calls in a row dropped exactly the same entries"
    if not torch.equal(dropped[0], dropped[-1]):
        return "with the same torch.manual_seed, two calls dropped different entries: the mask is not drawn from torch"
    return None


REVERSED = ": you keep an entry with probability p"
FIXED = "the number of entries dropped is nearly fixed, so they are not dropped independently"
_FIXES = (
    (REVERSED, "the keep/drop test is reversed: an entry is dropped with probability p, kept with probability 1 - p"),
    ("differs from x", "in evaluation mode dropout does nothing, nor does it with p = 0: return x as it is"),
    ("not all zeros", "with p = 1 every entry is dropped: return zeros, without dividing by 1 - p = 0"),
    (FIXED, "drop each entry on its own: how many are dropped must vary from call to call; never choose how many"),
    ("independently", "every entry needs a random number of its own, not one per row, column or sequence; no pattern"),
    ("surviving", "scale the survivors by 1 / (1 - p): each entry then keeps its expected value x"),
    ("two calls", "a new random mask at every call, from torch's generator: none stored, no seed inside the function"),
)


# ``my_dropout(x, p, training)``: inverted dropout, judged on hidden tensors at several seeds.
exercise_1 = Exercise(
    "Exercise 1",
    reference=lambda *case: case,
    cases=_dropout_cases,
    run=_calls,
    hint="every entry needs a random number of its own, drawn from torch's generator at each call: drop the entry with "
    "probability p, and scale the survivors so that each entry keeps its expected value (reread 'Why the survivors "
    "are scaled by 1 / (1 - p)')",
    describe=lambda number, total, x, p, training, seed: (
        f"on a hidden tensor of shape {tuple(x.shape)} with p = {p:g}" if training else "with training=False"
    ),
    mistakes=lambda *case: [  # the problem the properties found, with the idea that fixes it
        Mistake(
            lambda outs: _dropout_differs(outs, case),
            hint,
            matches=lambda outs, words=words: words in (_dropout_differs(outs, case) or ""),
        )
        for words, hint in _FIXES
    ],
    done=" on every hidden tensor, in training and evaluation mode",
    returned_none="return the tensor after dropout",
    differ=_dropout_differs,
    forbidden=DROPOUT_KERNELS,
    rule="the exercise asks you to draw the mask yourself, without nn.Dropout, F.dropout or any of torch's dropout "
    "functions (reread 'Dropout on a matrix of ones')",
).check


_EDGE_HINTS = {
    0.0: "with p = 0 no weight is dropped, so no row is ever empty",
    1.0: "with p = 1 every row is empty; a closed form that divides by 1 - p needs p = 1 on its own",
}
EMPTY_HINT = (
    "a row is emptied only when every weight it can see is dropped, each on its own, and rows see different numbers of "
    "weights; an expected count adds each row's chance of being empty (reread 'Dropout on causal attention weights')"
)


def _empty_row_mistakes(n: int, p: float) -> list[Mistake]:
    if p in _EDGE_HINTS:
        return [Mistake("your answer is right for 0 < p < 1 but not", _EDGE_HINTS[p], matches=lambda answer: True)]
    rows = [p**k for k in range(1, n + 1)]  # row k - 1 sees k weights: the chance it is empty
    kept = [(1 - p) ** k for k in range(1, n + 1)]  # the chance it keeps all k
    return [
        Mistake("you counted the first row as always empty", "row 0 sees one weight: its own", 1 + sum(rows[:-1])),
        Mistake("that is the chance that one row of all num_tokens weights is emptied", EMPTY_HINT, rows[-1]),
        Mistake("that counts one dropped weight as an empty row", EMPTY_HINT, n * p),
        Mistake(
            "that counts rows that keep all their weights", "a weight drops with probability p, not 1 - p", sum(kept)
        ),
        Mistake("that is the chance that at least one row is empty", EMPTY_HINT, 1 - math.prod(1 - r for r in rows)),
        Mistake("that is the expected fraction of empty rows", "the question asks for a number of rows", sum(rows) / n),
    ]


def _empty_rows(expected_empty_rows, num_tokens: int, p: float):
    try:
        return expected_empty_rows(num_tokens, p)
    except ZeroDivisionError:  # the closed form p (1 - p^n) / (1 - p) at p = 1
        raise WrongFormError("your code divides by zero", _EDGE_HINTS[1.0]) from None


# ``expected_empty_rows(num_tokens, p)``: expected number of causal attention rows dropout empties.
exercise_2 = Exercise(
    "Exercise 2",
    # row i sees i + 1 weights, each dropped on its own: it is emptied with probability p ** (i + 1)
    reference=lambda num_tokens, p: float((p ** (~causal_mask(num_tokens)).sum(dim=-1).double()).sum()),
    # odd and even lengths, a single token, rates that tell each wrong formula apart; p = 0 and 1 last
    cases=lambda: ((6, 0.3), (1, 0.5), (9, 0.8), (13, 0.1), (4, 0.65), (5, 0.0), (7, 1.0)),
    hint=EMPTY_HINT,
    describe=lambda number, total, num_tokens, p: f"for num_tokens = {num_tokens}, p = {p}",
    mistakes=_empty_row_mistakes,
    run=_empty_rows,
    returned_none="return a float",
    convert=as_number,
    atol=1e-5,  # a float32 sum is right to about 1e-7 of it; every named mistake is off by far more
).check
