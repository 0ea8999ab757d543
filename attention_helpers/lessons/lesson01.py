"""Lesson 01's checks: a matrix of cosine similarities, each token's most similar other token, and what scaling
every embedding does to dot products and cosines (hidden rows of very different lengths, so that ranking by dot
product and by cosine disagree)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._checks import shape_str
from . import Exercise, Mistake, WrongFormError, hidden_generator, two_numbers

SEED = 101


def cosine_matrix_reference(x: torch.Tensor) -> torch.Tensor:
    """``(num_tokens, num_tokens)`` cosine similarities between every pair of rows of ``x`` ``(num_tokens, d)``."""
    return F.cosine_similarity(x[:, None, :], x[None, :, :], dim=-1)


def _hidden_inputs(generator: torch.Generator, sizes=((7, 4), (5, 9), (11, 3), (1, 5))) -> list[torch.Tensor]:
    """Random ``(num_tokens, d)`` inputs of odd ``sizes``, rows of lengths from about 0.2 to 5."""
    return [
        F.normalize(torch.randn(n, d, generator=generator), dim=-1) * (0.2 + 5 * torch.rand(n, 1, generator=generator))
        for n, d in sizes
    ]


def _cosine_mistakes(x: torch.Tensor) -> list[Mistake]:
    lengths, d = x.norm(dim=-1, keepdim=True), x.shape[1]
    by_column = x / x.norm(dim=0, keepdim=True)
    both = "the cosine divides each dot product by the lengths of both rows"
    return [
        Mistake(
            lambda answer: f"your matrix has shape {shape_str(answer.shape)}, one row and column per coordinate",
            "compare tokens (rows), not coordinates: the result has one row and one column per token",
            matches=lambda answer: answer.shape == (d, d) and d != len(x),
        ),
        Mistake("these are the dot products", both, x @ x.T),
        Mistake("only the rows were divided by their lengths", both, (x / lengths) @ x.T),
        Mistake("you divided by the squared length of the query only", both, x @ x.T / lengths**2),
        Mistake("you divided by column lengths (dim=0)", "a token's length is its row's", by_column @ by_column.T),
    ]


# ``cosine_matrix(x)``: ``(num_tokens, d)`` -> ``(num_tokens, num_tokens)`` cosine similarities, without a loop.
exercise_1 = Exercise(
    "Exercise 1",
    reference=cosine_matrix_reference,
    cases=lambda: [(x,) for x in _hidden_inputs(hidden_generator(SEED))],
    hint="the cosine of two rows is their dot product divided by both of their lengths: once every row is divided by "
    "its own length, one matrix product gives every pair (reread 'Scores for every pair')",
    mistakes=_cosine_mistakes,
    done=" on all {n} hidden inputs",
    rule="the exercise asks for the whole matrix without a Python loop: one matrix product compares every pair of "
    "rows at once (reread 'Scores for every pair')",
    loop_free=lambda: [(torch.randn(n, 4, generator=hidden_generator(SEED + 9)),) for n in (3, 40)],
).check


def _as_indices(answer) -> torch.Tensor:
    try:
        indices = torch.as_tensor(answer)
    except (TypeError, ValueError, RuntimeError):
        indices = None
    if indices is None or indices.is_floating_point() or indices.dtype == torch.bool:
        got = f"a tensor of dtype {answer.dtype}" if isinstance(answer, torch.Tensor) else type(answer).__name__
        raise WrongFormError(f"expected integer indices, got {got}", "return a tensor or a list of integers")
    return indices.long()


def _nearest_mistakes(x: torch.Tensor) -> list[Mistake]:
    cosines, dots, inf = cosine_matrix_reference(x), (x @ x.T).fill_diagonal_(-torch.inf), torch.inf
    few = "a few tokens are tokens too: with two, each one's most similar other token is the other one"
    return [
        Mistake("every token is its own best match", "its own cosine is 1: hide the diagonal", torch.arange(len(x))),
        Mistake("you ranked by dot product", "it favours long vectors; rank by cosine", dots.argmax(dim=-1)),
        Mistake("you picked the least similar one", "the largest cosine wins", cosines.fill_diagonal_(inf).argmin(-1)),
        *[Mistake(f"with only {len(x)} tokens, a token's pick is wrong", few, matches=lambda a: True)] * (len(x) < 4),
    ]


# ``most_similar(x)``: for each row of ``x`` ``(num_tokens, d)``, the index of the most similar other row.
exercise_2 = Exercise(
    "Exercise 2",
    reference=lambda x: cosine_matrix_reference(x).fill_diagonal_(-torch.inf).argmax(dim=-1),
    cases=lambda: [(x,) for x in _hidden_inputs(hidden_generator(SEED + 1), ((7, 4), (5, 9), (11, 3), (2, 6), (3, 4)))],
    hint="rank the other rows by cosine similarity; a row's cosine with itself is always the largest, so keep it out "
    "of the running before picking each row's best (reread 'Exercise 1')",
    mistakes=_nearest_mistakes,
    done=" on all {n} hidden inputs",
    returned_none="return one index per token",
    convert=_as_indices,
).check

SCALE_HINT = "a · b adds the products a_k b_k, and each of them gets a factor c from a and one from b"


def _scale_factors_reference(c: float) -> tuple[float, float]:
    """(the mean factor by which the dot products change, the cosines') when every hidden embedding is times ``c``."""
    x = _hidden_inputs(hidden_generator(SEED + 2))[0].double()
    dots = ((c * x) @ (c * x).T / (x @ x.T)).mean().item()
    return dots, (cosine_matrix_reference(c * x) / cosine_matrix_reference(x)).mean().item()


def _scale_mistakes(c: float) -> list[Mistake]:
    dots, cosines = _scale_factors_reference(c)
    lengths = "the cosine divides the dot product by both lengths, and each length grows by |c|"
    return [
        Mistake("the dot products do not change by c", SCALE_HINT, c, item=0),
        Mistake("the dot products keep their sign", "(-a) · (-b) = a · b", -dots, item=0),
        Mistake(lambda answer: f"the dot products do not change by {answer[0]:g}", SCALE_HINT, item=0),
        Mistake("the cosines do not change like the dot products", lengths, dots, item=1),
        Mistake("the cosines keep their sign", "both vectors flip: the angle between them stays", -cosines, item=1),
        Mistake(lambda answer: f"the cosines do not change by {answer[1]:g}", "direction, not length", item=1),
    ]


# ``scale_factors(c)`` -> (the factor for every dot product, the one for every cosine) when embeddings are times c.
exercise_3 = Exercise(
    "Exercise 3",
    reference=_scale_factors_reference,
    cases=lambda: [(c,) for c in (3.0, 0.5, -2.0, -1.0)],
    hint=SCALE_HINT,
    describe=lambda number, total, c: f"for c = {c:g}",
    mistakes=_scale_mistakes,
    done=" for positive and negative factors",
    returned_none="return a pair of numbers",
    convert=lambda answer: two_numbers(answer, f"expected a pair of numbers, got {answer!r}", "return two numbers"),
    atol=1e-6,
).check
