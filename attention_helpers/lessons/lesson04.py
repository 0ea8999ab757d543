"""Lesson 04's checks: a sliding-window mask (token ``i`` sees keys ``i - w + 1 .. i``), attention that uses it
(hidden inputs of odd lengths, a batch of 1, ``d_k != d_v``), and which rows change when two tokens swap."""

from __future__ import annotations

import numbers
from functools import partial

import torch

from ..attention import CausalAttention
from ..functional import attention_with_weights, causal_mask
from . import ATTENTION_KERNELS, OVER_QUERIES, UNSCALED, Exercise, Mistake, WrongFormError, attend, hidden_generator

SEED = 404

MASK_HINT = (
    "one row per query and one column per key; a key is hidden from a query when it lies in the query's future, or "
    "more than window - 1 positions before it (reread 'Method B: fill the hidden scores with -inf, then softmax')"
)


def window_mask_loops(num_tokens: int, window: int) -> torch.Tensor:
    """The reference: ``(num_tokens, num_tokens)`` bool, True where key j is hidden from query i."""
    return torch.tensor([[not i - window + 1 <= j <= i for j in range(num_tokens)] for i in range(num_tokens)])


def _mask_mistakes(n: int, window: int) -> list[Mistake]:
    expected = window_mask_loops(n, window)
    too = "each token sees itself and the window - 1 tokens before it, window keys in all: count the diagonals again"
    variants = [
        (~expected, "your mask is True where a key may be seen", "True must mark the keys to hide (as in causal_mask)"),
        (causal_mask(n), "your mask hides only the future", "also hide the keys more than window - 1 positions back"),
        (expected & expected.T, "your mask lets a token see later tokens", "the future must stay hidden: j > i"),
        (expected.T, "your mask is transposed (rows must be queries, columns keys)", MASK_HINT),
        *[
            (window_mask_loops(n, window + off), f"your window is one token too {size} (each sees {window})", too)
            for off, size in ((1, "wide"), (-1, "narrow"))
            if window + off >= 1
        ],
    ]
    return [Mistake(problem, hint, wrong) for wrong, problem, hint in variants]


# ``sliding_window_mask(num_tokens, window)``: a boolean mask, True where the key is hidden.
exercise_1 = Exercise(
    "Exercise 1",
    reference=window_mask_loops,
    # two odd lengths, each with windows of 1, 2, one in between, the length and beyond it
    cases=lambda: [(n, window) for n, middle in ((13, 3), (11, 6)) for window in (1, 2, middle, n, n + 3)],
    hint=MASK_HINT,
    describe=lambda number, total, n, window: f"for {n} tokens and window = {window}",
    mistakes=_mask_mistakes,
    done=" for {n} hidden lengths and windows, from 1 to beyond the length",
).check


def _wrong_attentions(queries, keys, values, window):
    mask, causal = window_mask_loops(queries.shape[-2], window), causal_mask(queries.shape[-2])
    mix = partial(attend, queries, keys, values)  # attention with what a mistake changes
    weights_after = attend(queries, keys, torch.eye(keys.shape[-2])).masked_fill(mask, 0.0)
    return [
        Mistake(
            "your output holds nan",
            "a row of only -inf scores gives nan: check that every token sees at least itself",
            matches=lambda answer: bool(answer.isnan().any()),
        ),
        Mistake("you hid the keys the window allows", "masked_fill writes where the mask is True", mix(hide=~mask)),
        Mistake("your output is plain causal attention", "hide what your sliding-window mask hides", mix(hide=causal)),
        Mistake(UNSCALED, "divide them by the square root of the keys' width", mix(scale=1.0, hide=mask)),
        Mistake(
            "the hidden keys still get weight: you filled their scores with 0",
            "a score of 0 is still a score; fill with minus infinity, whose exponential is exactly 0",
            mix(hide=mask, fill=0.0),
        ),
        Mistake(
            "you zeroed the hidden weights after the softmax without renormalising, so rows do not sum to 1",
            "mask the scores with -inf before the softmax (method B)",
            weights_after @ values,
        ),
        Mistake(*OVER_QUERIES, mix(hide=mask, dim=-2)),
    ]


