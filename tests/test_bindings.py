"""Buffer bindings of the operator API: what may be bound, where, how often, and every binding rule."""

import numpy as np
import pytest

from dmlops import (AxisDirection, BufferBinding, CumulativeSummationOperatorDesc, DataType, Device,
                    QuantizedLinearMatrixMultiplyOperatorDesc, TensorDesc, TensorFlags)

from checks import rejects

SUM, QMM = "DML_OPERATOR_CUMULATIVE_SUMMATION", "DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY"
X = np.array([3, -1, 4, 1, -5, 9, 2, -6], dtype=np.float32)
X_SUM = np.cumsum(X).tolist()


def scan(x_desc=None, out_desc=None, level="6_4"):
    tensor = TensorDesc(DataType.FLOAT32, [8])
    desc = CumulativeSummationOperatorDesc(x_desc or tensor, out_desc or tensor, 0, AxisDirection.INCREASING, False)
    return Device("cpu", level).compile_operator(desc)


@pytest.mark.parametrize("make_input", [
    lambda: X,
    lambda: X.astype(np.float64).astype(np.float32).view(np.uint8),
    lambda: X.view(np.int16).reshape(4, 4),
    lambda: X.tobytes(),
    lambda: bytearray(X.tobytes()),
    lambda: memoryview(X.tobytes()),
    lambda: BufferBinding(X),
    lambda: BufferBinding(np.concatenate([np.zeros(4, np.float32), X]), 16),
    lambda: BufferBinding(np.concatenate([np.zeros(8, np.float32), X, np.zeros(3, np.float32)]), 32, 32),
], ids=["float32", "uint8", "int16 2-D", "bytes", "bytearray", "memoryview", "binding", "offset", "offset+size"])
def test_inputs_of_every_kind(make_input):
    out = bytearray(32)
    scan().execute([make_input()], [out])
    assert np.frombuffer(out, np.float32).tolist() == X_SUM


@pytest.mark.parametrize("kind", ["bytearray", "float64 array", "memoryview", "uint8 array"])
def test_outputs_of_every_kind_at_offsets(kind):
    memory = bytearray(96)
    buffer = {"bytearray": memory, "memoryview": memoryview(memory),
              "float64 array": np.frombuffer(memory, np.float64), "uint8 array": np.frombuffer(memory, np.uint8)}[kind]
    scan().execute([X], [BufferBinding(buffer, 48, 32)])
    assert np.frombuffer(memory, np.float32)[12:20].tolist() == X_SUM
    assert memory[:48] == bytes(48) and memory[80:] == bytes(16)


def test_alignment_raises_the_offset_multiple():
    x_desc = TensorDesc(DataType.FLOAT32, [8], guaranteed_base_offset_alignment=64)
    memory = np.zeros(24, np.float32)
    memory[16:] = X
    out = np.zeros(8, np.float32)
    scan(x_desc).execute([BufferBinding(memory, 64)], [out])
    assert out.tolist() == X_SUM
    rejects([SUM, "input_tensor", "offset 32", "multiple of 64"],
            lambda: scan(x_desc).execute([BufferBinding(memory, 32)], [out]))


def test_total_tensor_size_larger_than_computed():
    out_desc = TensorDesc(DataType.FLOAT32, [8], total_tensor_size_in_bytes=48)
    out = np.full(12, -1.0, np.float32)
    scan(out_desc=out_desc).execute([X], [out])
    assert out[:8].tolist() == X_SUM and out[8:].tolist() == [-1.0] * 4  # only elements are written
    rejects([SUM, "output_tensor", "holds 32 bytes", "total_tensor_size_in_bytes = 48"],
            lambda: scan(out_desc=out_desc).execute([X], [np.zeros(8, np.float32)]))


def test_in_place_through_the_same_memory():
    memory = bytearray(X.tobytes())
    scan().execute([memory], [memoryview(memory)])  # two objects, one memory, one layout: in place
    assert np.frombuffer(memory, np.float32).tolist() == X_SUM
    padded = TensorDesc(DataType.FLOAT32, [2, 4], [8, 2])
    desc = CumulativeSummationOperatorDesc(padded, padded, 1, AxisDirection.DECREASING, True)
    values = np.arange(16, dtype=np.float32)
    Device().compile_operator(desc).execute([values], [values])
    assert values.tolist() == [12, 1, 10, 3, 6, 5, 0, 7, 36, 9, 26, 11, 14, 13, 0, 15]  # odd elements untouched


