"""Checks for a notebook's ``parameters`` cell: papermill (``-p name value``) and curious readers change those values,
and one out of range stops the notebook at once with one sentence naming it, its range and how to change it."""

from __future__ import annotations

import numbers


class ParameterError(ValueError):
    """A notebook parameter is out of range. Its message is one sentence a learner can act on."""


def check_parameter(name: str, value, *, low=None, high=None, kind: type = int, choices=None):
    """``value`` if it is a ``kind`` (``int`` or ``float``) in ``[low, high]`` (either bound may be ``None``) or one
    of ``choices``; :class:`ParameterError` otherwise."""
    where = f"change {name} in the parameters cell (or with papermill's -p {name} ...)"
    if choices is not None:
        if value in choices:
            return value
        must = f"one of {list(choices)}"
    elif kind not in (int, float):
        raise TypeError(f"kind must be int or float, got {kind!r}")
    elif isinstance(value, bool) or not isinstance(value, numbers.Integral if kind is int else numbers.Real):
        must = "an int" if kind is int else "a number"
    elif not ((low is not None and value < low) or (high is not None and value > high)):
        return value
    else:
        must = f"at least {low}" if high is None else f"at most {high}" if low is None else f"from {low} to {high}"
    raise ParameterError(f"Parameter {name} must be {must}, got {value!r}: {where}.")
