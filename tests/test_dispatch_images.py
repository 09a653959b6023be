"""Images in DxDispatch models: .png and .jpg read into FLOAT32 / FLOAT16 values pixel / 255 (N, C, H, W, scaled to
resampleSize), written from them, and every refusal."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from dmlops.dispatch import ModelError, read_model, run_model
from dmlops.dispatch.printing import resource_text

Image = pytest.importorskip("PIL.Image")


def run(tmp_path: Path, model: dict) -> str:
    path = tmp_path / "model.json"
    path.write_text(json.dumps(model))
    out = io.StringIO()
    run_model(read_model(path), output_dir=tmp_path, out=out)
    return out.getvalue()


def error(tmp_path: Path, model: dict) -> str:
    with pytest.raises(ModelError) as info:
        run(tmp_path, model)
    return str(info.value)


def image_resource(source: str, data_type="FLOAT32", **fields) -> dict:
    return {"initialValuesDataType": data_type, "initialValues": {"sourcePath": source}, **fields}


def printed_image(source: str, data_type="FLOAT32", **fields) -> dict:
    return {"resources": {"Image": image_resource(source, data_type, **fields)}, "dispatchables": {},
            "commands": [{"type": "print", "resource": "Image"}]}


def values_model(values: np.ndarray, target: str, data_type="FLOAT32", **fields) -> dict:
    return {"resources": {"V": {"initialValuesDataType": data_type, "initialValues": values.ravel().tolist()}},
            "dispatchables": {},
            "commands": [{"type": "writeFile", "resource": "V", "targetPath": target, **fields}]}


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_an_image_round_trip(tmp_path, channels):
    """Values pixel / 255 written as a .png and read back are the same values; the file holds the pixels."""
    rng = np.random.default_rng(channels)
    pixels = rng.integers(0, 256, (channels, 5, 7), dtype=np.uint8)  # C, H, W
    values = pixels.astype(np.float32) / np.float32(255)
    run(tmp_path, values_model(values, "round.png", dimensions=[1, channels, 5, 7]))
    with Image.open(tmp_path / "round.png") as image:
        assert image.mode == {1: "L", 3: "RGB", 4: "RGBA"}[channels]
        assert np.array_equal(np.asarray(image).reshape(5, 7, channels).transpose(2, 0, 1), pixels)
    out = run(tmp_path, printed_image(str(tmp_path / "round.png"), resampleSize=[1, channels, 5, 7]))
    assert out == resource_text("Image", values.ravel()) + "\n"


def test_resampling_scales_as_a_bicubic_filter_does(tmp_path):
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (9, 12, 3), dtype=np.uint8)).save(tmp_path / "in.png")
    out = run(tmp_path, printed_image("in.png", resampleSize=[1, 3, 4, 6], resampleMode="scale"))
    with Image.open(tmp_path / "in.png") as image:
        scaled = np.asarray(image.resize((6, 4), Image.Resampling.BICUBIC)).transpose(2, 0, 1)
    assert out == resource_text("Image", (scaled.astype(np.float32) / np.float32(255)).ravel()) + "\n"


def test_without_resample_size_an_image_keeps_its_size_in_rgb_and_float16_rounds_once(tmp_path):
    pixels = np.random.default_rng(2).integers(0, 256, (3, 2, 4), dtype=np.uint8)
    Image.fromarray(np.ascontiguousarray(pixels.transpose(1, 2, 0))).save(tmp_path / "in.png")
    expected = (pixels.astype(np.float32) / np.float32(255)).astype(np.float16)
    assert run(tmp_path, printed_image("in.png", "FLOAT16")) == resource_text("Image", expected.ravel()) + "\n"


def test_written_values_are_clamped_and_truncated_as_dxdispatch_does(tmp_path):
    """min(1, v), max(0, v), times 255, the fraction dropped: a NaN becomes 255, as in C++."""
    values = np.array([-1, 0, 0.5, 0.999, 1, 2, "nan", "-inf", "inf"], dtype=object)
    model = values_model(np.zeros(1), "x.png", dimensions=[1, 1, 1, 9])
    model["resources"]["V"]["initialValues"] = values.tolist()
    run(tmp_path, model)
    with Image.open(tmp_path / "x.png") as image:
        assert np.asarray(image).ravel().tolist() == [0, 0, 127, 254, 255, 255, 255, 0, 255]


def test_a_jpeg_is_written_and_read(tmp_path):
    values = np.full((3, 8, 8), 0.5, np.float32)
    assert run(tmp_path, values_model(values, "x.jpg", dimensions=[1, 3, 8, 8])) == \
        f"Resource 'V' written to '{tmp_path / 'x.jpg'}'\n"
    with Image.open(tmp_path / "x.jpg") as image:
        assert (image.format, image.size) == ("JPEG", (8, 8))
    out = run(tmp_path, printed_image("x.jpg", resampleSize=[1, 3, 2, 2]))
    assert all(abs(float(v) - 0.5) < 0.02 for v in out.split(": ")[1].split(", "))


@pytest.mark.parametrize("fields, message", [
    ({"resampleSize": [1, 3, 2]}, "'resampleSize' must have four dimensions in N, C, H, W order, N being 1"),
    ({"resampleSize": [2, 3, 2, 2]}, "N being 1, not [2, 3, 2, 2]"),
    ({"resampleSize": [1, 2, 2, 2]}, "an image has 1, 3 or 4 channels, not 2"),
    ({"resampleMode": "crop"}, "'resampleMode' must be 'scale' for image files, not 'crop'"),
    ({"initialValuesDataType": "UINT8"}, "an image's values are FLOAT32 or FLOAT16 (pixel / 255), not UINT8"),
])
def test_bad_image_resources(tmp_path, fields, message):
    Image.new("RGB", (2, 2)).save(tmp_path / "in.png")
    model = printed_image("in.png")
    model["resources"]["Image"].update(fields)
    assert message in error(tmp_path, model)


@pytest.mark.parametrize("target, fields, message", [
    ("x.gif", {}, "targetPath 'x.gif': writeFile writes .npy, .png, .jpg, or raw bytes to .dat or .bin, not '.gif'"),
    ("x", {}, "not 'a name without a suffix'"),
    ("x.jpg", {"dimensions": [1, 4, 1, 1]}, "a JPEG image has no alpha channel; write 4 channels to a .png"),
    ("x.png", {"dimensions": [1, 2, 1, 1]}, "an image has 1, 3 or 4 channels, not 2"),
    ("x.png", {"dimensions": [1, 3, 2, 2]}, "dimensions [1, 3, 2, 2] hold 12 values; the resource holds 4"),
])
def test_bad_image_targets(tmp_path, target, fields, message):
    assert message in error(tmp_path, values_model(np.zeros(4, np.float32), target, **fields))
    assert not (tmp_path / target).exists()


def test_an_integer_resource_is_no_image(tmp_path):
    assert "an image's values are FLOAT32 or FLOAT16 (pixel / 255), not INT32" in \
        error(tmp_path, values_model(np.zeros(4, np.int32), "x.png", "INT32"))


def test_without_pillow_one_line_names_the_extra(tmp_path, monkeypatch):
    Image.new("RGB", (2, 2)).save(tmp_path / "in.png")
    monkeypatch.setitem(sys.modules, "PIL", None)
    assert "images need Pillow: pip install '.[images]'" in error(tmp_path, printed_image("in.png"))
    assert "images need Pillow: pip install '.[images]'" in \
        error(tmp_path, values_model(np.zeros(3, np.float32), "x.png", dimensions=[1, 3, 1, 1]))
