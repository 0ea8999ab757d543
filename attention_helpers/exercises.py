"""Checks for the notebooks' exercises: each says plainly whether the reader's answer is right, and
gives a hint when it is not.

The expected value is always computed in the notebook from code the notebook has already checked
(never typed in), so a check cannot drift from the lesson. Both functions print one line and return
``True`` or ``False``; neither raises on a wrong answer, so a notebook with an unanswered exercise
still runs to the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

from ._checks import shape_str

NOT_ANSWERED = "Not answered yet (the answer is still None)."


def _compare(answer, expected, atol: float) -> str | None:
    """Why ``answer`` differs from ``expected``, or None when they agree. The reason names the part that
    failed: the type, the shape, the dtype, the entries (with the largest difference), or which item."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(answer, torch.Tensor):
            return f"expected a tensor, got {type(answer).__name__}"
        if answer.shape != expected.shape:
            return f"expected shape {shape_str(expected.shape)}, got {shape_str(answer.shape)}"
        if expected.dtype == torch.bool or answer.dtype == torch.bool:
            if not torch.equal(answer.detach().double(), expected.detach().double()):
                wrong = int((answer.detach().double() != expected.detach().double()).sum())
                return f"the shape is right but {wrong} of {expected.numel()} entries differ"
            if answer.dtype != expected.dtype:
                return (
                    f"the values are right but the dtype is {answer.dtype}, expected {expected.dtype} "
                    f"(convert with .{'bool' if expected.dtype == torch.bool else 'float'}())"
                )
            return None
        difference = (answer.detach().double() - expected.detach().double()).abs()
        if torch.allclose(answer.detach().double(), expected.detach().double(), atol=atol, rtol=0, equal_nan=True):
            return None
        where = tuple(
            int(i) for i in torch.unravel_index(difference.nan_to_num(float("inf")).argmax(), difference.shape)
        )
        index = f" at index {shape_str(where)}" if where else ""
        return f"the shape is right but some values differ (largest difference {float(difference[where]):.4g}{index})"
    if isinstance(expected, (bool, str)):
        return None if type(answer) is type(expected) and answer == expected else "that is not it"
    if isinstance(expected, (int, float)):
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            return f"expected a number, got {type(answer).__name__}"
        return None if abs(answer - expected) <= atol else "that is not the right number"
    if isinstance(expected, (tuple, list)):
        if not isinstance(answer, (tuple, list, torch.Size)):
            return f"expected a tuple of {len(expected)} items, got {type(answer).__name__}"
        if len(answer) != len(expected):
            return f"expected {len(expected)} items, got {len(answer)}"
        for number, (a, e) in enumerate(zip(answer, expected, strict=True), start=1):
            problem = _compare(a, e, atol)
            if problem is not None:
                where = f"item {number} of {len(expected)}"
                # A nested tuple names the whole path once: "item 3 of 4, its item 2 of 2, is not right: ..."
                if problem.startswith("item "):
                    return f"{where}, its {problem}"
                return f"{where} is not right: {problem}"
        return None
    raise TypeError(f"check_answer cannot compare expected values of type {type(expected).__name__}")


def check_answer(name: str, answer, expected, hint: str, atol: float = 1e-4) -> bool:
    """Compare an exercise's ``answer`` with ``expected`` (tensor, number, string, bool or a
    tuple/list of them; tensors and numbers within ``atol``). Prints the verdict; returns it."""
    if answer is None:
        print(f"{name}: {NOT_ANSWERED} Hint: {hint}")
        return False
    problem = _compare(answer, expected, atol)
    if problem is None:
        print(f"{name}: correct.")
        return True
    print(f"{name}: not yet, {problem}. Hint: {hint}")
    return False


def check_function(
    name: str,
    candidate: Callable | None,
    reference: Callable,
    cases: Iterable[Sequence],
    hint: str,
    atol: float = 1e-4,
) -> bool:
    """Call the reader's ``candidate`` and the checked ``reference`` on each case (a tuple of
    positional arguments) and compare the results. An exception in the candidate counts as a wrong
    answer and is reported by its message. Prints the verdict; returns it."""
    if candidate is None:
        print(f"{name}: {NOT_ANSWERED} Hint: {hint}")
        return False
    if not callable(candidate):
        raise TypeError(f"{name}: the answer must be a function, got {type(candidate).__name__}")
    cases = list(cases)
    for number, args in enumerate(cases, start=1):
        expected = reference(*args)
        try:
            answer = candidate(*args)
        except Exception as error:  # the reader's code: report any failure instead of a traceback
            print(
                f"{name}: not yet, case {number} of {len(cases)} raised {type(error).__name__}: {error}. Hint: {hint}"
            )
            return False
        problem = _compare(answer, expected, atol)
        if problem is not None:
            print(f"{name}: not yet, case {number} of {len(cases)}: {problem}. Hint: {hint}")
            return False
    print(f"{name}: correct on all {len(cases)} cases.")
    return True
