"""The lessons' exercise checks (``lessonNN``) and parameter checks (``parameters``).

A check prints one line, ``Not answered yet``, ``not yet, <what is wrong>. Hint: <hint>`` or ``correct``, and returns
whether the answer is right; it never raises. Every exercise is an :class:`Exercise`: references first, on copies the
answer never sees; the answer on its own copies under a :class:`Trace` of what actually runs; then a comparison of
plain tensors, types before values. Hints say the idea in words; worked answers live in ``solutions/`` only.
"""

from __future__ import annotations

import _thread
import builtins
import copy
import inspect
import multiprocessing.process
import numbers
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from .._checks import shape_str
from ..functional import causal_mask

NOT_ANSWERED = "Not answered yet (the answer is still None)."

# Bound now, so that an answer that patches torch cannot change how it is judged.
_allclose, _equal, _unravel, _Tensor = torch.allclose, torch.equal, torch.unravel_index, torch.Tensor
_as_subclass, _detach, _contiguous = torch.Tensor.as_subclass, torch.Tensor.detach, torch.Tensor.contiguous
_no_subclass = torch._C.DisableTorchFunctionSubclass


# Kernel groups an exercise may forbid: the ATen operators (and torch functions) that compute the thing whole.
def _names(text: str) -> frozenset:
    return frozenset(text.split())


SOFTMAX_KERNELS = _names("softmax _softmax log_softmax _log_softmax _safe_softmax _masked_softmax softmin")
ATTENTION_KERNELS = _names(
    "scaled_dot_product_attention _scaled_dot_product_attention_math _scaled_dot_product_flash_attention_for_cpu "
    "_scaled_dot_product_flash_attention _scaled_dot_product_efficient_attention _transformer_encoder_layer_fwd "
    "_scaled_dot_product_fused_attention_overrideable _native_multi_head_attention multi_head_attention_forward "
    "_safe_softmax"  # _safe_softmax: what the math path of scaled_dot_product_attention runs
)
DROPOUT_KERNELS = _names(
    "dropout native_dropout _fused_dropout feature_dropout alpha_dropout feature_alpha_dropout dropout1d dropout2d "
    "dropout3d"
)
NORM_KERNELS = _names(
    "layer_norm native_layer_norm group_norm native_group_norm batch_norm native_batch_norm _native_batch_norm_legit "
    "_native_batch_norm_legit_no_training instance_norm rms_norm _fused_rms_norm"
)

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LESSONS = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARY = tuple({os.path.dirname(os.path.dirname(os.path.abspath(m.__file__))) + os.sep for m in (torch, os)})


def _kernel_name(func) -> str:
    """``aten._softmax.default`` -> ``_softmax``; ``torch.softmax`` -> ``softmax``."""
    name = getattr(getattr(func, "overloadpacket", None), "__name__", None) or getattr(func, "__name__", str(func))
    return name.split(".")[0]


def _refuse(said: str, doing: str) -> None:
    """Refuse, with ``said`` as the verdict, what the answer running in this thread asks for (outside the check's own
    code): dispatch modes and trace functions see only this thread, and the references sit in the check's frames."""
    trace = _ACTIVE
    if trace is not None and not trace._trusted and _thread.get_ident() == trace._thread:
        trace.elsewhere.append(said)
        raise RuntimeError(f"the check does not let your code {doing}")


def _watched(start, what: str):
    """``start`` (a thread's or a process's), refused while an answer runs."""

    def watched(*args, **kwargs):
        _refuse(f"starts {what}", f"start {what}")
        return start(*args, **kwargs)

    return watched


