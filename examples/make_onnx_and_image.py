"""Writes the ONNX model and the image that examples/onnx_model.json and examples/image_cumulative_product.json use:
python examples/make_onnx_and_image.py (needs the onnx package and Pillow)."""

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
from PIL import Image

HERE = Path(__file__).resolve().parent


def onnx_model():
    """sums = CumSum(x) and products = CumProd(x, reverse) along x's last axis, x {N, 4} (N free); y = QLinearMatMul of
    q {2, 4} (uint8) and a constant int8 weight {4, 3} with scales per column."""
    constants = [
        numpy_helper.from_array(np.array(-1, np.int64), "axis"),
        numpy_helper.from_array(np.array(0.05, np.float32), "q_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "q_zero_point"),
        numpy_helper.from_array(np.array([[1, -2, 3], [4, 5, -6], [-7, 8, 9], [10, -11, 12]], np.int8), "w"),
        numpy_helper.from_array(np.array([0.5, 0.25, 0.125], np.float32), "w_scale"),
        numpy_helper.from_array(np.array([0, 1, -1], np.int8), "w_zero_point"),
        numpy_helper.from_array(np.array(0.1, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "y_zero_point"),
    ]
    nodes = [
        helper.make_node("CumSum", ["x", "axis"], ["sums"]),
        helper.make_node("CumProd", ["x", "axis"], ["products"], reverse=1),
        helper.make_node("QLinearMatMul", ["q", "q_scale", "q_zero_point", "w", "w_scale", "w_zero_point",
                                           "y_scale", "y_zero_point"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "cumulative_and_quantized",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("q", TensorProto.UINT8, [2, 4])],
        [helper.make_tensor_value_info("sums", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("products", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 3])],
        constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)], producer_name="dmlops examples")
    model.ir_version = 10
    return model


def image():
    """A 4 × 4 swatch of one colour: scaled to 2 × 2, its values stay exactly pixel / 255."""
    return Image.fromarray(np.full((4, 4, 3), (255, 128, 51), np.uint8))


if __name__ == "__main__":
    save(onnx_model(), str(HERE / "cumulative_and_quantized.onnx"))
    image().save(HERE / "swatch.png")
