"""Assertions shared by the tests."""

import numpy as np
import pytest

from dmlops import ValidationError

import reference


def rejects(words, make) -> str:
    """The call raises a ValidationError whose message has every one of ``words`` (any case); returns it."""
    with pytest.raises(ValidationError) as caught:
        make()
    message = str(caught.value)
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not in {message!r}"
    return message


def assert_cumulative_matches(out, operation: str, x: np.ndarray, axis: int, reverse: bool, exclusive: bool):
    """Integers bit for bit; floats within the accumulation bound of the float64 reference."""
    expected = reference.cumulative(operation, x, axis, reverse, exclusive)
    assert out.shape == x.shape and out.dtype == x.dtype, (out.shape, out.dtype, x.shape, x.dtype)
    if x.dtype.kind != "f":
        np.testing.assert_array_equal(out, expected)
        return
    error = np.abs(np.asarray(out, dtype=np.float64) - expected)
    tolerance = reference.cumulative_tolerance(operation, x, axis, reverse, exclusive, x.dtype)
    result = np.asarray(out, dtype=np.float64)
    # beyond the type's range the rounded result is an infinity of the reference's sign
    overflowed = np.isinf(result) & (np.sign(result) == np.sign(expected)) & \
        (np.abs(expected) + tolerance >= np.finfo(x.dtype).max)
    bad = ~(error <= tolerance) & ~overflowed  # NaN (an unwritten poisoned element) is bad too
    assert not bad.any(), f"{bad.sum()} of {bad.size} elements off, first at {np.argwhere(bad)[0]}: " \
                          f"{np.asarray(out)[bad][0]} vs {expected[bad][0]}"
