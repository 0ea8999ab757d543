"""Lesson 03's checks: scaled dot-product self-attention from three weight matrices (hidden inputs with d_in, d_k
and d_v all different, odd lengths, batches of 1 and 3), and the spread of ``q · k`` with the temperature that undoes
it."""

from __future__ import annotations

from functools import partial

import torch

from ..functional import attention_with_weights, random_dot_products
from . import (
    ATTENTION_KERNELS,
    OVER_QUERIES,
    UNSCALED,
    Exercise,
    Mistake,
    attend,
    compare,
    hidden_generator,
    two_numbers,
)

SEED = 303


def _mistakes(x, W_query, W_key, W_value):
    queries, keys, values = x @ W_query, x @ W_key, x @ W_value
    width = "d_k is the width of the keys (keys.shape[-1])"
    mix = partial(attend, queries, keys, values)  # attention with what a mistake changes
    return [
        Mistake(
            "your output has the input's width: you mixed the inputs, not the values",
            "the weights mix the values, the inputs projected by W_value",
            matches=lambda answer: answer.shape == x.shape,
        ),
        Mistake(UNSCALED, "divide the scores by the square root of the keys' width", mix(scale=1)),
        Mistake("you divided the scores by d_k", "divide by the square root of d_k", mix(scale=keys.shape[-1])),
        Mistake("you divided by sqrt(d_in)", width, mix(scale=x.shape[-1] ** 0.5)),
        Mistake("you divided by the square root of the values' width", width, mix(scale=values.shape[-1] ** 0.5)),
        Mistake(*OVER_QUERIES, mix(dim=-2)),
        Mistake("your scores are transposed", "queries first, keys transposed second", attend(keys, queries, values)),
    ]


# ``self_attention(x, W_query, W_key, W_value)``: ``(..., num_tokens, d_in)`` -> ``(..., num_tokens, d_v)``.
exercise_1 = Exercise(
    "Exercise 1",
    reference=lambda x, W_query, W_key, W_value: attention_with_weights(x @ W_query, x @ W_key, x @ W_value)[0],
    cases=lambda: [  # (x, W_query, W_key, W_value) with d_in 5, d_k 4 and d_v 3
        (torch.randn(*shape, 5, generator=generator), *(torch.randn(5, d, generator=generator) for d in (4, 4, 3)))
        for generator in [hidden_generator(SEED)]
        for shape in ((7,), (1, 9), (3, 5))
    ],
    hint="project the inputs into queries, keys and values; score every query against every key; scale by the square "
    "root of the keys' width; a softmax over the keys; then mix the values (reread 'A self-attention module')",
    mistakes=_mistakes,
    done=" on all {n} hidden inputs, one of them a batch of 1",
    forbidden=ATTENTION_KERNELS,
    rule="the exercise asks you to compute the scores, softmax and weighted sum of the values yourself, not to call "
    "a ready-made attention (reread 'A self-attention module')",
).check


SPREAD_HINT = (
    "each product of two independent entries has a variance of its own, and the variances of d_k independent terms "
    "add; the spread is the square root of the total (reread 'Why divide by sqrt(d_k)?')"
)


def _spread_mistakes(d_k: int, std: float, measured: float) -> list[Mistake]:
    return [
        Mistake("you gave sqrt(d_k), the spread for entries of spread 1", SPREAD_HINT, d_k**0.5, item=0),
        Mistake("you multiplied sqrt(d_k) by std once", "q_i and k_i each bring a factor std", d_k**0.5 * std, item=0),
        Mistake("you gave the variance, not the spread", "the spread is its square root", d_k * std**4, item=0),
        Mistake(lambda answer: f"a spread of {answer[0]:.4g} is not what the experiment measures", SPREAD_HINT, item=0),
        Mistake("T = sqrt(d_k) does not bring the spread back to 1", "divide by the spread itself", d_k**0.5, item=1),
        Mistake(
            lambda answer: f"dividing by T = {answer[1]:.4g} does not bring the spread back to 1",
            "dividing q · k by T divides its spread by T",
            item=1,
        ),
    ]


# ``spread_and_temperature(d_k, std)`` -> (the standard deviation of ``q · k`` for ``d_k`` independent entries of mean
# 0 and spread ``std``, the temperature ``T`` that brings the spread of ``q · k / T`` back to 1).
exercise_2 = Exercise(
    "Exercise 2",
    reference=lambda d_k, std, measured: (measured, measured),
    cases=lambda: [  # (d_k, std, the spread of q · k measured on random vectors)
        (d_k, std, std**2 * random_dot_products(d_k, num_pairs=20_000, generator=generator).std().item())
        for generator in [hidden_generator(SEED + 1)]
        for d_k, std in ((25, 2.0), (64, 0.5), (9, 1.0), (100, 0.3), (3, 3.0))
    ],
    arguments=lambda d_k, std, measured: (d_k, std),
    hint=SPREAD_HINT,
    describe=lambda number, total, d_k, std, measured: f"for d_k = {d_k} and std = {std}",
    mistakes=_spread_mistakes,
    done=" for all {n} hidden widths and spreads",
    returned_none="return a pair (spread, T)",
    convert=lambda answer: two_numbers(answer, f"expected a pair (spread, T), got {answer!r}", "return spread, T"),
    # both numbers within 5% of the measured spread (the measurement's own wobble is about 0.5%)
    differ=lambda answer, expected: compare(answer, expected, atol=0.05 * expected[0]),
    allowed=(random_dot_products,),  # a measurement with the lesson's sampler is an answer too
).check
