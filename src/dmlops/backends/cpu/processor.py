"""The processor, asked once: which instruction sets the CPU backend's kernels may use, and whether the operating
system lets this process use AMX's tile registers. Every other module of the backend asks here.

Features are named as LLVM names them ("avx2", "avx512vnni", "amx-int8"), which is what numba compiles for. They
come from NUMBA_CPU_FEATURES where it is set (numba then compiles for those, whatever the host has), else from the
flags Linux gives in /proc/cpuinfo (read in microseconds: a first call must not wait for LLVM, whose import takes
45 ms), else, without /proc/cpuinfo, from LLVM's own detection of the host. This module imports neither numba nor
LLVM on Linux.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import threading

# Linux's arch_prctl: a process asks for the tile data state (8 KiB a thread) before its first tile instruction;
# without it, the first one faults (SIGILL).
SYS_ARCH_PRCTL = 158  # x86-64
ARCH_GET_XCOMP_PERM, ARCH_REQ_XCOMP_PERM = 0x1022, 0x1023
XFEATURE_XTILEDATA = 18


def llvm_name(flag: str) -> str:
    """A Linux flag's LLVM name: "avx512_vnni" -> "avx512vnni", "amx_int8" -> "amx-int8", "sse4_2" -> "sse4.2"."""
    if flag.startswith("amx_"):
        return flag.replace("_", "-")
    return flag.replace("sse4_", "sse4.").replace("_", "")


@functools.cache
def target_features() -> frozenset[str]:
    """The features of the processor the compiled loops are made for, as LLVM names them."""
    given = os.environ.get("NUMBA_CPU_FEATURES")
    if given:
        return frozenset(feature[1:] for feature in given.split(",") if feature.startswith("+"))
    flags = linux_flags()
    if flags is not None:  # (none on Linux off x86: no kernel here needs any)
        return frozenset(map(llvm_name, flags))
    try:
        import llvmlite.binding as llvm
    except ImportError:  # no numba either: no compiled loops to choose for
        return frozenset()
    return frozenset(feature[1:] for feature in llvm.get_host_cpu_features().flatten().split(",")
                     if feature.startswith("+"))


def linux_flags() -> set[str] | None:
    """The first processor's flags in /proc/cpuinfo (x86 Linux; an empty set on Linux elsewhere), or None where
    there is no /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return set()


AMX_LOCK = threading.Lock()


@functools.cache
def amx_granted() -> bool:
    """Whether this process may run AMX's int8 tile instructions: the processor has them and Linux granted the tile
    data state (asked for here, once a process; a forked child inherits the grant)."""
    if not {"amx-tile", "amx-int8"} <= target_features():
        return False
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    with AMX_LOCK:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0:
                return False
            permitted = ctypes.c_uint64()
            if libc.syscall(SYS_ARCH_PRCTL, ARCH_GET_XCOMP_PERM, ctypes.byref(permitted)) != 0:
                return False
        except (OSError, AttributeError):
            return False
    return bool(permitted.value >> XFEATURE_XTILEDATA & 1)


# -- the vectors the compiled scans use ------------------------------------------------------------------------

STREAM_STORES = platform.machine().lower() in ("x86_64", "amd64")  # the fence after them is an x86 instruction
VECTOR_BYTES = 32  # an AVX vector: a streaming store writes this many bytes at an address aligned to them
HALF_LANES = 8  # FLOAT16 converted 8 at a time (F16C: 128 bits of halves, 256 of floats)
# The vector a contiguous line is walked by (``vector_lanes``): 64 bytes where the processor has AVX-512, 32
# elsewhere. A vector of twice the elements takes one step more of its tree and one conversion for twice the
# FLOAT16 elements (one Zen 5 core: FLOAT16 lines 19-22 → 24-28 GB/s). Both engines walk the same vectors, so
# their bits are the same on a machine; they differ from those of a machine with the other width.
WALK_BYTES = 64 if "avx512f" in target_features() else 32
