"""ah.check_parameter: the check every notebook runs on its parameters cell."""

import pytest

import attention_helpers as ah


def test_a_value_in_range_is_returned():
    assert ah.check_parameter("num_heads", 3, low=1, high=8) == 3
    assert ah.check_parameter("p", 0.5, low=0.0, high=0.9, kind=float) == 0.5
    assert ah.check_parameter("activation", "gelu", choices=("relu", "gelu")) == "gelu"


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (7, {"low": 1, "high": 6}, "Parameter short_length must be from 1 to 6, got 7"),
        (0, {"low": 1}, "Parameter short_length must be at least 1, got 0"),
        (9, {"high": 6}, "Parameter short_length must be at most 6, got 9"),
        (2.5, {"low": 1}, "Parameter short_length must be an int, got 2.5"),
        (True, {"low": 0}, "Parameter short_length must be an int, got True"),
        ("4", {"low": 1, "kind": float}, "Parameter short_length must be a number, got '4'"),
        ("tanh", {"choices": ("relu", "gelu")}, "Parameter short_length must be one of ['relu', 'gelu'], got 'tanh'"),
    ],
)
def test_a_bad_value_stops_with_one_sentence_naming_the_parameter(value, kwargs, message):
    with pytest.raises(ah.ParameterError) as info:
        ah.check_parameter("short_length", value, **kwargs)
    text = str(info.value)
    assert text.startswith(message) and "parameters cell" in text and "\n" not in text
    assert isinstance(info.value, ValueError)
