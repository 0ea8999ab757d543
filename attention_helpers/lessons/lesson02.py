"""Lesson 02's checks: a stable softmax with a temperature, context vectors for a batch, and a prediction about
shifted and scaled scores (hidden scores that overflow ``exp``, hold ``-inf``, or have a row far below another)."""

from __future__ import annotations

import torch

from ..functional import softmax_stable
from . import ATTENTION_KERNELS, OVER_QUERIES, SOFTMAX_KERNELS, Exercise, Mistake, WrongFormError, hidden_generator

SEED = 202


def _softmax_cases(generator: torch.Generator) -> list[tuple[torch.Tensor, int, float]]:
    """(x, dim, temperature): large scores, -inf entries, rows far apart, several dims and temperatures."""
    big = 300 * torch.randn(5, 7, generator=generator)
    big[1] -= 3000  # a row far below the others: subtracting the tensor's global maximum underflows it
    with_inf = 4 * torch.randn(3, 9, generator=generator)
    with_inf[0, 2] = with_inf[2, 5] = with_inf[2, 0] = float("-inf")
    cube = 50 * torch.randn(2, 5, 3, generator=generator)
    cases = [(big, -1, 1.0), (big, 0, 1.0), (with_inf, -1, 1.0), (big, -1, 0.5), (with_inf, 1, 3.0), (cube, 1, 2.0)]
    return [*cases, (cube, -1, 0.25)]


def _softmax_mistakes(x, dim, temperature):
    scaled = x / temperature
    global_shift, naive = torch.exp(scaled - scaled.max()), torch.exp(scaled)
    other_dim = 0 if dim in (-1, x.dim() - 1) else -1
    other, shifted = softmax_stable(scaled, other_dim), scaled - scaled.amax(dim=dim, keepdim=True)
    return [
        Mistake(
            "your output holds nan: exp of a large score overflows to inf, and inf / inf is nan",
            "subtract the maximum along dim before torch.exp; softmax only sees differences between scores",
            naive / naive.sum(dim=dim, keepdim=True),
        ),
        Mistake("the temperature is ignored", "divide the scores by the temperature", softmax_stable(x, dim)),
        Mistake("you multiplied by the temperature", "divide: T < 1 sharpens", softmax_stable(x * temperature, dim)),
        Mistake(f"the slices along dim={other_dim} sum to 1, not those along dim={dim}", "normalise along dim", other),
        Mistake(
            "you subtracted the maximum of the whole tensor, so a slice far below it underflows to 0/0",
            "subtract each slice's own maximum along dim, not the maximum of the whole tensor",
            global_shift / global_shift.sum(dim=dim, keepdim=True),
        ),
        Mistake("the slices do not sum to 1", "divide by the sum of the exponentials along dim", shifted.exp()),
    ]


# ``my_softmax(x, dim, temperature)``: softmax(x / temperature) along ``dim``, stable for large scores.
exercise_1 = Exercise(
    "Exercise 1",
    reference=lambda x, dim, temperature: softmax_stable(x / temperature, dim),
    cases=lambda: _softmax_cases(hidden_generator(SEED)),
    hint="divide the scores by the temperature, shift each slice along dim by its own maximum so that no exponent is "
    "positive, exponentiate, and divide by the slice's sum (reread 'Large scores: subtract the maximum first')",
    describe=lambda n, total, x, dim, t: f"on hidden scores of shape {tuple(x.shape)}, dim={dim}, temperature={t}",
    mistakes=_softmax_mistakes,
    forbidden=SOFTMAX_KERNELS | ATTENTION_KERNELS,
    rule="the exercise asks you to build the softmax yourself from exp, a maximum and a sum, not to call one of "
    "PyTorch's (reread 'Softmax')",
    atol=1e-5,
).check


def _context_mistakes(x):
    scores = x @ x.transpose(-2, -1)
    return [
        Mistake(*OVER_QUERIES, softmax_stable(scores, dim=-2) @ x),
        Mistake("the scores are not normalised", "turn the scores into weights with a softmax first", scores @ x),
        Mistake(
            "you divided the scores by sqrt(d)",
            "use the plain dot products here: the scaling by sqrt(d_k) comes with trainable keys, in lesson 03",
            softmax_stable(scores / x.shape[-1] ** 0.5, dim=-1) @ x,
        ),
        Mistake(
            "you divided the scores by their sum",
            "a softmax: a sum fails for negative scores",
            (scores / scores.sum(-1, keepdim=True)) @ x,
        ),
        Mistake(
            "you returned the attention weights",
            "mix the token vectors with these weights",
            matches=lambda answer: answer.shape == scores.shape,
        ),
    ]


# ``context_vectors(x)``: ``(batch, num_tokens, d)`` -> ``(batch, num_tokens, d)``.
exercise_2 = Exercise(
    "Exercise 2",
    reference=lambda x: softmax_stable(x @ x.transpose(-2, -1), dim=-1) @ x,
    cases=lambda: [
        (torch.randn(shape, generator=generator),)
        for generator in [hidden_generator(SEED + 1)]
        for shape in ((1, 7, 4), (3, 5, 2), (2, 9, 5))
    ],
    hint="within each sequence: the dot products of every pair of tokens, a softmax over the keys for each query, "
    "then each query's weighted sum of the token vectors; the transpose must swap only the last two axes of a batch "
    "(reread 'All six context vectors at once')",
    mistakes=_context_mistakes,
    done=" on all {n} hidden batches",
    forbidden=ATTENTION_KERNELS,
    rule="the exercise asks you to compute the scores, softmax and weighted sum yourself, not to call a ready-made "
    "attention (reread 'All six context vectors at once')",
).check


def _predictions_reference() -> tuple[str, str, str]:
    """What scores + 10, scores * 10 and scores / 10 do to the weights of hidden scores, by experiment."""
    scores = 2 * torch.randn(7, generator=hidden_generator(SEED + 2))
    weights = softmax_stable(scores)
    return tuple(
        "same" if torch.allclose(new, weights, atol=1e-6) else "sharper" if new.max() > weights.max() else "flatter"
        for new in (softmax_stable(changed) for changed in (scores + 10, scores * 10, scores / 10))
    )


def _three_words(answer) -> tuple:
    words = ("same", "sharper", "flatter")
    if isinstance(answer, (tuple, list)):
        answer = tuple(a.strip().lower() if isinstance(a, str) else a for a in answer)
    if not isinstance(answer, tuple) or len(answer) != 3 or any(a not in words for a in answer):
        raise WrongFormError(
            f"expected a tuple of three words, each one of {', '.join(words)}; got {answer!r}",
            'for example ("flatter", "same", "sharper")',
        )
    return answer


_CHANGES = (
    ("adding 10 to every score", "softmax only sees the differences: exp(x + 10) = exp(x) e^10, and e^10 cancels"),
    ("multiplying every score by 10", "multiplying by 10 is a temperature of 0.1: every difference grows tenfold"),
    ("dividing every score by 10", "dividing by 10 is a temperature of 10: every difference shrinks tenfold"),
)

# ``answer``: three words ("same", "sharper" or "flatter") for scores + 10, scores * 10 and scores / 10.
exercise_3 = Exercise(
    "Exercise 3",
    reference=_predictions_reference,
    cases=lambda: [()],
    hint="softmax only sees the differences between scores; a factor on every score acts as a temperature",
    mistakes=lambda: [
        Mistake(lambda answer, i=i, change=change: f'{change} does not make the weights "{answer[i]}"', hint, item=i)
        for i, (change, hint) in enumerate(_CHANGES)
    ],
    done="",
    convert=_three_words,
    value=True,
).check