def test_execute_again_with_other_bindings():
    op = scan()
    first, second = np.zeros(8, np.float32), np.zeros(8, np.float32)
    op.execute([X], [first])
    op.execute([X[::-1].copy()], [second])
    assert first.tolist() == X_SUM and second.tolist() == np.cumsum(X[::-1]).tolist()


def owned_scan():
    owned = TensorDesc(DataType.FLOAT32, [8], flags=TensorFlags.OWNED_BY_DML)
    return scan(owned)


def test_owned_by_dml_input_is_kept_at_initialize():
    op = owned_scan()
    source = X.copy()
    op.initialize([source])
    source[:] = 0  # DirectML copied the tensor into its persistent resource
    out = np.zeros(8, np.float32)
    op.execute([None], [out])
    assert out.tolist() == X_SUM
    op.execute([None], [out])
    assert out.tolist() == X_SUM


@pytest.mark.parametrize("words, run", [
    (["initialize first"], lambda op: op.execute([None], [np.zeros(8, np.float32)])),
    (["input_tensor", "bind it at initialization"], lambda op: op.initialize([None])),
    (["input_tensor", "bind it at initialization"], lambda op: op.initialize(None)),
    (["initialize takes 1 bindings"], lambda op: op.initialize([X, X])),
    (["input_tensor", "bound at initialization, not at execution"],
     lambda op: (op.initialize([X]), op.execute([X], [np.zeros(8, np.float32)]))),
])
def test_owned_by_dml_rejections(words, run):
    rejects([SUM, *words], lambda: run(owned_scan()))


def test_only_owned_tensors_are_bound_at_initialize():
    op = scan()
    op.initialize(None)
    op.initialize([None])
    rejects([SUM, "input_tensor", "only OWNED_BY_DML"], lambda: op.initialize([X]))


def read_only(array):
    array.flags.writeable = False
    return array


@pytest.mark.parametrize("words, inputs, outputs", [
    (["execute inputs takes 1 bindings", "got 2"], [X, X], [np.zeros(8, np.float32)]),
    (["execute outputs takes 1 bindings", "got 0"], [X], []),
    (["input_tensor", "binding is required"], [None], [np.zeros(8, np.float32)]),
    (["output_tensor", "binding is required"], [X], [None]),
    (["input_tensor", "offset 8", "multiple of 16"], [BufferBinding(np.zeros(16, np.float32), 8)],
     [np.zeros(8, np.float32)]),
    (["input_tensor", "offset -16 is negative"], [BufferBinding(np.zeros(16, np.float32), -16)],
     [np.zeros(8, np.float32)]),
    (["input_tensor", "offset -16 is negative"], [BufferBinding(np.zeros(16, np.float32), -16, 16)],
     [np.zeros(8, np.float32)]),
    (["input_tensor", "offset"], [BufferBinding(np.zeros(16, np.float32), 16.0)], [np.zeros(8, np.float32)]),
    (["input_tensor", "32 bytes at offset 48", "past the end", "64 bytes"],
     [BufferBinding(np.zeros(16, np.float32), 48, 32)], [np.zeros(8, np.float32)]),
    (["input_tensor", "offset 1600000000 is past the end", "64 bytes"],
     [BufferBinding(np.zeros(16, np.float32), 1600000000)], [np.zeros(8, np.float32)]),
    (["input_tensor", "offset 1600000000 is past the end", "64 bytes"],
     [BufferBinding(np.zeros(16, np.float32), 1600000000, 16)], [np.zeros(8, np.float32)]),
    (["input_tensor", "size -4 is negative"], [BufferBinding(np.zeros(16, np.float32), 0, -4)],
     [np.zeros(8, np.float32)]),
    (["input_tensor", "holds 16 bytes", "32"], [BufferBinding(np.zeros(16, np.float32), 48)],
     [np.zeros(8, np.float32)]),
    (["input_tensor", "holds 28 bytes"], [np.zeros(7, np.float32)], [np.zeros(8, np.float32)]),
    (["output_tensor", "holds 16 bytes"], [X], [BufferBinding(np.zeros(8, np.float32), 0, 16)]),
    (["input_tensor", "C-contiguous"], [np.zeros(16, np.float32)[::2]], [np.zeros(8, np.float32)]),
    (["input_tensor", "memoryview", "C-contiguous"], [memoryview(np.zeros(16, np.float32))[::2]],
     [np.zeros(8, np.float32)]),
    (["output_tensor", "memoryview", "C-contiguous"], [X], [memoryview(np.zeros(16, np.float32))[::2]]),
    (["input_tensor", "list", "not a buffer"], [list(X)], [np.zeros(8, np.float32)]),
    (["input_tensor", "int", "not a buffer"], [7], [np.zeros(8, np.float32)]),
    (["input_tensor", "Python objects", "not a buffer"], [X.astype(object)], [np.zeros(8, np.float32)]),
    (["output_tensor", "read-only"], [X], [bytes(32)]),
    (["output_tensor", "read-only"], [X], [read_only(np.zeros(8, np.float32))]),
])
def test_binding_rejections(words, inputs, outputs):
    rejects([SUM, *words], lambda: scan().execute(inputs, outputs))