# Bound when this module is imported; an answer that rebinds them is caught by the snapshot of their namespaces.
_thread.start_new_thread = _thread.start_new = threading._start_new_thread = _watched(
    _thread.start_new_thread, "a thread"
)
multiprocessing.process.BaseProcess.start = _watched(multiprocessing.process.BaseProcess.start, "a process")
_PROCESS_EVENTS = ("os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "subprocess.Popen")
# What hands out the check's frames or objects (where the references are): refused when the reader's code asks.
_LOOKING = {"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "gc.get_objects"}
_LOOKING |= {"gc.get_referrers", "gc.get_referents", "tb_frame", "gi_frame", "cr_frame", "ag_frame"}
_IN_HOOK: list = []
# Python's ways to hand work to a thread or process started earlier, and what switches off the dispatch and function
# modes: torch's Python helpers, its C functions and its guards.
_HANDS_WORK_ON = ("threading", "queue", "concurrent.futures", "multiprocessing", "asyncio")
_SWITCHES, _LOOKS = "switches off what the check watches", "reads the check's own frames or objects"
_SWITCHES_OFF = {"_disable_current_modes", "_pop_mode", "_pop_mode_temporarily", "_disable_infra_mode"}
_C_SWITCHES = {torch._C._pop_torch_dispatch_stack, torch._C._pop_torch_function_stack, torch._C._unset_dispatch_mode}
_C_SWITCHES.add(torch._C._dispatch_tls_set_dispatch_key_excluded)
_C_SWITCH_TYPES = (torch._C.DisableTorchFunction, torch._C._DisableTorchDispatch, torch._C._DisablePythonDispatcher)


def _is_readers(code) -> bool:
    return not code.co_filename.startswith((*_LIBRARY, _PACKAGE, "<frozen "))


def _from_reader(frame, through: tuple = ()) -> bool:
    """Whether ``frame`` runs the reader's code, or the code of modules ``through`` (wrappers) called from it."""
    while frame is not None and frame.f_globals.get("__name__", "").startswith(through):
        frame = frame.f_back
    return frame is not None and _is_readers(frame.f_code)


def _readers_threads() -> list[str]:
    """Other threads running the reader's code, started before the check: work handed to one through a plain list
    runs where the trace cannot see it."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    return [
        f"has a thread of its own running beside the check ({names.get(ident, ident)})"
        for ident, frame in sys._current_frames().items()
        if ident != _thread.get_ident() and any(_is_readers(f.f_code) for f, _ in traceback.walk_stack(frame))
    ]


def _audit(event: str, args: tuple) -> None:  # an audit hook: it cannot be removed
    if event.startswith(_PROCESS_EVENTS):
        _refuse("starts a process", "start a process")
    what = args[1] if event == "object.__getattr__" else event
    if what in _LOOKING and _ACTIVE is not None and not _IN_HOOK:
        _IN_HOOK.append(True)
        try:  # who called the audited function, directly or through the library modules that hand out frames
            if _from_reader(sys._getframe(1), ("inspect", "traceback")):
                looked = _SWITCHES if what in ("sys.settrace", "sys.setprofile") else _LOOKS
                _refuse(f"{looked} ({what})", f"use {what}")
        finally:
            _IN_HOOK.pop()


sys.addaudithook(_audit)


class Trace(TorchDispatchMode, TorchFunctionMode):
    """Records the kernels and torch functions run (``kernels``, ``operations``; a torch function too, since some
    decompose into other operators before they reach the dispatcher), the reader's lines run (``lines``), the package's
    and libraries' functions called and the work sent elsewhere; nothing inside ``allowed`` or :func:`trusted`."""

    def __init__(self, allowed: Iterable = ()):
        super().__init__()
        self.kernels, self.package, self.elsewhere, self.library = [], [], [], set()
        self.operations = self.lines = self._trusted = 0
        self._allowed = set()
        for item in (*allowed, causal_mask):  # the lessons' causal mask is a given, never an exercise's answer
            for function in [f for c in item.__mro__ for f in vars(c).values()] if isinstance(item, type) else [item]:
                function = getattr(function, "__func__", getattr(function, "fget", function))
                self._allowed.add(getattr(function, "__code__", None))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self._trusted:
            self.operations += 1
            name = _kernel_name(func)
            if name not in self.kernels:
                self.kernels.append(name)
        return func(*args, **(kwargs or {}))

    __torch_function__ = __torch_dispatch__

    def _on_call(self, frame, event, arg):
        code = frame.f_code
        if self._trusted or code.co_filename.startswith(_LESSONS):
            return None
        if code.co_filename.startswith(_PACKAGE):
            # ``ah.softmax_stable`` runs the package's ``__getattr__`` and, the first time, imports the module that
            # defines it: a name looked up, not package code the answer runs (the function it then calls is)
            init = code.co_filename.endswith("__init__.py")
            looked_up = code.co_qualname == "<module>" or (init and code.co_qualname == "__getattr__")
            if code in self._allowed or looked_up:
                self._trusted += 1
                frame.f_trace_lines = False
                return self._on_trusted_return
            if code.co_qualname not in self.package:
                self.package.append(code.co_qualname)
            return None
        if code.co_filename.startswith(_LIBRARY):  # NumPy's, SciPy's... functions, known by name only
            module = frame.f_globals.get("__name__", "?")
            self.library.add((code.co_name, module))
            if module.startswith(_HANDS_WORK_ON) and _from_reader(frame.f_back):
                self.elsewhere.append(f"hands work to another thread or process ({module}'s {code.co_name})")
            if code.co_name in _SWITCHES_OFF and _from_reader(frame.f_back, ("contextlib", "functools")):
                self.elsewhere.append(f"{_SWITCHES} ({code.co_name})")  # directly or through a context manager
            return None
        return self._on_line  # the reader's own code: count its lines

    def refused(self, forbidden: frozenset) -> str | None:
        """What the answer did that no answer may (work elsewhere, the package's code, a ``forbidden`` kernel)."""
        kernels = [f"PyTorch's {kernel} kernel" for kernel in self.kernels if kernel in forbidden]
        library = sorted(f"{name} from {module}" for name, module in self.library if name in forbidden)
        if self.elsewhere:
            return min(self.elsewhere, key=lambda what: not what.startswith("starts"))  # the thread, not its setup
        if self.package:  # even when it then failed: that is what the answer reached for
            return f"runs the package's {self.package[0]}"
        return f"runs {(kernels + library)[0]}" if kernels or library else None

    def _on_profile(self, frame, event, arg):  # C functions called by the reader's code
        if event != "c_call" or self._trusted or not _is_readers(frame.f_code):
            return
        if arg in _C_SWITCHES or isinstance(getattr(arg, "__self__", None), _C_SWITCH_TYPES):
            self.elsewhere.append(f"{_SWITCHES} ({getattr(arg, '__qualname__', arg)})")

    def _on_trusted_return(self, frame, event, arg):
        self._trusted -= event == "return"
        return self._on_trusted_return

    def _on_line(self, frame, event, arg):
        self.lines += event == "line"
        return self._on_line

    def __enter__(self):
        global _ACTIVE
        self._previous, self._outer, _ACTIVE, self._thread = sys.gettrace(), _ACTIVE, self, _thread.get_ident()
        self._profile = sys.getprofile()
        sys.settrace(self._on_call)
        sys.setprofile(self._on_profile)
        TorchFunctionMode.__enter__(self)
        return super().__enter__()

    def __exit__(self, *exc):
        global _ACTIVE
        try:
            return super().__exit__(*exc)
        finally:
            TorchFunctionMode.__exit__(self, *exc)
            sys.settrace(self._previous)
            sys.setprofile(self._profile)
            _ACTIVE = self._outer


_ACTIVE: Trace | None = None


@contextmanager
def trusted():
    """Inside a check's own ``run``: what runs here is the check's, not the answer's, and is not recorded."""
    trace = _ACTIVE
    if trace is not None:
        trace._trusted += 1
    try:
        yield
    finally:
        if trace is not None:
            trace._trusted -= 1


# Snapshotted around each answer and put back after it: what the check itself relies on (its switches, threads, checks).
_AROUND = (torch, torch.Tensor, F, torch.nn.Module, torch._C, TorchDispatchMode, TorchFunctionMode)
_AROUND += (_thread, threading, multiprocessing.process.BaseProcess, builtins, sys)
_MISSING = object()
_CHANGING = _names("__slotnames__ __warningregistry__ _ last_type last_value last_traceback last_exc")  # by Python
_PER_CELL = _names("input getpass display get_ipython help exit quit copyright credits license")  # by Jupyter
_FROZEN: dict[int, tuple] = {}  # id(namespace) -> (namespace, {name: value}) as the checks were imported


def _freeze() -> None:
    """Snapshot, as the checks are imported, what the references use (torch's, NumPy's, Python's functions, the
    package's classes as the lessons import them): an answer cell that replaced one before the check cell would make
    the reference wrong the same way. A module's private names change by themselves, a class's do not (its own
    ``__eq__`` hides its base's)."""
    spaces = [torch, F, torch.linalg, torch.special, torch.Tensor, torch._C.TensorBase, builtins]
    spaces += [c for c in vars(torch.nn).values() if isinstance(c, type)]
    spaces += [sys.modules[name] for name in ("numpy", "numpy.random") if name in sys.modules]
    for name, module in list(sys.modules.items()):
        if name.startswith("attention_helpers.") and not name.startswith(__name__):
            spaces += [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == name]
    for space in spaces:
        if id(space) not in _FROZEN:
            public = isinstance(space, ModuleType)
            entries = {k: v for k, v in vars(space).items() if not (public and k[0] == "_") and k not in _PER_CELL}
            _FROZEN[id(space)] = space, entries


def _changes(snapshot: Iterable[tuple], since_import: bool = False) -> list[tuple]:
    """``(namespace, name, value before)`` for each entry changed since ``snapshot``. Added entries count unless they
    are submodules torch imported lazily and, since import, unless they hide nothing a class inherits; since import,
    torch's own wrappers around the original are not a change."""
    changed = []
    for space, before in snapshot:
        now = vars(space)
        for key in {**before, **now}:
            old, new = before.get(key, _MISSING), now.get(key, _MISSING)
            if new is old or key in _CHANGING or (since_import and _torchs_own(new, old)):
                continue
            inherited = any(key in vars(base) for base in getattr(space, "__mro__", ())[1:])
            if old is not _MISSING or not (isinstance(new, ModuleType) or since_import and not inherited):
                changed.append((space, key, old))
    return changed


def _owner(space) -> str:
    """The top-level module a namespace belongs to: "torch", "numpy", "attention_helpers", "builtins"..."""
    return (space.__name__ if isinstance(space, ModuleType) else space.__module__).split(".")[0]


def _torchs_own(new, old, depth: int = 0) -> bool:
    """A wrapper of torch's own around the original: importing torch._dynamo wraps torch.manual_seed (``__wrapped__``)
    and nn.Module.__init__ (a closure over the original), once or, in a long session, more than once."""
    code = getattr(new, "__code__", None)
    if code is None or not code.co_filename.startswith(_LIBRARY) or depth > 3:
        return False
    inner = [getattr(new, "__wrapped__", None)]
    for cell in new.__closure__ or ():
        with suppress(ValueError):  # a cell not filled yet
            inner.append(cell.cell_contents)
    return any(value is old or _torchs_own(value, old, depth + 1) for value in inner)


def plain(value):
    """Tensors as plain, detached tensors (a subclass's ``__torch_function__`` never run), in tuples and lists too."""
    if isinstance(value, _Tensor):
        with _no_subclass():
            return _contiguous(_detach(_as_subclass(value, _Tensor)))
    if type(value) in (tuple, list):
        return type(value)(plain(item) for item in value)
    return value


def hidden_generator(seed: int) -> torch.Generator:
    """A generator of its own for a check's hidden inputs: the same inputs every run, the reader's state left alone."""
    return torch.Generator().manual_seed(seed)


class WrongFormError(Exception):
    """What is wrong with an answer and the hint: raised by ``convert`` or ``run`` for an answer of the wrong form, and
    inside :class:`Exercise` for every "not yet"."""

    def __init__(self, problem: str, hint: str):
        super().__init__(problem)
        self.problem, self.hint = problem, hint


RESTART = "restart the kernel and run the notebook without that line"
KEPT_HINT = "does your function keep results between calls? Compute each result from the arguments it is given"
LEAVE_HINT = "leave torch, Python and the checks as they are"
ELSEWHERE_HINT = "compute the answer in your function itself, from its arguments, without threads or processes"
IN_PLACE_HINT = (
    "build a new tensor instead of writing into the one you were given (no x *= ..., no method ending in _, no "
    "x[...] = ...): the caller's tensor must stay as it was"
)


# Mistakes several exercises name: (what is wrong, the hint)
UNSCALED = "the scores are not scaled"
OVER_QUERIES = ("the softmax runs over the queries", "each query's weights, a row, must sum to 1: softmax over dim=-1")
HEADS_MIXED = (
    "the heads are merged without moving the head axis back first, which mixes positions and heads",
    "move the head axis back next to head_dim before merging the heads",
)
NO_OUT_PROJ = ("the heads' outputs are not mixed by out_proj", "finish with the output projection, which mixes them")


def attend(queries, keys, values, *, scale=None, hide=None, fill=float("-inf"), dim=-1) -> torch.Tensor:
    """Scaled dot-product attention (the scale by default sqrt(d_k)); each keyword is what a named mistake changes:
    the scale, the keys ``hide`` hides and the ``fill`` of their scores, the softmax's ``dim``."""
    scores = queries @ keys.transpose(-2, -1) / (keys.shape[-1] ** 0.5 if scale is None else scale)
    return torch.softmax(scores if hide is None else scores.masked_fill(hide, fill), dim=dim) @ values


def on_case(number: int, total: int, *case) -> str:
    """Where a problem was found, by default: the hidden case and its first tensor's shape (nothing for a value)."""
    shapes = [shape_str(x.shape) for x in case if isinstance(x, _Tensor)]
    return f"on hidden case {number} of {total} (shape {shapes[0]})" if shapes else ""


def two_numbers(pair, problem: str, hint: str) -> tuple[float, float]:
    """``pair`` of numbers (a tuple, a list or a tensor of two) as two floats; else :class:`WrongFormError`."""
    with suppress(TypeError, ValueError, RuntimeError):  # a 0-dimensional tensor has no len
        if isinstance(pair, (tuple, list, _Tensor)) and len(pair) == 2:
            return float(pair[0]), float(pair[1])
    raise WrongFormError(problem, hint)


def is_number(value) -> bool:
    """A real number, not a bool: Python's and NumPy's ints and floats."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def as_number(answer):
    """A one-element tensor as the number it holds; anything else as it is."""
    return answer.item() if isinstance(answer, _Tensor) and answer.numel() == 1 else answer


def _kind(dtype: torch.dtype) -> str:  # what converts a tensor to that kind of dtype
    return "bool" if dtype == torch.bool else "float" if dtype.is_floating_point else "long"


def _compare_tensors(answer, expected: torch.Tensor, atol: float) -> str | None:
    if not isinstance(answer, _Tensor):
        many = f" of {len(answer)} items" if isinstance(answer, (tuple, list)) else ""
        return f"expected a tensor, got {type(answer).__name__}{many}"
    if answer.shape != expected.shape:
        return f"expected shape {shape_str(expected.shape)}, got {shape_str(answer.shape)}"
    if answer.is_complex() or _kind(answer.dtype) != _kind(expected.dtype):
        if not answer.is_complex() and _equal(answer.double(), expected.double()):
            values = f"the values are right but the dtype is {answer.dtype}, expected {expected.dtype}"
            return f"{values} (convert with .{_kind(expected.dtype)}())"
        return f"expected a tensor of dtype {expected.dtype}, got {answer.dtype}"
    if not expected.dtype.is_floating_point:
        wrong = int((answer != expected).sum())
        return f"the shape is right but {wrong} of {expected.numel()} entries differ" if wrong else None
    a, e = answer.double(), expected.double()
    if _allclose(a, e, atol=atol, rtol=0, equal_nan=True):
        return None
    if (a.isnan() & ~e.isnan()).any():
        return "your output holds nan"
    difference = (a - e).abs().nan_to_num(float("inf")).masked_fill(a.isnan() & e.isnan(), 0.0)
    where = tuple(int(i) for i in _unravel(difference.argmax(), difference.shape))
    index = f" at index {shape_str(where)}" if where else ""
    return f"the shape is right but some values differ (largest difference {float(difference[where]):.4g}{index})"


def compare(answer, expected, atol: float = 1e-4) -> str | None:
    """Why ``answer`` differs from ``expected`` (a tensor, number, string, bool or a tuple or list of them, within
    ``atol``): the type, shape, dtype, values (the largest difference) or which item; None when they agree."""
    answer, expected = plain(answer), plain(expected)
    if isinstance(expected, _Tensor):
        return _compare_tensors(answer, expected, atol)
    if isinstance(expected, (bool, str)) and type(answer) is not type(expected):
        return f"expected a {type(expected).__name__}, got {type(answer).__name__}"
    if is_number(expected):
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
            if problem is not None:  # a nested tuple names the whole path once
                where = f"item {number} of {len(expected)}"
                return f"{where}, its {problem}" if problem.startswith("item ") else f"{where} is not right: {problem}"
        return None
    return None if answer == expected else "that is not it"


@dataclass(frozen=True)
class Mistake:
    """A plausible wrong answer: what it computes (``wrong``, None where it does not apply), a test of the answer
    (``matches``) or a wrong ``item`` of a tuple; ``problem`` (or a function of the answer) and ``hint``, in words."""

    problem: str | Callable[[Any], str]
    hint: str
    wrong: Any = None
    matches: Callable[[Any], bool] | None = None
    item: int | None = None

    def made_by(self, answer, expected, differ: Callable[[Any, Any], str | None]) -> bool:
        """Whether ``answer`` makes this mistake; never when the mistake gives the right answer on this case."""
        if self.matches is not None:
            return bool(self.matches(answer))
        if self.item is not None:  # the expected tuple with only this item changed, to the answer's or to ``wrong``
            i = self.item
            mine, wrong = ((*expected[:i], value, *expected[i + 1 :]) for value in (answer[i], self.wrong))
            return differ(mine, expected) is not None and (self.wrong is None or differ(mine, wrong) is None)
        wrong = self.wrong
        return wrong is not None and differ(wrong, expected) is not None and differ(answer, wrong) is None


def _copy(values: tuple) -> tuple:
    return tuple(copy.deepcopy(values))  # no two runs share a tensor or a module


def one_line(error: BaseException, where: str = "") -> str:
    message = " ".join(str(error).split())
    return " ".join(filter(None, (type(error).__name__, where))) + (f": {message}" if message else "")


@dataclass(frozen=True)
class Exercise:
    """An answer (a function called on each hidden case, or with ``value`` a value) against ``reference(*case)``.

    ``cases(*given)`` draws the cases from what the check cell passes; ``arguments(*case)`` is what the answer gets,
    ``run(answer, *arguments)`` runs it; ``convert`` and ``differ`` read and compare it (raising
    :class:`WrongFormError`); ``mistakes(*case)`` are tried in order when it is wrong. ``forbidden`` kernels and the
    package's code (except ``allowed``) are refused with ``rule``; ``loop_free()`` gives a small and a large case
    between which the answer's steps may not grow; ``done`` is the correct verdict's detail (``{n}``: the cases).
    """

    name: str
    reference: Callable[..., Any]
    cases: Callable[..., Sequence[tuple]]
    hint: str
    describe: Callable[..., str] = on_case
    mistakes: Callable[..., Iterable[Mistake]] = lambda *case: ()
    done: str | Callable[..., str] = " on all {n} hidden cases"
    returned_none: str = "return the result"
    forbidden: frozenset = frozenset()
    rule: str = "the exercise asks you to write this yourself, from the operations the lesson shows"
    allowed: tuple = ()
    loop_free: Callable[[], tuple[tuple, tuple]] | None = None
    atol: float = 1e-4
    arguments: Callable[..., tuple] = lambda *case: case
    run: Callable[..., Any] | None = None
    convert: Callable[[Any], Any] = lambda answer: answer
    differ: Callable[[Any, Any], str | None] | None = None
    value: bool = False
    time_limit: float | None = 60.0  # seconds per hidden case (lesson 13's ranks have their launcher's own limit)

    def check(self, candidate, *given, **options) -> bool:
        """Judge ``candidate`` on every hidden case; print the verdict and return it. Never raises."""
        if candidate is None:
            print(f"{self.name}: {NOT_ANSWERED}")
            return False
        cases = self.judge(candidate, *given, **options)
        if cases:
            done = self.done(*cases[0]) if callable(self.done) else self.done.format(n=len(cases))
            print(f"{self.name}: correct{done}.")
        return bool(cases)

    def __post_init__(self):
        _freeze()  # the package's classes this lesson has just imported

    def judge(self, candidate, *given, **options) -> list[tuple]:
        """:meth:`check` without the "correct" line: the cases when the answer is right, else [] (after "not yet")."""
        try:
            for space, key, _ in _changes(list(_FROZEN.values()), since_import=True)[:1]:
                replaced = f"your code replaced {space.__name__}.{key} since the checks were imported"
                whose = {"torch": "PyTorch", "numpy": "NumPy", "attention_helpers": "the package"}.get(_owner(space))
                raise WrongFormError(replaced, f"the check needs {whose or 'Python'}'s own: {RESTART}")
            cases = list(self.cases(*given, **options))
            self._judge(candidate, cases)
            return cases
        except WrongFormError as wrong:
            problem, hint = wrong.problem, wrong.hint
        except Exception as error:  # a check must never raise, whatever the answer does
            problem, hint = f"the check could not judge this answer ({one_line(error)})", self.hint
        problem = " ".join(str(problem).split()).rstrip(". ")  # one line; an error's own full stop is not doubled
        print(f"{self.name}: not yet, {problem}. Hint: {hint}")
        return []

    def _judge(self, candidate, cases: list[tuple]) -> None:
        """Raises :class:`WrongFormError` with what is wrong and the hint, unless the answer is right."""
        if not self.value and not callable(candidate):
            raise WrongFormError(f"expected a function, got {type(candidate).__name__}", "define it with def")
        with torch.no_grad():  # every reference first, on copies the answer never sees
            references = [plain(self.reference(*_copy(case))) for case in cases]
        answers = []
        for number, (case, expected) in enumerate(zip(cases, references, strict=True), start=1):
            where = self.describe(number, len(cases), *case)
            answers.append(self._answer(candidate, case, where))
            self._compare(answers[-1], case, expected, where)
        if not self.value:
            _same_shape_again(self, candidate, cases, references, answers)
        if self.loop_free is not None and not self.value:
            small, large = (self._run(candidate, case, "on a larger input")[1] for case in self.loop_free())
            if large > small:
                steps = f"your code does {small} steps on a small input and {large} on a larger one"
                raise WrongFormError(f"{steps}: it loops over the entries in Python", self.rule)

    def _answer(self, candidate, case: tuple, where: str):
        """The answer on one case, read as the check compares it."""
        answer = candidate if self.value else self._run(candidate, case, where)[0]
        if answer is None:
            raise WrongFormError(f"your function returned None {where}", self.returned_none)
        try:
            return plain(self.convert(plain(answer)))
        except WrongFormError as wrong:
            raise WrongFormError(f"{wrong.problem} {where}", wrong.hint) from None

    def _compare(self, answer, case: tuple, expected, where: str) -> None:
        """Raises what differs: the first named mistake the answer makes, else what differs and the hint."""
        differ = self.differ or (lambda a, e: compare(a, e, self.atol))
        problem = differ(answer, expected)
        if problem is None:
            return
        for mistake in self.mistakes(*_copy(case)):
            try:
                made = mistake.made_by(answer, expected, differ)
                what = mistake.problem(answer) if made and callable(mistake.problem) else mistake.problem
            except Exception:  # a mistake that cannot even be tested on this answer is not the one it made
                continue
            if made:
                raise WrongFormError(f"{what} {where}", mistake.hint)
        raise WrongFormError(f"{problem} {where}", self.hint)

    def _run(self, candidate, case: tuple, where: str) -> tuple[Any, int]:
        """Run the answer on its own copy of one case: its result and its steps (torch operations and lines of the
        reader's code); raises :class:`WrongFormError` when something in the way it ran is wrong."""
        if not _WARM:  # torch imports parts of itself on a mode's first use (torch._dynamo wraps manual_seed)
            with Trace():
                torch.ones(1).softmax(0)
            _WARM.append(True)
        given = _copy(self.arguments(*case))
        checks = [module for name, module in sys.modules.items() if name.startswith(__name__)]
        snapshot = [(space, dict(vars(space))) for space in (*_AROUND, *checks, Exercise, Mistake, Trace)]
        trace = Trace(self.allowed)
        result, problem, hint = None, None, ""
        try:
            trace.elsewhere += _readers_threads()
            with torch.no_grad(), trace, _time_limit(self.time_limit):
                result = call_answer(candidate, *given, run=self.run)
            trace.elsewhere += _readers_threads()
        except WrongFormError as wrong:  # the check's verdict on the answer's form or an input changed in place
            problem, hint = f"{wrong.problem} {where}", wrong.hint
        except _TooLong:
            problem = f"your code was still running after {self.time_limit:g} s {where}, so it was stopped"
            problem, hint = f"{problem}: look for a loop that never ends", self.hint
        except (Exception, SystemExit) as error:  # the reader's code: report any failure instead of a traceback
            problem, hint = f"your code raised {one_line(error, where)}", self.hint
        changed, refused = _changes(snapshot), trace.refused(self.forbidden)
        for space, key, old in changed:  # put back
            if old is _MISSING:
                delattr(space, key)
            else:
                setattr(space, key, old)
        if changed:
            space, key, _ = changed[0]
            what = "torch itself" if _owner(space) == "torch" else "Python or the checks"
            problem, hint = f"your code changes {what} ({space.__name__}.{key})", LEAVE_HINT
        elif refused is not None:
            problem, hint = f"your code {refused} {where}", ELSEWHERE_HINT if trace.elsewhere else self.rule
        if problem is not None:
            raise WrongFormError(problem, hint)
        return result, trace.operations + trace.lines


def _same_shape_again(exercise: Exercise, candidate, cases: list[tuple], references: list, answers: list) -> None:
    """One case again with new values (same shape, spread and infinite entries) in the first float tensor the
    answer is given: an answer that keeps its results between calls, by shape, gives its earlier one."""
    given = [
        (n, i)
        for n, case in enumerate(cases)
        for i, x in enumerate(case)
        if isinstance(x, _Tensor) and x.is_floating_point() and any(x is y for y in exercise.arguments(*case))
    ]
    if not given:
        return
    number, index = given[0]
    case, old = cases[number], cases[number][index]
    finite = old.isfinite()
    values = torch.randn(old.shape, generator=hidden_generator(4040), dtype=old.dtype)
    spread, centre = (old[finite].std(), old[finite].mean()) if int(finite.sum()) > 1 else (1.0, 0.0)
    fresh = (*case[:index], torch.where(finite, values * spread + centre, old), *case[index + 1 :])
    with torch.no_grad():
        expected = plain(exercise.reference(*_copy(fresh)))
    if compare(expected, references[number], atol=0) is None:
        return  # a reference stored with the case, not computed from these values
    described = exercise.describe(number + 1, len(cases), *fresh)
    where = f"{described} with new values".strip()
    answer = exercise._answer(candidate, fresh, where)
    try:
        exercise._compare(answer, fresh, expected, where)
    except WrongFormError:
        if compare(answer, answers[number], atol=0) is not None:
            raise
        kept = f"the same shape with other values gave the earlier answer {described}"
        raise WrongFormError(kept, KEPT_HINT) from None


_WARM: list = []


def call_answer(answer, *args, run: Callable | None = None):
    """``answer(*args)``, or ``run(answer, *args)``, as every check calls an answer (a check's own ``run`` too): a
    tensor argument it changes in place is refused, since the caller's tensor must stay as it was."""
    with trusted():
        originals = [(i, arg.clone()) for i, arg in enumerate(args) if isinstance(arg, _Tensor)]
    result = answer(*args) if run is None else run(answer, *args)
    with trusted():
        for index, original in originals:
            if compare(args[index], original, atol=0) is not None:
                name = f"argument {index + 1}"
                with suppress(TypeError, ValueError, IndexError):  # the answer's name for it ("scores")
                    name = list(inspect.signature(answer).parameters)[index]
                raise WrongFormError(f"your function changed its input {name} in place", IN_PLACE_HINT)
    return result


class _TooLong(BaseException):
    """Raised inside the answer by the check's timer; not an ``Exception``, so the answer's own handlers let it pass."""


@contextmanager
def _time_limit(seconds: float | None):
    """Stop the answer after ``seconds`` (a timer signal, so only in the main thread, where a notebook runs it)."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        if frame is not None and frame.f_code.co_filename.startswith(_LESSONS):  # Python switches off a trace or
            signal.setitimer(signal.ITIMER_REAL, 0.01)  # profile function that raises: stop a moment later instead
            return
        raise _TooLong

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_freeze()
