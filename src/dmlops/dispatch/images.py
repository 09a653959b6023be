"""Images as DxDispatch reads and writes them (its Guide, and its ImageReaderWriter), with Pillow (``pip install
'.[images]'``).

Reading (``"initialValues": {"sourcePath": "x.png"}`` with ``"resampleSize": [1, C, H, W]`` and
``"resampleMode": "scale"``): the image is converted to C channels (1: grey, 3: RGB, 4: RGBA), scaled to W × H with
a bicubic filter where its size differs, and laid out N, C, H, W as FLOAT32 (or FLOAT16) values pixel / 255.
Without ``resampleSize`` the image keeps its size, with 3 channels.

Writing (``writeFile`` to ``.png`` or ``.jpg``, ``"dimensions": [N, C, H, W]``; C, H and W default to 1): FLOAT32
or FLOAT16 values in N, C, H, W layout, each clamped to [0, 1] and scaled by 255, the fraction dropped, as 1 (grey),
3 (RGB) or 4 (RGBA, .png only) channels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..types import DataType
from .fields import ModelError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
PIXEL_TYPES = (DataType.FLOAT32, DataType.FLOAT16)
MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def pillow():
    try:
        from PIL import Image
    except ImportError:
        raise ModelError("images need Pillow: pip install '.[images]'") from None
    return Image


def _check_type(data_type: DataType | None) -> DataType:
    if data_type not in PIXEL_TYPES:
        name = "no data type" if data_type is None else data_type.name
        raise ModelError(f"an image's values are FLOAT32 or FLOAT16 (pixel / 255), not {name}")
    return data_type


def _mode(channels: int) -> str:
    if channels not in MODES:
        raise ModelError(f"an image has 1, 3 or 4 channels, not {channels}")
    return MODES[channels]


def check_resample(resample_size, resample_mode: str, data_type: DataType | None) -> None:
    """Refuse at reading the model what read_image would refuse."""
    _check_type(data_type)
    if resample_mode != "scale":
        raise ModelError(f"'resampleMode' must be 'scale' for image files, not '{resample_mode}'")
    if resample_size is not None:
        if len(resample_size) != 4 or resample_size[0] != 1 or 0 in resample_size:
            raise ModelError(f"'resampleSize' must have four dimensions in N, C, H, W order, N being 1, not "
                             f"{list(resample_size)}")
        _mode(resample_size[1])


def image_size(path: Path, resample_size) -> tuple[int, int, int]:
    """(C, H, W) of the values read from the image."""
    if resample_size is not None:
        return tuple(resample_size[1:])
    try:
        with pillow().open(path) as image:
            return 3, image.height, image.width
    except OSError as error:
        raise ModelError(f"sourcePath: cannot read the image '{path}' ({error})") from None


def read_image(path: Path, data_type: DataType, resample_size) -> np.ndarray:
    channels, height, width = image_size(path, resample_size)
    try:
        with pillow().open(path) as image:
            image = image.convert(_mode(channels))
            if image.size != (width, height):
                image = image.resize((width, height), pillow().Resampling.BICUBIC)
            pixels = np.asarray(image, dtype=np.uint8).reshape(height, width, channels)
    except OSError as error:
        raise ModelError(f"sourcePath: cannot read the image '{path}' ({error})") from None
    values = pixels.transpose(2, 0, 1).astype(np.float32) / np.float32(255)  # H, W, C → C, H, W
    return values.astype(data_type.numpy_dtype)


def write_image(path: Path, data: np.ndarray, data_type: DataType, dimensions) -> None:
    """Write the buffer's bytes ``data``, read as ``data_type`` values of ``dimensions``, as an image."""
    _check_type(data_type)
    dimensions = list(dimensions or ())
    channels, height, width = (dimensions[i] if len(dimensions) > i else 1 for i in (1, 2, 3))
    mode = _mode(channels)
    if mode == "RGBA" and path.suffix.lower() != ".png":
        raise ModelError(f"'{path.name}': a JPEG image has no alpha channel; write 4 channels to a .png")
    count = channels * height * width
    dtype = data_type.numpy_dtype
    if count * dtype.itemsize > data.size:
        raise ModelError(f"dimensions {dimensions} hold {count} values; the resource holds "
                         f"{data.size // dtype.itemsize}")
    values = data[:count * dtype.itemsize].view(dtype).astype(np.float32)
    values = np.where(values < 1, values, np.float32(1))  # as C++'s min(1, v) and max(0, v) take a NaN: as 1
    values = np.where(0 < values, values, np.float32(0))
    pixels = (values * np.float32(255)).astype(np.uint8).reshape(channels, height, width).transpose(1, 2, 0)
    image = pillow().fromarray(np.ascontiguousarray(pixels.reshape(height, width) if channels == 1 else pixels))
    image.save(path, format="PNG" if path.suffix.lower() == ".png" else "JPEG")