def test_output_may_alias_its_input_only_exactly():
    memory = np.zeros(16, np.float32)
    memory[:8] = X
    rejects([SUM, "output_tensor", "only exactly (in place)", "overlaps input_tensor"],
            lambda: scan().execute([memory], [BufferBinding(memory, 16)]))
    broadcast = TensorDesc(DataType.FLOAT32, [8], [0])
    rejects([SUM, "output_tensor", "only exactly"], lambda: scan(broadcast).execute([memory], [memory]))
    padded = TensorDesc(DataType.FLOAT32, [8], [2])
    rejects([SUM, "output_tensor", "only exactly"], lambda: scan(out_desc=padded).execute([memory], [memory]))
    scan().execute([memory], [BufferBinding(memory, 32)])  # disjoint halves of one buffer: fine
    assert memory[8:].tolist() == X_SUM


def qmm(**changes):
    scale = TensorDesc(DataType.FLOAT32, [1, 1])
    data = TensorDesc(DataType.INT8, [4, 4])
    fields = dict(a_tensor=data, a_scale_tensor=scale, a_zero_point_tensor=None, b_tensor=data,
                  b_scale_tensor=scale, b_zero_point_tensor=None, output_scale_tensor=scale,
                  output_zero_point_tensor=TensorDesc(DataType.INT8, [1, 1]), output_tensor=data)
    return Device().compile_operator(QuantizedLinearMatrixMultiplyOperatorDesc(**{**fields, **changes}))


def test_quantized_matmul_binding_rules():
    a = np.arange(-8, 8, dtype=np.int8)
    one = np.ones(1, np.float32)
    zero = np.zeros(4, np.int8)
    out = np.zeros(16, np.int8)
    qmm().execute([a, one, None, a, one, None, one, zero], [out])
    assert out.reshape(4, 4).tolist() == np.clip(a.reshape(4, 4).astype(int) @ a.reshape(4, 4), -128, 127).tolist()
    rejects([QMM, "a_zero_point_tensor", "no such tensor", "bind None"],
            lambda: qmm().execute([a, one, zero, a, one, None, one, zero], [out]))
    rejects([QMM, "output_zero_point_tensor", "binding is required"],
            lambda: qmm().execute([a, one, None, a, one, None, one, None], [out]))
    rejects([QMM, "execute inputs takes 8 bindings"], lambda: qmm().execute([a, one, a, one, one], [out]))
    rejects([QMM, "output_tensor", "may not share memory", "b_tensor"],
            lambda: qmm().execute([a, one, None, out, one, None, one, zero], [out]))
    memory = np.zeros(64, np.int8)
    rejects([QMM, "output_tensor", "may not share memory", "a_scale_tensor"],
            lambda: qmm().execute([a, BufferBinding(memory, 16), None, a, one, None, one, zero],
                                  [BufferBinding(memory, 16)]))


def test_quantized_matmul_owned_by_dml_b_bound_once():
    owned = TensorDesc(DataType.INT8, [4, 4], flags=TensorFlags.OWNED_BY_DML)
    op = qmm(b_tensor=owned)
    b = np.arange(16, dtype=np.int8)
    one, zero = np.ones(1, np.float32), np.zeros(4, np.int8)
    op.initialize([None, None, None, b, None, None, None, None])
    b[:] = -1
    out = np.zeros(16, np.int8)
    op.execute([np.eye(4, dtype=np.int8), one, None, None, one, None, one, zero], [out])
    assert out.tolist() == list(range(16))
    rejects([QMM, "b_tensor", "bound at initialization, not at execution"],
            lambda: op.execute([np.eye(4, dtype=np.int8), one, None, b, one, None, one, zero], [out]))
    rejects([QMM, "a_tensor", "only OWNED_BY_DML"],
            lambda: op.initialize([b, None, None, b, None, None, None, None]))
