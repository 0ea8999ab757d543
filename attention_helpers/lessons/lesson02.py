"""Checks for lesson 02 (softmax and context vectors): the reader's stable softmax with a temperature, context
vectors for a batch of sequences, and a prediction about shifted and scaled scores.

References: the package's :func:`~attention_helpers.functional.softmax_stable`, on hidden scores of several
shapes that overflow ``exp`` (scores in the hundreds), hold ``-inf`` entries, and have one row far below another.
"""

from __future__ import annotations

import torch

from .._checks import shape_str
from ..functional import softmax_naive, softmax_stable, softmax_with_temperature
from . import Forbidden, compare, correct, hidden_generator, not_answered, not_yet, run_candidate

SEED = 202

SOFTMAX_HINT = (
    "divide x by the temperature, subtract its maximum along dim (x.amax(dim=dim, keepdim=True)), "
    "take torch.exp, then divide by the sum along dim (keepdim=True)"
)
# Exercise 1 asks for a softmax: the answer may not call one.
SOFTMAX_FORBIDDEN = Forbidden(
    {"softmax": "a softmax of PyTorch's (torch.softmax, x.softmax or F.softmax)"},
    (
        (softmax_stable, "ah.softmax_stable"),
        (softmax_with_temperature, "ah.softmax_with_temperature"),
        (softmax_naive, "ah.softmax_naive"),
    ),
    "write the softmax yourself from torch.exp, a maximum (x.amax) and a sum",
)

CONTEXT_HINT = (
    "scores = x @ x.transpose(-2, -1); weights = softmax over the last dim; context = weights @ x "
    "(transpose(-2, -1) swaps the last two axes of a batch, where .T would reverse all three)"
)


def _softmax_cases(generator: torch.Generator) -> list[tuple[torch.Tensor, int, float]]:
    """(x, dim, temperature): large scores, -inf entries, rows far apart, several dims and temperatures."""
    big = 300 * torch.randn(5, 7, generator=generator)
    big[1] -= 3000  # a row far below the others: subtracting the tensor's global maximum underflows it
    with_inf = 4 * torch.randn(3, 9, generator=generator)
    with_inf[0, 2] = with_inf[2, 5] = with_inf[2, 0] = float("-inf")
    cube = 50 * torch.randn(2, 5, 3, generator=generator)
    return [
        (big, -1, 1.0),
        (big, 0, 1.0),
        (with_inf, -1, 1.0),
        (big, -1, 0.5),
        (with_inf, 1, 3.0),
        (cube, 1, 2.0),
        (cube, -1, 0.25),
    ]


def _softmax_mistakes(x, dim, temperature):
    """Outputs of plausible mistakes, each with (problem, hint)."""
    with torch.no_grad():
        scaled = x / temperature
        global_shift = torch.exp(scaled - scaled.max())
        other_dim = 0 if dim in (-1, x.dim() - 1) else -1
        naive = torch.exp(scaled)
        mistakes = [
            (
                naive / naive.sum(dim=dim, keepdim=True),
                (
                    "your output holds nan: exp of a large score overflows to inf, and inf / inf is nan",
                    "subtract the maximum along dim before torch.exp; softmax only sees differences between scores",
                ),
            ),
            (
                softmax_stable(x, dim) if temperature != 1 else None,
                ("the temperature is ignored", "divide the scores by the temperature before the softmax"),
            ),
            (
                softmax_stable(x * temperature, dim) if temperature != 1 else None,
                ("you multiplied by the temperature", "divide the scores by it: T < 1 sharpens, T > 1 flattens"),
            ),
            (
                softmax_stable(scaled, other_dim),
                (f"the slices along dim={other_dim} sum to 1, not those along dim={dim}", "normalise along dim"),
            ),
            (
                global_shift / global_shift.sum(dim=dim, keepdim=True),
                (
                    "you subtracted the maximum of the whole tensor, so a slice far below it underflows to 0/0",
                    "subtract each slice's own maximum: x.amax(dim=dim, keepdim=True)",
                ),
            ),
            (
                torch.exp(scaled - scaled.amax(dim=dim, keepdim=True)),
                ("the slices do not sum to 1", "divide by the sum of the exponentials along dim"),
            ),
        ]
    return [(wrong, why) for wrong, why in mistakes if wrong is not None]


def exercise_1(my_softmax) -> bool:
    """``my_softmax(x, dim, temperature)``: softmax(x / temperature) along ``dim``, stable for large scores."""
    name = "Exercise 1"
    if my_softmax is None:
        return not_answered(name)
    if not callable(my_softmax):
        return not_yet(name, f"expected a function, got {type(my_softmax).__name__}", "define it with def")
    cases = _softmax_cases(hidden_generator(SEED))
    for x, dim, temperature in cases:
        case = f"on hidden scores of shape {shape_str(x.shape)} with dim={dim}, temperature={temperature}"
        ran, answer = run_candidate(
            name, my_softmax, x.clone(), dim, temperature, hint=SOFTMAX_HINT, case=case, forbidden=SOFTMAX_FORBIDDEN
        )
        if not ran:
            return False
        if answer is None:
            return not_yet(name, f"your function returned None {case}", "return the weights")
        expected = softmax_stable(x / temperature, dim)
        if isinstance(answer, torch.Tensor) and answer.shape == expected.shape:
            for wrong, (problem, hint) in _softmax_mistakes(x, dim, temperature):
                if compare(answer, wrong) is None and compare(wrong, expected) is not None:
                    return not_yet(name, f"{problem} {case}", hint)
            if torch.isnan(answer).any():  # the expected weights hold no nan here
                return not_yet(name, f"your output holds nan {case}", SOFTMAX_HINT)
        problem = compare(answer, expected, atol=1e-5)
        if problem is not None:
            return not_yet(name, f"{problem} {case}", SOFTMAX_HINT)
    return correct(name, f" on all {len(cases)} hidden cases")


