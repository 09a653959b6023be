"""The gradients of the cumulative sum and product: dL/dx from dL/dy = g, for every axis, direction and exclusive
setting.

Along one line x_0 … x_{n−1}, y_i combines the x_j of its window W(i): j ≤ i (increasing), j < i (increasing,
exclusive), j ≥ i or j > i (decreasing). Then dL/dx_k = Σ_i g_i ∂y_i/∂x_k over the i whose window holds k.

Sum: ∂y_i/∂x_k = 1, and k ∈ W(i) exactly when i is in k's window of the opposite direction with the same exclusive
setting: dL/dx is the running sum of g in the opposite direction, as exclusive as the scan.

Product, increasing, inclusive: dL/dx_k = Σ_{i≥k} g_i Π_{j≤i, j≠k} x_j = P_k·S_k, with P_k = Π_{j<k} x_j (the
exclusive increasing product) and S_k = Σ_{i≥k} g_i Π_{k<j≤i} x_j, which satisfies S_{n−1} = g_{n−1},
S_k = x_{k+1}·S_{k+1} + g_k.
Increasing, exclusive: dL/dx_k = Σ_{i>k} g_i Π_{j<i, j≠k} x_j = P_k·T_k, with the same P and
T_k = Σ_{i>k} g_i Π_{k<j<i} x_j: T_{n−1} = 0, T_k = x_{k+1}·T_{k+1} + g_{k+1}.
Decreasing: the same mirrored (k+1 becomes k−1; P is the exclusive decreasing product).

So in all four dL/dx = P ⊙ R: P the exclusive product of x in the scan's direction, and R the linear recurrence

    R_k = x_p·R_p + (g_p if exclusive else g_k),  R_first = (0 if exclusive else g_first),

walked in the opposite direction, p the element walked just before k. It multiplies and adds only, so it is exact
where x has zeros, one or several in a line (y / x would be 0 / 0 there). With x = 1 it is the running sum of g in
the opposite direction: the sum's gradient. The backends lower it as
``prepare_linear_recurrence(a, b, scale, out, axis, reverse, exclusive)``: out = scale ⊙ R, with a for x and b for g
(``dmlops.arrays.cumulative_gradient`` runs it).
FLOAT16 accumulates P and R in float32 and rounds once per output element, as the scans do.
"""

from __future__ import annotations

import numpy as np

from ..types import DataType
from .cumulative import CumulativeOperation

GRADIENT_DATA_TYPES = (DataType.FLOAT32, DataType.FLOAT16)


def reference_gradient(operation: CumulativeOperation, x, grad, axis: int, reverse: bool,
                       exclusive: bool) -> np.ndarray:
    """dL/dx in float64 from the definition: Σ_i g_i ∂y_i/∂x_k, where ∂y_i/∂x_k is, for k in y_i's window, 1 (sum)
    or the product of the window's other elements (product), and 0 elsewhere. O(n³) a line: for tests."""
    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    g = np.moveaxis(np.asarray(grad, np.float64), axis, -1)
    index = np.arange(x.shape[-1])
    i, j = index[:, None], index[None, :]
    window = (j > i if exclusive else j >= i) if reverse else (j < i if exclusive else j <= i)  # x_j in y_i
    if operation == CumulativeOperation.SUM:  # (a member is its word: "sum" too)
        partial = window.astype(np.float64)  # [i, k]
    else:
        others = window[:, None, :] & (index[None, :, None] != index[None, None, :])  # [i, k, j]: j in y_i, j ≠ k
        partial = window * np.prod(np.where(others, x[..., None, None, :], 1.0), axis=-1)
    return np.moveaxis(np.einsum("...i,...ik->...k", g, partial), -1, axis)
