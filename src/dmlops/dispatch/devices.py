"""The devices a model can run on, as DxDispatch lists its adapters: the CPU (the cpu backend) and each CUDA GPU that
PyTorch sees (the cuda backend). ``-a`` picks one by a substring of its id or name, without regard to case."""

from __future__ import annotations

import importlib.util
import os
import platform
from dataclasses import dataclass

from ..types import ValidationError


@dataclass(frozen=True)
class ComputeDevice:
    id: str  # "cpu", "cuda:0"
    name: str  # the processor's or the GPU's model name
    backend: str  # "cpu" or "cuda"
    gpu: bool
    memory_bytes: int
    cuda_index: int | None = None


def cpu_name() -> str:
    """The processor's model name, as /proc/cpuinfo gives it (else as platform does)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _system_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _gpus() -> list[ComputeDevice]:
    if not (importlib.util.find_spec("torch") and importlib.util.find_spec("triton")):
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    return [ComputeDevice(f"cuda:{index}", torch.cuda.get_device_name(index), "cuda", True,
                          torch.cuda.get_device_properties(index).total_memory, index)
            for index in range(torch.cuda.device_count())]


def devices() -> list[ComputeDevice]:
    return [ComputeDevice("cpu", cpu_name(), "cpu", False, _system_memory()), *_gpus()]


def choose(adapter: str | None, backend: str | None) -> ComputeDevice:
    """The device ``-a`` names (the first whose id or name holds it), else the first of ``--backend`` (default
    cpu). The cuda backend with no GPU runs under Triton's interpreter where TRITON_INTERPRET=1 is set."""
    found = devices()
    if adapter is not None:
        matches = [device for device in found if adapter.lower() in f"{device.id} {device.name}".lower()]
        if not matches:
            listed = ", ".join(f"'{device.id}' ({device.name})" for device in found)
            raise ValidationError(f"-a '{adapter}' matches no device; the devices here: {listed}")
        if backend is not None and matches[0].backend != backend:
            raise ValidationError(f"-a '{adapter}' picks {matches[0].id}, which the {backend} backend does not "
                                  f"run on")
        return matches[0]
    backend = backend or "cpu"
    for device in found:
        if device.backend == backend:
            return device
    if os.environ.get("TRITON_INTERPRET") == "1":
        return ComputeDevice("cuda", f"{cpu_name()} (Triton's interpreter)", "cuda", False, _system_memory())
    raise ValidationError("--backend cuda: PyTorch sees no CUDA GPU here")


def adapters_text() -> str:
    """What -s prints: each device, with what DxDispatch shows of an adapter that applies here."""
    return "".join(f"{device.name}\n-Device: {device.id}\n-GPU: {str(device.gpu).lower()}\n"
                   f"-Memory: {device.memory_bytes / 2**30:.2f} GB\n\n" for device in devices())
