"""The host machine as a device: its processor's model name and its memory."""

from __future__ import annotations

import os
import platform


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


def system_memory() -> int:
    """The host's memory in bytes (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
