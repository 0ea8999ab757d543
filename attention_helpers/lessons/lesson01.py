"""Checks for lesson 01 (embeddings and dot products): the reader's matrix of cosine similarities, each token's
most similar other token, and what scaling every embedding does to dot products and cosines.

The references come from PyTorch's ``cosine_similarity``; the hidden inputs are random ``(num_tokens, d)``
tensors with odd ``num_tokens != d`` and rows of very different lengths, so that ranking by dot product and by
cosine disagree.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._checks import shape_str
from . import Exercise, Mistake, correct, hidden_generator, not_answered, not_yet, run_candidate

SEED = 101

COSINE_HINT = "divide every row by its length, x.norm(dim=-1, keepdim=True); then one matrix product does the rest"
NEAREST_HINT = (
    "compute the cosine matrix, hide each token's own entry on the diagonal (fill it with -inf), "
    "then take argmax along each row"
)

IN_PLACE_HINT = (
    "the caller's embeddings must stay as they were: x / x.norm(...) builds a new tensor, x /= ... or "
    "x.fill_diagonal_(...) writes into x"
)


def cosine_matrix_reference(x: torch.Tensor) -> torch.Tensor:
    """``(num_tokens, num_tokens)`` cosine similarities between every pair of rows of ``x`` ``(num_tokens, d)``."""
    return F.cosine_similarity(x[:, None, :], x[None, :, :], dim=-1)


def _hidden_inputs(generator: torch.Generator) -> list[torch.Tensor]:
    """Random ``(num_tokens, d)`` inputs of odd sizes, rows of lengths from about 0.2 to 5."""
    inputs = []
    for n, d in ((7, 4), (5, 9), (11, 3), (1, 5)):
        directions = torch.randn(n, d, generator=generator)
        lengths = 0.2 + 5 * torch.rand(n, 1, generator=generator)
        inputs.append(directions / directions.norm(dim=-1, keepdim=True) * lengths)
    return inputs


def _cosine_mistakes(x: torch.Tensor) -> list[Mistake]:
    """The named mistakes of exercise 1 on one hidden input."""
    lengths = x.norm(dim=-1, keepdim=True)
    d = x.shape[1]
    return [
        Mistake(
            lambda answer: f"your matrix has shape {shape_str(answer.shape)}, one row and column per coordinate",
            "compare tokens (rows), not coordinates: the result is (num_tokens, num_tokens), like x @ x.T",
            matches=lambda answer: isinstance(answer, torch.Tensor) and answer.shape == (d, d) and d != len(x),
        ),
        Mistake("these are the dot products", "the cosine divides each dot product by both vectors' lengths", x @ x.T),
        Mistake(
            "only the rows were divided by their lengths",
            "divide both factors: unit = x / x.norm(dim=-1, keepdim=True), then unit @ unit.T",
            (x / lengths) @ x.T,
        ),
        Mistake(
            "you divided by the squared length of the query only",
            "the cosine divides by |a| times |b|, the lengths of both rows",
            x @ x.T / lengths**2,
        ),
        Mistake(
            "you divided by the length of each column (dim=0)",
            "a token's length is the norm of its row: x.norm(dim=-1, keepdim=True)",
            (x / x.norm(dim=0, keepdim=True)) @ (x / x.norm(dim=0, keepdim=True)).T,
        ),
    ]


COSINE = Exercise(
    "Exercise 1",
    reference=cosine_matrix_reference,
    cases=lambda: [(x,) for x in _hidden_inputs(hidden_generator(SEED))],
    hint=COSINE_HINT,
    describe=lambda number, total, x: f"on a hidden input of shape {shape_str(x.shape)}",
    mistakes=_cosine_mistakes,
    done=" on all {n} hidden inputs",
    returned_none="return the matrix",
    in_place_hint=IN_PLACE_HINT,
)


def exercise_1(cosine_matrix) -> bool:
    """``cosine_matrix(x)``: ``(num_tokens, d)`` -> ``(num_tokens, num_tokens)`` cosine similarities."""
    return COSINE.check(cosine_matrix)


def most_similar_reference(x: torch.Tensor) -> torch.Tensor:
    """``(num_tokens,)`` index of each row's most similar *other* row by cosine similarity (loops, the obvious
    way); needs ``num_tokens >= 2``."""
    cosines = cosine_matrix_reference(x)
    best = []
    for i in range(len(x)):
        others = [j for j in range(len(x)) if j != i]
        best.append(max(others, key=lambda j: cosines[i, j].item()))
    return torch.tensor(best)


def _as_indices(answer) -> torch.Tensor | None:
    try:
        indices = torch.as_tensor(answer)
    except (TypeError, ValueError, RuntimeError):
        return None
    if indices.is_floating_point() or indices.dtype == torch.bool:
        return None
    return indices.long()


def _describe(answer) -> str:
    if isinstance(answer, torch.Tensor):
        return f"a tensor of dtype {answer.dtype}"
    return type(answer).__name__


def exercise_2(most_similar) -> bool:
    """``most_similar(x)``: for each row of ``x`` ``(num_tokens, d)``, the index of the most similar other row."""
    name = "Exercise 2"
    if most_similar is None:
        return not_answered(name)
    if not callable(most_similar):
        return not_yet(name, f"expected a function, got {type(most_similar).__name__}", "define it with def")
    cases = [x for x in _hidden_inputs(hidden_generator(SEED + 1)) if len(x) >= 2]
    for x in cases:
        case = f"on a hidden input of shape {shape_str(x.shape)}"
        ran, answer = run_candidate(
            name, most_similar, x.clone(), hint=NEAREST_HINT, case=case, in_place_hint=IN_PLACE_HINT
        )
        if not ran:
            return False
        if answer is None:
            return not_yet(name, f"your function returned None {case}", "return one index per token")
        indices = _as_indices(answer)
        if indices is None:
            return not_yet(
                name,
                f"expected integer indices {case}, got {_describe(answer)}",
                "argmax returns the indices; return them as a tensor (or a list) of integers",
            )
        expected = most_similar_reference(x)
        if indices.shape != expected.shape:
            return not_yet(
                name,
                f"expected {len(x)} indices (one per token) {case}, got shape {shape_str(indices.shape)}",
                "take argmax along each row (dim=-1)",
            )
        if torch.equal(indices, torch.arange(len(x))):
            return not_yet(
                name,
                f"every token is its own best match {case}",
                "a token's cosine with itself is 1: fill the diagonal with -inf before argmax",
            )
        by_dot = (x @ x.T).fill_diagonal_(float("-inf")).argmax(dim=-1)
        if torch.equal(indices, by_dot) and not torch.equal(by_dot, expected):
            return not_yet(
                name,
                f"you ranked by dot product {case}",
                "the dot product favours long vectors; rank by cosine similarity, which ignores lengths",
            )
        by_min = cosine_matrix_reference(x).fill_diagonal_(float("inf")).argmin(dim=-1)
        if torch.equal(indices, by_min):
            return not_yet(name, f"you picked the least similar token {case}", "argmax, not argmin")
        if not torch.equal(indices, expected):
            wrong = int((indices != expected).sum())
            return not_yet(name, f"{wrong} of {len(x)} indices are wrong {case}", NEAREST_HINT)
    return correct(name, f" on all {len(cases)} hidden inputs")


def exercise_3(scale_factors) -> bool:
    """``scale_factors(c)`` -> (the factor by which every dot product changes, the factor by which every cosine
    similarity changes) when every embedding is multiplied by the number ``c != 0``. Judged by the experiment."""
    name = "Exercise 3"
    hint = "a · b adds the products a_k b_k, and each of them gets a factor c from a and one from b"
    if scale_factors is None:
        return not_answered(name)
    if not callable(scale_factors):
        return not_yet(name, f"expected a function, got {type(scale_factors).__name__}", "define it with def")
    x = _hidden_inputs(hidden_generator(SEED + 2))[0].double()
    for c in (3.0, 0.5, -2.0, -1.0):
        case = f"for c = {c:g}"
        dots = ((c * x) @ (c * x).T / (x @ x.T)).mean().item()
        cosines = (cosine_matrix_reference(c * x) / cosine_matrix_reference(x)).mean().item()
        ran, answer = run_candidate(name, scale_factors, c, hint=hint, case=case)
        if not ran:
            return False
        if answer is None:
            return not_yet(name, f"your function returned None {case}", "return a pair of numbers")
        try:
            dot_factor, cosine_factor = (float(a) for a in answer)
        except (TypeError, ValueError):
            return not_yet(name, f"expected a pair of numbers {case}, got {answer!r}", "return two numbers")
        if abs(dot_factor - dots) > 1e-6:
            if abs(dot_factor - c) < 1e-6:
                return not_yet(name, f"the dot products do not change by c {case}", hint)
            if abs(dot_factor + dots) < 1e-6:
                return not_yet(name, f"the dot products keep their sign {case}", "(-a) · (-b) = a · b")
            return not_yet(name, f"the dot products do not change by {dot_factor:g} {case}", hint)
        if abs(cosine_factor - cosines) > 1e-6:
            if abs(cosine_factor - dots) < 1e-6:
                return not_yet(
                    name,
                    f"the cosines do not change like the dot products {case}",
                    "the cosine divides the dot product by both lengths, and each length grows by |c|",
                )
            if abs(cosine_factor + cosines) < 1e-6:
                return not_yet(
                    name,
                    f"the cosines keep their sign {case}",
                    "both vectors flip: the angle between them stays the same",
                )
            return not_yet(name, f"the cosines do not change by {cosine_factor:g} {case}", "direction, not length")
    return correct(name, " for positive and negative factors")
