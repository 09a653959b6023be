"""The one cache of plans: what a call's layout decided, kept for the next call of the same layout.

A plan is a callable kept for one layout of a call's arguments: the front-ends (the array API, ``torch.ops.dmlops``,
Dask's chunks, the operator API and the DxDispatch runner through it) find it by a key made of the operation, its
options and the layout of each argument (``layout``), validating and lowering only where none is kept. A plan holds
what its launches need, and nothing of the first call's data. Nothing else remembers layout decisions.
"""

from __future__ import annotations

import numpy as np

PLANS_KEPT = 256
_plans: dict = {}
_generation = [0]  # counts ``forget``s: a plan lowered before one is not kept

UNPLANNED = object()  # the layout of an argument no plan can hold


def get(key):
    """The plan kept under ``key`` (None: none is, or the key is None)."""
    return _plans.get(key) if key is not None else None


def generation() -> int:
    """Read before lowering a plan, and given to ``keep``."""
    return _generation[0]


def keep(key, plan, since: int) -> None:
    """Keep ``plan`` under ``key``, unless plans were forgotten since ``generation()`` read ``since``."""
    if key is None or plan is None or since != _generation[0]:
        return
    if len(_plans) >= PLANS_KEPT:
        _plans.clear()
    _plans[key] = plan


def forget() -> None:
    """Drop every plan: a backend's engines changed (its compiled code loaded), so layouts are lowered again."""
    _generation[0] += 1
    _plans.clear()


def _tensor_layout(value):
    if value.dim() == 0:  # (scales and zero points, often: two reads fewer)
        return type(value), value.dtype, value.device, value.data_ptr() & 15
    return type(value), value.dtype, value.shape, value.stride(), value.device, value.data_ptr() & 15


def _array_layout(value):
    flags = value.flags  # (compiled loops are compiled for arrays as aligned as those they were first given)
    return np.ndarray, value.dtype, value.shape, value.strides, flags.writeable, flags.aligned


def _own_layout(value):
    return value.planned_layout  # an object that never changes its layout says it once


def _by_value(value):
    return type(value), value  # numbers: validated once, by value


def _by_type(value):
    return (type(value),)  # NumPy scalars: a plan takes them as the 0-d arrays a first call made of them


def _unplanned(value):
    return UNPLANNED


def _layout_function(kind: type):
    """How the layout of values of ``kind`` is read: by looking at the type once (its module and bases), with no
    import; NumPy arrays by their sizes, strides, writability and alignment; torch tensors by their sizes, strides,
    device and 16-byte alignment; objects whose layout never changes (a backend's kept operands) by their own
    ``planned_layout``."""
    if kind is np.ndarray:
        return _array_layout
    if issubclass(kind, np.ndarray):
        return _unplanned
    if kind in (int, float, type(None)):
        return _by_value
    if issubclass(kind, np.generic):
        return _by_type
    if hasattr(kind, "planned_layout"):
        return _own_layout
    if any(base.__name__ == "Tensor" and base.__module__ == "torch" for base in kind.__mro__):
        return _tensor_layout
    return _unplanned


_LAYOUT_FUNCTIONS: dict = {}  # by type, found once (``_layout_function``)


def _learned(kind: type):
    function = _LAYOUT_FUNCTIONS[kind] = _layout_function(kind)
    return function


def layout(value):
    """What a plan depends on in one argument; ``UNPLANNED`` where no plan can hold it."""
    kind = type(value)
    return (_LAYOUT_FUNCTIONS.get(kind) or _learned(kind))(value)


def is_torch_tensor(value) -> bool:
    """Whether value is a torch tensor (or a subclass's, a parameter or a tensor torch.compile traces), by its type's
    module: no import, and simple enough for torch.compile to trace."""
    return type(value).__module__.partition(".")[0] == "torch"


def key(operation, options, arguments):
    """The key of a call's plan, or None where it can have none."""
    # ``layout`` written out in the comprehension: one Python call fewer an argument, on every call's path
    functions = _LAYOUT_FUNCTIONS
    layouts = tuple([(functions.get(type(value)) or _learned(type(value)))(value) for value in arguments])
    return None if UNPLANNED in layouts else (operation, options, layouts)