def context_vectors_reference(x: torch.Tensor) -> torch.Tensor:
    """``(batch, num_tokens, d)`` -> ``(batch, num_tokens, d)``: each token's weighted mix of all tokens, with
    dot-product scores and a softmax over the keys."""
    weights = softmax_stable(x @ x.transpose(-2, -1), dim=-1)
    return weights @ x


def exercise_2(context_vectors) -> bool:
    """``context_vectors(x)``: ``(batch, num_tokens, d)`` -> ``(batch, num_tokens, d)``."""
    name = "Exercise 2"
    if context_vectors is None:
        return not_answered(name)
    if not callable(context_vectors):
        return not_yet(name, f"expected a function, got {type(context_vectors).__name__}", "define it with def")
    generator = hidden_generator(SEED + 1)
    cases = [torch.randn(b, n, d, generator=generator) for b, n, d in ((1, 7, 4), (3, 5, 2), (2, 9, 5))]
    for x in cases:
        case = f"on a hidden batch of shape {shape_str(x.shape)}"
        ran, answer = run_candidate(name, context_vectors, x.clone(), hint=CONTEXT_HINT, case=case)
        if not ran:
            return False
        if answer is None:
            return not_yet(name, f"your function returned None {case}", "return the context vectors")
        expected = context_vectors_reference(x)
        if isinstance(answer, torch.Tensor) and answer.shape == expected.shape:
            scores = x @ x.transpose(-2, -1)
            mistakes = [
                (
                    softmax_stable(scores, dim=-2) @ x,
                    "the softmax runs over the queries (dim=-2 or dim=1)",
                    "each query's weights, a row, must sum to 1: softmax over dim=-1",
                ),
                (scores @ x, "the scores are not normalised", "turn the scores into weights with a softmax first"),
                (
                    softmax_stable(scores / x.shape[-1] ** 0.5, dim=-1) @ x,
                    "you divided the scores by sqrt(d)",
                    "this exercise uses the plain dot products as scores, as the lesson's section on context vectors "
                    "does: the scaling by sqrt(d_k) comes with trainable keys, in lesson 03",
                ),
                (
                    (scores / scores.sum(dim=-1, keepdim=True)) @ x,
                    "you divided the scores by their sum",
                    "use the softmax: dividing by the sum fails for negative scores",
                ),
            ]
            for wrong, problem, hint in mistakes:
                if compare(answer, wrong) is None:
                    return not_yet(name, f"{problem} {case}", hint)
        if isinstance(answer, torch.Tensor) and answer.shape == (x.shape[0], x.shape[1], x.shape[1]):
            return not_yet(
                name,
                f"you returned the attention weights {case}",
                "multiply the weights by the inputs to mix the token vectors",
            )
        problem = compare(answer, expected)
        if problem is not None:
            return not_yet(name, f"{problem} {case}", CONTEXT_HINT)
    return correct(name, f" on all {len(cases)} hidden batches")


def _describe(new: torch.Tensor, old: torch.Tensor) -> str:
    if torch.allclose(new, old, atol=1e-6):
        return "same"
    return "sharper" if new.max() > old.max() else "flatter"


def exercise_3(answer) -> bool:
    """``answer``: a tuple of three words ("same", "sharper" or "flatter") for scores + 10, scores * 10 and
    scores / 10, judged by running the experiment on hidden scores."""
    name = "Exercise 3"
    if answer is None:
        return not_answered(name)
    words = ("same", "sharper", "flatter")
    if not isinstance(answer, (tuple, list)) or len(answer) != 3 or any(a not in words for a in answer):
        return not_yet(
            name,
            f"expected a tuple of three words, each one of {', '.join(words)}; got {answer!r}",
            'for example ("flatter", "same", "sharper")',
        )
    scores = 2 * torch.randn(7, generator=hidden_generator(SEED + 2))
    weights = softmax_stable(scores)
    expected = (
        _describe(softmax_stable(scores + 10), weights),
        _describe(softmax_stable(scores * 10), weights),
        _describe(softmax_stable(scores / 10), weights),
    )
    hints = (
        "softmax only sees the differences between scores: exp(x + 10) = exp(x) * exp(10), and the factor cancels",
        "multiplying by 10 is a temperature of 0.1: every difference between scores grows tenfold",
        "dividing by 10 is a temperature of 10: every difference between scores shrinks tenfold",
    )
    changes = ("adding 10 to every score", "multiplying every score by 10", "dividing every score by 10")
    for given, right, hint, change in zip(answer, expected, hints, changes, strict=True):
        if given != right:
            return not_yet(name, f'{change} does not make the weights "{given}"', hint)
    return correct(name)
