"""Resource values printed as DxDispatch prints them.

DxDispatch writes each value to a C++ stream: floats with 6 significant digits in the shortest of fixed or
exponent form (``2``, ``0.1``, ``123457``, ``1e+06``, ``inf``, ``nan``; FLOAT16 is widened to float first);
integers in decimal (8-bit ones here as numbers, where a C++ stream would write them as characters).
``Resource 'NAME': v0, v1, ...`` on one line, or with ``verbose`` a line ``[i] value (0xBITS)`` per element, the
index right-aligned to the digits of the element count and the bits in hex, space-padded to two digits a byte.
"""

from __future__ import annotations

import numpy as np


def format_values(values: np.ndarray) -> list[str]:
    if values.dtype.kind != "f":
        return [str(value) for value in values.tolist()]
    texts = [format(value, "g") for value in values.tolist()]
    for index in np.flatnonzero(np.isnan(values) & np.signbit(values)):
        texts[index] = "-nan"  # as glibc prints a NaN whose sign bit is set
    return texts


def resource_text(name: str, values: np.ndarray, verbose: bool = False) -> str:
    """What DxDispatch's print command writes for a 1-D array of a resource's values."""
    texts = format_values(values)
    if not verbose:
        return f"Resource '{name}': {', '.join(texts)}"
    index_width = len(str(values.size))
    bits = values.view(f"u{values.itemsize}").tolist()
    lines = [f"[{index:{index_width}}] {text} (0x{bit:{2 * values.itemsize}X})\n"
             for index, (text, bit) in enumerate(zip(texts, bits))]
    return f"Resource '{name}':\n" + "".join(lines)
