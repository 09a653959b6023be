"""torch.ops.dmlops: registration, opcheck, torch.compile, autograd (CPU tensors here; CUDA tensors on the GPU)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dmlops  # noqa: E402
import dmlops.torch  # noqa: E402,F401  (registers torch.ops.dmlops)
from checks import assert_cumulative_matches  # noqa: E402
from conftest import ON_GPU  # noqa: E402
from dmlops.ops.cumulative_gradient import reference_gradient  # noqa: E402

DEVICE = "cuda" if ON_GPU else "cpu"
VARIANTS = [(False, False), (True, False), (False, True), (True, True)]


def with_zeros(rng, shape, dtype):
    """Values near 1 with zeros: one in some lines, several in others."""
    x = rng.uniform(0.5, 1.5, shape)
    x[rng.random(shape) < 0.15] = 0
    return torch.tensor(x, dtype=dtype, device=DEVICE)


@pytest.mark.parametrize("operator", ["cumulative_sum", "cumulative_product"])
@pytest.mark.parametrize("reverse, exclusive", VARIANTS)
def test_opcheck(operator, reverse, exclusive):
    x = with_zeros(np.random.default_rng(1), (3, 7), torch.float32).requires_grad_()
    torch.library.opcheck(getattr(torch.ops.dmlops, operator), (x, 1, reverse, exclusive))


def test_opcheck_quantized_matmul():
    g = torch.Generator().manual_seed(2)
    a = torch.randint(0, 256, (5, 24), dtype=torch.uint8, generator=g).to(DEVICE)
    b = torch.randint(-128, 128, (24, 8), dtype=torch.int8, generator=g).to(DEVICE)
    scale, zero = torch.tensor(0.05, device=DEVICE), torch.tensor(7, dtype=torch.uint8, device=DEVICE)
    for output_dtype, output_zero in ((None, zero), (torch.int8, None), (torch.int8, zero.view(torch.int8))):
        torch.library.opcheck(torch.ops.dmlops.quantized_linear_matmul,
                              (a, scale, zero, b, torch.rand(8, device=DEVICE) + 0.1, None, scale * 40, output_zero,
                               output_dtype))


@pytest.mark.parametrize("operation", ["sum", "product"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reverse, exclusive", VARIANTS)
def test_gradients_through_the_array_api(operation, dtype, axis, reverse, exclusive):
    """dmlops.cumulative_* on a tensor that requires grad records the operator; its backward is the reference
    gradient (exact with zeros in the lines), in x's type."""
    rng = np.random.default_rng(3)
    x = with_zeros(rng, (4, 9, 6), dtype).requires_grad_()
    grad = torch.tensor(rng.standard_normal((4, 9, 6)), dtype=dtype, device=DEVICE)
    function = dmlops.cumulative_sum if operation == "sum" else dmlops.cumulative_product
    y = function(x, axis, reverse=reverse, exclusive=exclusive)
    assert y.grad_fn is not None
    y.backward(grad)
    expected = reference_gradient(operation, x.detach().cpu().numpy(), grad.cpu().numpy(), axis % 3, reverse,
                                  exclusive)
    assert x.grad.dtype == dtype
    tolerance = 2e-2 if dtype == torch.float16 else 1e-4
    np.testing.assert_allclose(x.grad.float().cpu().numpy(), expected, rtol=tolerance, atol=tolerance)


def test_quantized_matmul_has_no_gradient():
    a = torch.randint(-128, 128, (4, 8), dtype=torch.int8, device=DEVICE)
    b = torch.randint(-128, 128, (8, 4), dtype=torch.int8, device=DEVICE)
    y = dmlops.quantized_linear_matmul(a, 0.1, None, b, 0.1, None, 1.0, None)
    assert y.dtype == torch.uint8 and not y.requires_grad


def test_torch_compile_fullgraph_matches_eager():
    """Functions calling the array API compile whole (fullgraph) and give the eager results."""
    rng = np.random.default_rng(4)
    x = torch.tensor(rng.uniform(0.5, 1.5, (8, 33)), dtype=torch.float32, device=DEVICE)
    a = torch.randint(0, 256, (8, 32), dtype=torch.uint8, device=DEVICE)
    b = torch.randint(-128, 128, (32, 16), dtype=torch.int8, device=DEVICE)
    b_scale = torch.rand(16, device=DEVICE) * 0.01 + 0.005

    def model(x, a, b, b_scale):
        scanned = dmlops.cumulative_sum(x * 2, 1, reverse=True, exclusive=True)
        product = dmlops.cumulative_product(scanned[:, :5] * 0.1 + 1, 0)
        quantized = dmlops.quantized_linear_matmul(a, 0.02, 128, b, b_scale, None, 1.5, 100,
                                                   output_dtype=torch.uint8)
        return scanned, product, quantized

    compiled = torch.compile(model, fullgraph=True, backend="aot_eager" if DEVICE == "cpu" else "inductor")
    (scanned, product, quantized), expected = compiled(x, a, b, b_scale), model(x, a, b, b_scale)
    torch.testing.assert_close(scanned, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(product, expected[1])  # its input may be fused differently (one multiply-add)
    torch.testing.assert_close(quantized, expected[2], rtol=0, atol=0)
    assert_cumulative_matches(model(x, a, b, b_scale)[0].cpu().numpy(), "sum", 2 * x.cpu().numpy(), 1, True, True)


@pytest.mark.parametrize("operator", ["cumulative_sum", "cumulative_product"])
@pytest.mark.parametrize("shape, axis", [((0, 5), 0), ((0, 5), 1), ((3, 0, 2), 2)])
def test_empty_scans(operator, shape, axis):
    """An empty tensor gives an empty result of its sizes and type, through the operator, its checks and autograd."""
    x = torch.ones(shape, device=DEVICE, requires_grad=True)
    torch.library.opcheck(getattr(torch.ops.dmlops, operator), (x, axis, True, True))
    y = getattr(dmlops, operator)(x, axis, reverse=True)
    assert y.shape == x.shape and y.dtype == x.dtype and y.grad_fn is not None
    y.backward(torch.ones_like(y))
    assert x.grad.shape == x.shape and x.grad.dtype == x.dtype


@pytest.mark.parametrize("m, k, n", [(0, 8, 4), (5, 8, 0), (5, 0, 4)])
def test_empty_quantized_matmul(m, k, n):
    """Empty sizes give an empty output; K = 0 gives the requantized output zero point (every accumulator is 0)."""
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=DEVICE)
    b = torch.randint(0, 256, (k, n), dtype=torch.uint8, device=DEVICE)
    scale = torch.tensor(0.05, device=DEVICE)
    zero = torch.arange(-2, m - 2, dtype=torch.int8, device=DEVICE).reshape(m, 1)
    arguments = (a, scale, None, b, torch.rand(n, device=DEVICE) + 0.1, None, scale * 40, zero, torch.int8)
    torch.library.opcheck(torch.ops.dmlops.quantized_linear_matmul, arguments)
    result = torch.ops.dmlops.quantized_linear_matmul(*arguments)
    assert result.shape == (m, n) and result.dtype == torch.int8
    if k == 0:
        torch.testing.assert_close(result, zero.expand(m, n), rtol=0, atol=0)
        torch.testing.assert_close(dmlops.quantized_linear_matmul(a, 0.05, None, b, 0.5, None, 2.0, zero), result,
                                   rtol=0, atol=0)