# ``windowed_attention(queries, keys, values, window)`` -> context vectors ``(batch, num_tokens, d_v)``.
exercise_2 = Exercise(
    "Exercise 2",
    reference=lambda q, k, v, window: attention_with_weights(q, k, v, mask=window_mask_loops(q.shape[-2], window))[0],
    cases=lambda: [  # (queries, keys, values, window) with d_k 6 and d_v 5
        (*(2 * torch.randn(2, batch, n, 6, generator=generator)), torch.randn(batch, n, 5, generator=generator), window)
        for generator in [hidden_generator(SEED + 1)]
        for batch, n, window in ((1, 7, 3), (3, 9, 1), (1, 11, 4), (2, 5, 8))
    ],
    hint="scaled dot-product scores, the keys your window mask hides set to minus infinity before the softmax, then "
    "the weighted sum of the values (reread 'Method B: fill the hidden scores with -inf, then softmax')",
    describe=lambda n, total, q, k, v, w: f"on hidden case {n} (batch {len(v)}, {v.shape[1]} tokens, window {w})",
    mistakes=_wrong_attentions,
    forbidden=ATTENTION_KERNELS,
    rule="the exercise asks you to compute the scores, mask, softmax and weighted sum yourself, not to call a "
    "ready-made attention (reread 'Method B')",
).check


SWAP_HINT = (
    "row r mixes the values of tokens 0..r, weighted by query r: where does the query or that set change? (reread "
    "'Equal scores: a running average')"
)


def _swap_cases() -> list[tuple[int, int, int, list[int]]]:
    """(num_tokens, i, j, the rows that change) for hidden swaps, measured on a random ``CausalAttention``."""
    generator = hidden_generator(SEED + 2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED + 2)
        module = CausalAttention(5, 3, 16, dropout=0.0).requires_grad_(False)
    cases = []
    for n, i, j in ((9, 2, 5), (7, 0, 6), (11, 4, 5), (5, 1, 3)):
        x = torch.randn(1, n, 5, generator=generator)
        order = [j if r == i else i if r == j else r for r in range(n)]  # tokens i and j swapped
        before, after = module(x)[0], module(x[:, order])[0]
        cases.append((n, i, j, [r for r in range(n) if not torch.allclose(before[r], after[r], atol=1e-6)]))
    return cases


def _row_list(answer) -> list[int]:
    rows = answer.tolist() if isinstance(answer, torch.Tensor) else answer
    if not isinstance(rows, (list, tuple)):
        raise WrongFormError(f"expected a list of row indices (ints), got {type(answer).__name__}", SWAP_HINT)
    rows = [r.item() if isinstance(r, torch.Tensor) and r.numel() == 1 else r for r in rows]
    kinds = sorted({type(r).__name__ for r in rows if isinstance(r, bool) or not isinstance(r, numbers.Integral)})
    if kinds:
        raise WrongFormError(f"expected a list of row indices (ints), got {', '.join(kinds)}", SWAP_HINT)
    if rows != sorted(rows):
        raise WrongFormError("the rows are not in increasing order", "list the rows in increasing order")
    return [int(r) for r in rows]


# ``changed_rows_after_swap(num_tokens, i, j)``: which rows of causal attention's output change when tokens i < j swap.
exercise_3 = Exercise(
    "Exercise 3",
    reference=lambda n, i, j, rows: rows,
    cases=_swap_cases,
    arguments=lambda n, i, j, rows: (n, i, j),
    hint=SWAP_HINT,
    describe=lambda number, total, n, i, j, rows: f"for {n} tokens when tokens {i} and {j} swap",
    mistakes=lambda n, i, j, rows: [
        Mistake(f"rows after {j} do not change", "they see the same tokens, in another order", list(range(i, n))),
        Mistake(f"rows between {i} and {j} change too", f"they now see token {j}'s embedding, not {i}'s", [i, j]),
        Mistake(f"row {j} changes too", "row j has a new query: token i's old embedding", list(range(i, j))),
    ],
    done=" for all {n} hidden swaps",
    returned_none="return a list of row indices",
    convert=_row_list,
    differ=lambda answer, expected: None if answer == expected else "that is not the list of rows that change",
).check
