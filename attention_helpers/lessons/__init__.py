"""What the lessons need apart from the model code: their exercise checks and their parameter checks.

``parameters`` checks a notebook's ``parameters`` cell. ``lessonNN`` holds lesson NN's exercise checks: each says
plainly whether the reader's answer is right, and gives a hint fitted to the mistake when it is not.

Every check prints exactly one line, in one of three forms, and returns ``True`` or ``False``:

- before an attempt: ``<name>: Not answered yet (the answer is still None).`` and nothing else, so a
  lesson's stored output gives nothing away;
- after a wrong attempt: ``<name>: not yet, <what is wrong>. Hint: <hint>``;
- when right: ``<name>: correct<detail>.``

A check never raises on a wrong answer, so a notebook with unanswered exercises still runs to its end.
The expected answer is computed by the check itself, from the package's tested code, on inputs the check
draws with its own generator (:func:`hidden_generator`), never on the lesson's printed example. Each
lesson's checks live in ``attention_helpers.lessons.lessonNN``; this module holds what they share.

An exercise is described, not programmed: an :class:`Exercise` holds the reference, the hidden cases, the general
hint and the named :class:`Mistake` s, and :meth:`Exercise.check` runs every exercise the same way, whether the answer
is a function (called on each case, or fed step by step through the exercise's ``run``) or a value. An answer of the
wrong form raises :class:`WrongFormError` in the exercise's ``convert``. Only lesson 13's checks, which run the answer
on several processes, keep functions of their own, built from the same pieces (:func:`not_yet`, :func:`correct`).
"""

from __future__ import annotations

import inspect
import numbers
import sys
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from .._checks import shape_str

NOT_ANSWERED = "Not answered yet (the answer is still None)."


def not_answered(name: str) -> bool:
    """Print the verdict for an exercise not tried yet: no hint, nothing about the answer."""
    print(f"{name}: {NOT_ANSWERED}")
    return False


def not_yet(name: str, problem: str, hint: str) -> bool:
    """Print the verdict for a wrong answer: what is wrong, then a hint that fits that mistake."""
    print(f"{name}: not yet, {problem.rstrip('. ')}. Hint: {hint}")  # an error's own full stop is not doubled
    return False


def correct(name: str, detail: str = "") -> bool:
    """Print the verdict for a right answer (``detail`` such as " on all 6 hidden cases")."""
    print(f"{name}: correct{detail}.")
    return True


def hidden_generator(seed: int) -> torch.Generator:
    """A generator of its own for a check's hidden inputs: the same inputs every run (so a solution's
    verdict repeats), and the reader's global random state is left alone."""
    return torch.Generator().manual_seed(seed)


@dataclass(frozen=True)
class Forbidden:
    """What an exercise asks the reader to write, so the answer may not call it: ``names`` maps the ``__name__`` of
    functions written in C (``torch.softmax``, ``Tensor.softmax``, ``F.scaled_dot_product_attention``) to what the
    verdict calls them; ``functions`` are Python functions or methods (the package's own) with their labels;
    ``hint`` says what to build it from."""

    names: dict[str, str] = field(default_factory=dict)
    functions: tuple[tuple[Callable, str], ...] = ()
    hint: str = ""


@contextmanager
def watch_calls(forbidden: Forbidden | None):
    """Record, in the list it yields, the labels of the ``forbidden`` functions the code run inside calls.

    A profile hook (``sys.setprofile``) sees every call by the function object actually run, however the reader
    imported it (``torch.softmax``, ``x.softmax``, ``F.softmax``, ``from ... import``); it records and never raises,
    and the previous hook is put back afterwards."""
    seen: list[str] = []
    if forbidden is None:
        yield seen
        return
    codes = {getattr(function, "__code__", None): label for function, label in forbidden.functions}

    def profile(frame, event, arg):
        if event == "call":
            label = codes.get(frame.f_code)
        elif event == "c_call":
            label = forbidden.names.get(getattr(arg, "__name__", None))
        else:
            return
        if label is not None and label not in seen:
            seen.append(label)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)


class WrongFormError(Exception):
    """An answer of the wrong form (not a pair, not an index...), raised by an exercise's ``convert`` or ``run``:
    ``problem`` says what was expected, ``hint`` how to give it."""

    def __init__(self, problem: str, hint: str):
        super().__init__(problem)
        self.problem, self.hint = problem, hint


IN_PLACE_HINT = (
    "build a new tensor (x * 2, x.masked_fill(...), torch.where(...)) instead of writing into the input "
    "(x *= 2, x.masked_fill_(...), x[...] = ...): the caller's tensor must stay as it was"
)


