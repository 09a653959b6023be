"""The devices a model can run on, as DxDispatch lists its adapters: those of each of dmlops's backends that can run
here, the default backend's first. ``-a`` picks one by a substring of its id or name, without regard to case."""

from __future__ import annotations

from collections.abc import Iterator

from ..core import registry
from ..core.host import cpu_name  # noqa: F401  (the name of the host's device)
from ..core.registry import ComputeDevice
from ..types import ValidationError


def devices() -> Iterator[ComputeDevice]:
    """The devices of the backends that can run here (a backend that cannot load runs on none), each backend loaded
    as they are reached: the default's first, so that a run on it loads no other."""
    for name in registry.built_in():
        if not registry.installed(name):
            continue
        try:
            loaded = registry.backend(name)
        except ValidationError:
            continue
        yield from loaded.devices()


def choose(adapter: str | None, backend: str | None) -> ComputeDevice:
    """The device ``-a`` names (the first whose id or name holds it), else the first of ``--backend`` (default: the
    default backend's), else where that backend runs without a device of its own (the cuda backend under Triton's
    interpreter)."""
    if adapter is not None:
        found = list(devices())
        matches = [device for device in found if adapter.lower() in f"{device.id} {device.name}".lower()]
        if not matches:
            listed = ", ".join(f"'{device.id}' ({device.name})" for device in found)
            raise ValidationError(f"-a '{adapter}' matches no device; the devices here: {listed}")
        if backend is not None and matches[0].backend != backend:
            raise ValidationError(f"-a '{adapter}' picks {matches[0].id}, which the {backend} backend does not "
                                  f"run on")
        return matches[0]
    backend = backend or registry.default()
    for device in devices():
        if device.backend == backend:
            return device
    if not registry.installed(backend):
        raise ValidationError(f"--backend {backend}: {registry.describe(backend)}")
    chosen = registry.backend(backend)
    try:
        return chosen.device()
    except ValidationError as error:
        raise ValidationError(f"--backend {backend}: {error}") from None


def use(device: ComputeDevice) -> None:
    """Make the device the one its backend uses."""
    registry.backend(device.backend).use(device)


def adapters_text() -> str:
    """What -s prints: each device, with what DxDispatch shows of an adapter that applies here."""
    return "".join(f"{device.name}\n-Device: {device.id}\n-GPU: {str(device.is_gpu).lower()}\n"
                   f"-Memory: {device.memory / 2**30:.2f} GB\n\n" for device in devices())
