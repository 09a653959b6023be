"""The integer GEMM's kernels as data, and which of them runs here (as MLAS's platform dispatch picks its kernels):
what each needs of the processor (``processor``), the shape of its block of sums, how it packs B. No numba here:
qmatmul chooses before the compiled code is loaded."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import numpy as np

from ...types import ValidationError
from .processor import amx_granted, target_features

BLOCK_BYTES = 32 << 10  # k_block × a block's columns of B, which a vector kernel streams from L1 (``avx2``)
# AMX's k_block: bytes of K a block of tiles takes between loading and storing its sums (32 × TILE_K_RUN of A:
# 64 KiB, kept in L1 and L2 while the block walks B's columns: ``amx``)
TILE_K_RUN = 2048
PANEL_BYTES = 256 << 10  # a panel of B's column blocks, kept in L2


@dataclass(frozen=True)
class Kernel:
    name: str
    needs: tuple  # sets of LLVM target features; the processor must have every feature of one of them
    instruction: str  # the LLVM intrinsic
    vector_bits: int
    bytes: bool  # uint8 × int8 in groups of 4 (vpdpbusd), else int16 × int16 in pairs (vpmaddwd)
    rows: int = 6
    vectors: int = 2  # column vectors of one kernel call
    direct: bool = False  # has ``direct_products``: B read as it lies, for A of at most DIRECT_ROWS rows
    tiles: bool = False  # AMX's tiles (``amx``)
    depth: int = 0  # what K is padded to in the packed operands (0: the group; a tile of A holds 64 bytes of K)
    pack_blocks: int = 1  # column blocks that B's packing takes at a time in vectors (AMX's: 64 columns)

    @property
    def group(self) -> int:
        """Consecutive k in one 32-bit lane."""
        return 4 if self.bytes else 2

    @property
    def k_multiple(self) -> int:
        """What K is padded to in the packed operands."""
        return self.depth or self.group

    @property
    def columns(self) -> int:
        return self.vectors * self.vector_bits // 32

    @property
    def element(self):
        """The packed element types of A and of B."""
        return (np.uint8, np.int8) if self.bytes else (np.int16, np.int16)

    def __post_init__(self):
        # the byte kernels' packing of B stores a vector of columns into one block of them, or into whole blocks
        vector_columns = self.vector_bits // 8
        if self.bytes and self.columns % vector_columns and vector_columns % self.columns:
            raise ValueError(f"kernel {self.name}: {self.columns} columns a block against {vector_columns} a vector")

    @property
    def k_block(self) -> int:
        """The run of K a kernel takes at a time: for the vector kernels, BLOCK_BYTES of a block of B, in whole
        groups (a run of K takes groups only); for AMX's tiles, TILE_K_RUN."""
        if self.tiles:
            return TILE_K_RUN
        groups = BLOCK_BYTES // (self.columns * np.dtype(self.element[1]).itemsize * self.group)
        return groups * self.group

    @property
    def panel_blocks(self) -> int:
        return PANEL_BYTES // BLOCK_BYTES


# Fastest first.
KERNELS = (
    Kernel("amx", ({"amx-tile", "amx-int8", "avx512bw", "avx512vnni"},), "tdpb", 512, True, rows=32, vectors=1,
           tiles=True, depth=64, pack_blocks=4),
    Kernel("avx512-vnni", ({"avx512vnni"},), "llvm.x86.avx512.vpdpbusd.512", 512, True, vectors=4, direct=True),
    Kernel("avx-vnni", ({"avxvnni"}, {"avx512vnni", "avx512vl"}), "llvm.x86.avx512.vpdpbusd.256", 256, True),
    Kernel("avx512bw", ({"avx512bw"},), "llvm.x86.avx512.pmaddw.d.512", 512, False, vectors=4),
    Kernel("avx2", ({"avx2"},), "llvm.x86.avx2.pmadd.wd", 256, False),
)
KERNELS_BY_NAME = {kernel.name: kernel for kernel in KERNELS}


def numba_installed() -> bool:
    try:
        return importlib.util.find_spec("numba") is not None
    except ValueError:  # (numba's module set to None, as the tests do to run as where it is not installed)
        return False


NUMBA = numba_installed()


def runnable_kernels() -> list[Kernel]:
    """The kernels whose instructions the processor numba compiles for has, fastest first."""
    if not NUMBA:
        return []
    features = target_features()
    return [kernel for kernel in KERNELS if any(needed <= features for needed in kernel.needs)
            and (not kernel.tiles or amx_granted())]


RUNNABLE = runnable_kernels()


def chosen_kernel() -> Kernel | None:
    """The fastest runnable kernel, or the one DMLOPS_CPU_KERNEL names ("float32": none, the float32 BLAS path)."""
    name = os.environ.get("DMLOPS_CPU_KERNEL")
    if not name:
        return RUNNABLE[0] if RUNNABLE else None
    return kernel_named(name)


def kernel_named(name: str) -> Kernel | None:
    """The runnable kernel of that name, or None for "float32"."""
    if name == "float32":
        return None
    for kernel in RUNNABLE:
        if kernel.name == name:
            return kernel
    raise ValidationError(f"CPU quantized matmul: kernel {name!r} cannot run here "
                          f"(runnable: {', '.join(kernel.name for kernel in RUNNABLE) or 'none'}, float32)")


KERNEL = chosen_kernel()
# A of at most this many rows is multiplied by the fastest kernel of vectors where KERNEL is AMX's and was not forced
# (DMLOPS_CPU_KERNEL): a tile takes 16 rows of A, and a block of sums 32. With a large B (``large_b``), more rows
# than FEWEST_TILE_ROWS_OF_LARGE_B go to the tiles. On 2 cores of a Xeon with AMX, µs (tiles / vectors): × a 4096²
# int8 B prepared, then packed in the call: 1 row 438 / 397, 1046 / 556; 4 rows 445 / 418, 1028 / 683; 8 rows 461 /
# 536, 1072 / 982; 9 rows 462 / 539, 1058 / 1096; 16 rows 461 / 662, 1032 / 1228; 16 × 1024 × 1024 69 / 88; but 16 ×
# 256 × 64 15.0 / 13.2, and a first such product compiled 0.6 s longer on tiles (benchmarks/RESULTS.md).
FEWEST_TILE_ROWS = 16
FEWEST_TILE_ROWS_OF_LARGE_B = 8


def kernel_for_rows(m: int, large_b: bool = False) -> Kernel | None:
    """KERNEL, or for A of at most FEWEST_TILE_ROWS rows (FEWEST_TILE_ROWS_OF_LARGE_B where ``large_b``), the
    fastest runnable kernel of vectors where KERNEL is AMX's and DMLOPS_CPU_KERNEL does not name it."""
    fewest = FEWEST_TILE_ROWS_OF_LARGE_B if large_b else FEWEST_TILE_ROWS
    if KERNEL is None or not KERNEL.tiles or m > fewest or os.environ.get("DMLOPS_CPU_KERNEL"):
        return KERNEL
    return next((kernel for kernel in RUNNABLE if not kernel.tiles), KERNEL)