def _input_tensors(candidate: Callable, args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """``(name, tensor, copy)`` for every tensor passed to ``candidate``, named as its parameter (or by position)."""
    try:
        named = dict(inspect.signature(candidate).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):  # no signature, or one the arguments do not fit: name them by position
        named = {f"argument {number}": arg for number, arg in enumerate(args, start=1)} | kwargs
    return [(label, value, value.detach().clone()) for label, value in named.items() if isinstance(value, torch.Tensor)]


def _unchanged(tensor: torch.Tensor, copy: torch.Tensor) -> bool:
    """Whether ``tensor`` still holds what ``copy`` holds (nan equal to nan)."""
    if tensor.shape != copy.shape or tensor.dtype != copy.dtype:
        return False
    same = tensor.detach() == copy
    if tensor.is_floating_point() or tensor.is_complex():
        same |= tensor.detach().isnan() & copy.isnan()
    return bool(same.all())


def run_candidate(
    name: str,
    candidate: Callable,
    *args,
    hint: str,
    case: str = "",
    forbidden: Forbidden | None = None,
    in_place_hint: str = IN_PLACE_HINT,
    **kwargs,
):
    """Call the reader's code; return ``(True, result)``, or print the "not yet" verdict for an exception, for a
    call of a ``forbidden`` function (the one the exercise asks for), or for a tensor argument it changed in place,
    and return ``(False, None)``. ``case`` names the hidden input, such as "on a batch of 1"."""
    where = f" {case}" if case else ""
    inputs = _input_tensors(candidate, args, kwargs)
    try:
        with watch_calls(forbidden) as seen:
            result = candidate(*args, **kwargs)
    except WrongFormError:  # the check's own verdict on the answer's form, raised by an exercise's ``run``
        raise
    except Exception as error:  # the reader's code: report any failure instead of a traceback
        message = " ".join(str(error).split())  # one line, whatever the error's own layout
        not_yet(name, f"your code raised {type(error).__name__}{where}" + (f": {message}" if message else ""), hint)
        return False, None
    if seen:
        not_yet(name, f"your code calls {seen[0]}{where}: that is what the exercise asks you to write", forbidden.hint)
        return False, None
    for label, tensor, copy in inputs:
        if not _unchanged(tensor, copy):
            not_yet(name, f"your function changed its input {label} in place{where}", in_place_hint)
            return False, None
    return True, result


def is_number(value) -> bool:
    """A real number, not a bool: Python's and NumPy's ints and floats."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def as_number(answer):
    """A one-element tensor as the number it holds; anything else as it is."""
    return answer.item() if isinstance(answer, torch.Tensor) and answer.numel() == 1 else answer


def compare(answer, expected, atol: float = 1e-4) -> str | None:
    """Why ``answer`` differs from ``expected`` (tensor, number, string, bool or a tuple/list of them; tensors and
    numbers within ``atol``), or None when they agree. The reason names the part that failed: the type, the shape,
    the dtype, the entries (with the largest difference), or which item."""
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
        if not is_number(answer):
            return f"expected a number, got {type(answer).__name__}"
        return None if abs(float(answer) - expected) <= atol else "that is not the right number"
    if isinstance(expected, (tuple, list)):
        if not isinstance(answer, (tuple, list, torch.Size)):
            return f"expected a tuple of {len(expected)} items, got {type(answer).__name__}"
        if len(answer) != len(expected):
            return f"expected {len(expected)} items, got {len(answer)}"
        for number, (a, e) in enumerate(zip(answer, expected, strict=True), start=1):
            problem = compare(a, e, atol)
            if problem is not None:
                where = f"item {number} of {len(expected)}"
                # A nested tuple names the whole path once: "item 3 of 4, its item 2 of 2, is not right: ..."
                if problem.startswith("item "):
                    return f"{where}, its {problem}"
                return f"{where} is not right: {problem}"
        return None
    raise TypeError(f"check_answer cannot compare expected values of type {type(expected).__name__}")


def check_answer(name: str, answer, expected, hint: str, atol: float = 1e-4) -> bool:
    """Compare an exercise's ``answer`` with ``expected`` (see :func:`compare`). Prints the verdict;
    returns it."""
    if answer is None:
        return not_answered(name)
    problem = compare(answer, expected, atol)
    if problem is None:
        return correct(name)
    return not_yet(name, problem, hint)


@dataclass(frozen=True)
class Mistake:
    """A plausible wrong answer on one hidden case: ``wrong``, what it computes (None where the mistake does not
    apply), or ``matches``, a test of the answer, or a wrong ``item`` of a tuple answer; ``problem`` says what is
    wrong (or makes that from the answer) and ``hint`` how to put it right."""

    problem: str | Callable[[Any], str]
    hint: str
    wrong: Any = None
    matches: Callable[[Any], bool] | None = None
    item: int | None = None

    def made_by(self, answer, expected, differ: Callable[[Any, Any], str | None]) -> bool:
        """Whether ``answer`` makes this mistake; never when the mistake gives the right answer on this case. With
        ``item``, the mistake is in that item of a tuple answer: it is wrong, and equal to ``wrong`` if given."""
        if self.matches is not None:
            return bool(self.matches(answer))
        if self.item is not None:

            def only(value):  # the expected tuple with only this item changed
                return (*expected[: self.item], value, *expected[self.item + 1 :])

            mine = only(answer[self.item])
            return differ(mine, expected) is not None and (self.wrong is None or differ(mine, only(self.wrong)) is None)
        wrong = self.wrong
        return wrong is not None and differ(wrong, expected) is not None and differ(answer, wrong) is None


_PRINTED = object()  # what Exercise._run returns once run_candidate printed the verdict


@dataclass(frozen=True)
class Exercise:
    """An exercise whose answer is a function: called on each hidden case, it must give what ``reference`` gives;
    or, with ``value``, an answer that is a value, compared with what ``reference`` gives on each case as it is.

    - ``cases()`` draws the hidden cases, tuples of arguments (its own generator, never the lesson's example);
      ``describe(number, total, *case)`` names one in the verdict, such as "on hidden case 2 of 3 (batch 1)".
    - ``arguments(*case)`` gives what the answer is called with, when a case holds more than that (such as the
      module the reference runs); by default the case itself. ``run(answer, *arguments)`` runs the answer when it
      is not simply called (fed block by block, say).
    - ``convert(answer)`` turns an answer of another accepted form into the reference's (a one-element tensor
      into a number, say) before the comparison, and raises :class:`WrongFormError` for an answer of no accepted form.
    - ``differ(answer, expected)`` says why the answer is wrong, or None; by default :func:`compare` within ``atol``.
    - ``hint`` is the general hint; ``mistakes(*case)`` lists the named :class:`Mistake` s, tried in order when
      the answer is wrong (a mistake that gives the right answer on that case is skipped).
    - ``done`` is the correct verdict's detail, with ``{n}`` the number of cases; ``returned_none`` the hint for an
      answer that returns None; ``forbidden`` what the answer may not call.
    """

    name: str
    reference: Callable[..., Any]
    cases: Callable[[], Sequence[tuple]]
    hint: str
    describe: Callable[..., str] = lambda number, total, *case: ""
    mistakes: Callable[..., Iterable[Mistake]] = lambda *case: ()
    done: str = " on all {n} hidden cases"
    returned_none: str = "return the result"
    forbidden: Forbidden | None = None
    in_place_hint: str = IN_PLACE_HINT
    atol: float = 1e-4
    arguments: Callable[..., tuple] | None = None
    run: Callable[..., Any] | None = None
    convert: Callable[[Any], Any] | None = None
    differ: Callable[[Any, Any], str | None] | None = None
    value: bool = False

    def check(self, candidate) -> bool:
        """Run ``candidate`` on every hidden case (on copies of the tensors, under ``torch.no_grad``), or with
        ``value`` compare it with every case's reference; print the verdict and return it."""
        if candidate is None:
            return not_answered(self.name)
        right = self.judge(candidate)
        return bool(right) and correct(self.name, self.done.format(n=right))

    def judge(self, candidate) -> int:
        """:meth:`check` without the "correct" line, for one part of an exercise: the number of hidden cases when
        the answer is right on all of them, else 0 after printing the "not yet" verdict."""
        if not self.value and not callable(candidate):
            return not_yet(self.name, f"expected a function, got {type(candidate).__name__}", "define it with def")
        differ = self.differ or (lambda answer, expected: compare(answer, expected, self.atol))
        cases = list(self.cases())
        for number, case in enumerate(cases, start=1):
            where = self.describe(number, len(cases), *case)
            with torch.no_grad():
                try:
                    answer = candidate if self.value else self._run(candidate, case, where)
                    if answer is _PRINTED:
                        return False
                    if answer is None:
                        return not_yet(self.name, f"your function returned None {where}", self.returned_none)
                    if self.convert is not None:
                        answer = self.convert(answer)
                except WrongFormError as wrong:
                    return not_yet(self.name, f"{wrong.problem} {where}", wrong.hint)
                expected = self.reference(*case)  # after the answer: a costly reference waits for a well-formed one
                problem = differ(answer, expected)
                if problem is None:
                    continue
                for mistake in self.mistakes(*case):  # the first named mistake, else what differs and the hint
                    if mistake.made_by(answer, expected, differ):
                        what = mistake.problem(answer) if callable(mistake.problem) else mistake.problem
                        return not_yet(self.name, f"{what} {where}", mistake.hint)
                return not_yet(self.name, f"{problem} {where}", self.hint)
        return len(cases)

    def _run(self, candidate, case: tuple, where: str):
        """The answer function's result on one case, or ``_PRINTED`` once :func:`run_candidate` printed a verdict."""
        given = self.arguments(*case) if self.arguments is not None else case
        given = tuple(arg.clone() if isinstance(arg, torch.Tensor) else arg for arg in given)
        call = (self.run, candidate, *given) if self.run is not None else (candidate, *given)
        ran, answer = run_candidate(
            self.name, *call, hint=self.hint, case=where, forbidden=self.forbidden, in_place_hint=self.in_place_hint
        )
        return answer if ran else _PRINTED


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
    if candidate is not None and not callable(candidate):
        raise TypeError(f"{name}: the answer must be a function, got {type(candidate).__name__}")
    cases = [tuple(case) for case in cases]
    exercise = Exercise(
        name,
        reference,
        lambda: cases,
        hint,
        describe=lambda number, total, *case: f"on case {number} of {total}",
        done=" on all {n} cases",
        atol=atol,
    )
    return exercise.check(candidate)
