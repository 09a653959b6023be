"""What the CUDA backend's modules share: the interpreter switch, dtype tables, host arithmetic and device
checks."""

from __future__ import annotations

import dataclasses
import functools
import os

import torch
import triton
import triton.language as tl

from ...types import DataType, ValidationError, no_data_type

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

TORCH_DTYPES = {
    DataType.FLOAT32: torch.float32, DataType.FLOAT16: torch.float16, DataType.FLOAT64: torch.float64,
    DataType.UINT8: torch.uint8, DataType.INT8: torch.int8, DataType.UINT16: torch.uint16,
    DataType.INT16: torch.int16, DataType.UINT32: torch.uint32, DataType.INT32: torch.int32,
    DataType.UINT64: torch.uint64, DataType.INT64: torch.int64,
}
DATA_TYPES = {dtype: data_type for data_type, dtype in TORCH_DTYPES.items()}
TRITON_TYPES = {torch.float32: tl.float32, torch.float64: tl.float64, torch.int32: tl.int32, torch.int64: tl.int64}


def cdiv(a: int, b: int) -> int:
    """⌈a / b⌉ on the host (``triton.cdiv`` is a constexpr function: microseconds a call from Python)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The least power of two ≥ n (at least 1), on the host."""
    return 1 << max(0, n - 1).bit_length()


@dataclasses.dataclass(frozen=True)
class Hardware:
    """What default tunings are chosen by: the device's multiprocessors, their clock and its memory's bandwidth."""

    processors: int
    clock: float  # a multiprocessor's cycles a second, at most
    memory_bandwidth: float  # bytes a second, nominal (memory clock × bus width, both edges)


H100 = Hardware(132, 1.98e9, 3.35e12)  # what tunings are chosen for where there is no device (Triton's interpreter)


@functools.cache
def hardware(device) -> Hardware:
    if device.type != "cuda":
        return H100
    properties = triton.runtime.driver.active.utils.get_device_properties(
        torch.cuda.current_device() if device.index is None else device.index)
    return Hardware(properties["multiprocessor_count"], properties["sm_clock_rate"] * 1e3,
                    properties["mem_clock_rate"] * 1e3 * 2 * properties["mem_bus_width"] / 8)


WAVE_FILL = 0.9  # how full the waves of programs a tiling is chosen for should be (wave_fill)


def wave_fill(programs: int, processors: int) -> float:
    """How full the waves are when ``programs`` programs run one a multiprocessor at a time: 1 where the last wave is
    full."""
    return programs / (cdiv(programs, processors) * processors)


def runs_here(tensor) -> bool:
    """Kernels run on CUDA tensors; CPU tensors only under Triton's interpreter."""
    return tensor.device.type == "cuda" or INTERPRETED


def check_device(tensor, where: str) -> None:
    if not runs_here(tensor):
        raise ValidationError(f"{where}: a tensor on {tensor.device}; the cuda backend takes CUDA tensors "
                              f"(CPU tensors only under TRITON_INTERPRET=1)")


def check_devices(operator: str, **tensors) -> None:
    """The tensors of one operator run where the kernels can run them, all on one device."""
    first_field, first = next(iter(tensors.items()))
    for field, tensor in tensors.items():
        check_device(tensor, f"{operator}.{field}")
        if tensor.device != first.device:
            raise ValidationError(f"{operator}.{field}: on {tensor.device}, but {first_field} is on {first.device}; "
                                  f"the tensors of one operator must be on one device")


def data_type(array) -> DataType:
    if array.dtype not in DATA_TYPES:
        raise no_data_type(f"torch dtype {array.dtype}")
    return DATA_TYPES[array.dtype]
