"""OSWorld's image metrics (its GIMP tasks, and the image checks of its VLC and multi-app tasks),
with OSWorld's semantics, quirks included, computed with Pillow and numpy.

Most of them compare an edited image with the original by the structural similarity index
(SSIM) of scikit-image's `structural_similarity` with its defaults, which OSWorld calls:
`structural_similarity` here is that formula (a 7-pixel uniform window, sample covariance,
K1 = 0.01, K2 = 0.03, the data range of the pixel type, the mean over the windows that fit
inside the image). OSWorld passes `channel_axis=-1` for every pair, so a colour image's SSIM is
the mean over its channels, and a one-band image (a grey or HSV band) is read as a stack of
one-pixel-wide columns: the SSIM of each column as a 1-D signal, averaged over the columns.

Every metric takes host paths (what `vm_file` and `cloud_file` give) and scores 0 when a path is
None, as OSWorld's do. Where OSWorld would crash (images of different shapes, a non-square image
in `check_green_background`), these raise ValueError, which the env counts as a failed
evaluation scoring 0.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from PIL import Image, ImageChops, ImageStat

__all__ = [
    "IMAGE_METRICS",
    "check_brightness_decrease_and_structure_sim",
    "check_config_status",
    "check_contrast_increase_and_structure_sim",
    "check_file_exists_and_structure_sim",
    "check_green_background",
    "check_image_file_size",
    "check_image_mirror",
    "check_image_size",
    "check_palette_and_structure_sim",
    "check_saturation_increase_and_structure_sim",
    "check_structure_sim",
    "check_structure_sim_resized",
    "check_textbox_on_leftside",
    "check_triangle_position",
    "compare_image_list",
    "compare_images",
    "structural_similarity",
]

SSIM_WINDOW = 7
_K1, _K2 = 0.01, 0.03


def _data_range(dtype: np.dtype) -> float:
    """The span of the pixel type, as scikit-image takes it when no data range is given."""
    if dtype == np.bool_:
        return 1.0
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return float(info.max) - float(info.min)
    raise ValueError(f"images of floating-point pixels ({dtype}) have no implied data range; "
                     "scikit-image refuses them too")


def _window_means(values: np.ndarray, width: int) -> np.ndarray:
    """The mean of every `width`-wide box that fits inside `values`, along each axis."""
    for axis in range(values.ndim):
        moved = np.moveaxis(values, axis, 0)
        sums = np.concatenate([np.zeros((1, *moved.shape[1:])), np.cumsum(moved, axis=0)])
        values = np.moveaxis((sums[width:] - sums[:-width]) / width, 0, axis)
    return values


def _ssim_one_channel(first: np.ndarray, second: np.ndarray, data_range: float) -> float:
    if any(size < SSIM_WINDOW for size in first.shape):
        raise ValueError(f"an image of shape {first.shape} is smaller than SSIM's "
                         f"{SSIM_WINDOW}-pixel window")
    x, y = first.astype(np.float64), second.astype(np.float64)
    points = SSIM_WINDOW ** x.ndim
    covariance_norm = points / (points - 1)  # the sample covariance, scikit-image's default
    mean_x, mean_y = _window_means(x, SSIM_WINDOW), _window_means(y, SSIM_WINDOW)
    var_x = covariance_norm * (_window_means(x * x, SSIM_WINDOW) - mean_x * mean_x)
    var_y = covariance_norm * (_window_means(y * y, SSIM_WINDOW) - mean_y * mean_y)
    cov_xy = covariance_norm * (_window_means(x * y, SSIM_WINDOW) - mean_x * mean_y)
    c1, c2 = (_K1 * data_range) ** 2, (_K2 * data_range) ** 2
    index = ((2 * mean_x * mean_y + c1) * (2 * cov_xy + c2)
             / ((mean_x ** 2 + mean_y ** 2 + c1) * (var_x + var_y + c2)))
    return float(index.mean())


def structural_similarity(first: np.ndarray, second: np.ndarray,
                          channel_axis: int | None = None) -> float:
    """scikit-image's `structural_similarity(first, second, channel_axis=...)` with its
    defaults (module docstring): with a channel axis, the mean of the SSIM of each slice
    along it.

    Raises:
        ValueError: the arrays differ in shape, are smaller than the window, or hold floats.
    """
    if first.shape != second.shape:
        raise ValueError(f"SSIM compares images of one shape, got {first.shape} and "
                         f"{second.shape}")
    data_range = _data_range(first.dtype)
    if channel_axis is None:
        return _ssim_one_channel(first, second, data_range)
    channels = [_ssim_one_channel(np.take(first, index, axis=channel_axis),
                                  np.take(second, index, axis=channel_axis), data_range)
                for index in range(first.shape[channel_axis])]
    return float(np.mean(channels))


def _similar_by_ssim(first: Image.Image, second: Image.Image, threshold: float = 0.9) -> bool:
    """OSWorld's `structure_check_by_ssim`: SSIM over the last axis, at least `threshold`."""
    return structural_similarity(np.array(first), np.array(second), channel_axis=-1) >= threshold


def _similar_by_mse(first: Image.Image, second: Image.Image, threshold: float = 0.03) -> bool:
    """OSWorld's `structure_check_by_mse`: the mean squared difference of pixels in [0, 1]."""
    difference = np.array(first, dtype=np.float32) / 255 - np.array(second, dtype=np.float32) / 255
    return float(np.mean(difference ** 2)) < threshold


def _brightness(image: Image.Image) -> float:
    return ImageStat.Stat(image.convert("L")).mean[0]


def _brightness_normalized(image: Image.Image, target: float = 128) -> Image.Image:
    factor = target / _brightness(image)
    return image.point(lambda value: min(255, max(0, int(value * factor))))


def _mean_saturation(image: Image.Image) -> float:
    return float(np.mean(np.array(image.convert("HSV").split()[1])))


def _contrast(image: Image.Image) -> float:
    return float(np.std(np.asarray(image, dtype=np.float32)))


def check_brightness_decrease_and_structure_sim(result: str | None, original: str | None
                                                ) -> float:
    """1 when the result is darker than the original (mean grey level) and, each scaled to a
    mean grey of 128, differs from it by a mean squared error under 0.03."""
    if result is None or original is None:
        return 0.0
    edited, source = Image.open(result), Image.open(original)
    darker = _brightness(source) > _brightness(edited)
    same = _similar_by_mse(_brightness_normalized(edited), _brightness_normalized(source))
    return float(darker and same)


def check_saturation_increase_and_structure_sim(result: str | None, original: str | None
                                                ) -> float:
    """1 when the result's mean HSV saturation is above the original's and its hue and value
    bands each have an SSIM of at least 0.9 with the original's."""
    if result is None or original is None:
        return 0.0
    edited, source = Image.open(result).convert("HSV"), Image.open(original).convert("HSV")
    more_saturated = _mean_saturation(source) < _mean_saturation(edited)
    (hue_1, _, value_1), (hue_2, _, value_2) = edited.split(), source.split()
    same = _similar_by_ssim(hue_1, hue_2) and _similar_by_ssim(value_1, value_2)
    return float(more_saturated and same)


def check_file_exists_and_structure_sim(result: str | None, original: str | None) -> float:
    """1 when the exported file exists and has an SSIM of at least 0.9 with the original."""
    if result is None or original is None or not os.path.isfile(result):
        return 0.0
    return float(_similar_by_ssim(Image.open(result), Image.open(original)))


def check_structure_sim(result: str | None, expected: str | None) -> float:
    """1 when the two images have an SSIM of at least 0.9."""
    if result is None or expected is None:
        return 0.0
    return float(_similar_by_ssim(Image.open(result), Image.open(expected)))


def check_structure_sim_resized(result: str | None, expected: str | None) -> float:
    """1 when the result, resized to the expected image's size (Pillow's default filter), has
    an SSIM of at least 0.9 with it."""
    if result is None or expected is None:
        return 0.0
    target = Image.open(expected)
    return float(_similar_by_ssim(Image.open(result).resize(target.size), target))


def check_contrast_increase_and_structure_sim(result: str | None, original: str | None
                                              ) -> float:
    """1 when the result's pixel standard deviation is above the original's and their SSIM is
    at least 0.65."""
    if result is None or original is None:
        return 0.0
    edited, source = Image.open(result), Image.open(original)
    higher = _contrast(source) < _contrast(edited)
    return float(higher and _similar_by_ssim(edited, source, threshold=0.65))


def check_palette_and_structure_sim(result: str | None, original: str | None) -> float:
    """1 when the result is a palette image (mode P) whose RGB version has an SSIM of at least
    0.9 with the original."""
    if result is None or original is None:
        return 0.0
    edited = Image.open(result)
    palette_based = edited.mode == "P"
    return float(palette_based and _similar_by_ssim(edited.convert("RGB"), Image.open(original)))


def check_image_mirror(result: str | None, original: str | None) -> float:
    """1 when the result mirrored left to right has an SSIM of at least 0.99 with the
    original."""
    if result is None or original is None:
        return 0.0
    flipped = Image.open(result).transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return float(_similar_by_ssim(flipped, Image.open(original), threshold=0.99))


def check_triangle_position(result: str | None) -> float:
    """1 when the shape's centroid lies within 5% of the image's size of its centre. The shape
    is the pixels of the second *least* common colour (OSWorld sorts the colours by count
    ascending and takes the second, whatever its comment says)."""
    if result is None:
        return 0.0
    pixels = np.array(Image.open(result))
    if pixels.ndim != 3:
        raise ValueError(f"check_triangle_position needs a colour image, got shape {pixels.shape}")
    colours, counts = np.unique(pixels.reshape(-1, pixels.shape[2]), axis=0, return_counts=True)
    shape_colour = colours[np.argsort(counts)][1]
    centroid = np.argwhere(np.all(pixels == shape_colour, axis=2)).mean(axis=0)
    size = np.array(pixels.shape[:2])
    return float(np.all(np.abs(centroid - size / 2) < 0.05 * size))


def check_textbox_on_leftside(result: str | None) -> float:
    """1 when the leftmost dark pixel (grey level under 128) lies in the left 5% of the
    image."""
    if result is None:
        return 0.0
    image = Image.open(result)
    dark_columns = np.nonzero(np.array(image.convert("L")) < 128)[1]
    leftmost = int(dark_columns.min()) if dark_columns.size else image.width
    return float(leftmost < image.width * 0.05)


def check_green_background(result: str | None, original: str | None) -> float:
    """1 when every pixel that is not black in the original (the background around a black
    object) is green in the result: its green above its red and its blue.

    Raises:
        ValueError: a non-square image, on which OSWorld's loop (rows indexed by x) fails.
    """
    if result is None or original is None:
        return 0.0
    edited, source = np.array(Image.open(result)), np.array(Image.open(original))
    for pixels in (edited, source):
        if pixels.ndim != 3 or pixels.shape[0] != pixels.shape[1]:
            raise ValueError("check_green_background reads square colour images only (OSWorld "
                             f"indexes their rows by x), got shape {pixels.shape}")
    background = np.any(source[..., :3] != 0, axis=2)
    red, green, blue = (edited[..., band].astype(np.int16) for band in range(3))
    return float(bool(np.all(((green > red) & (green > blue))[background])))


def check_image_size(result: str | None, rule: dict[str, Any]) -> float:
    """1 when the image has the rule's `width` and `height` (each checked only when given)."""
    if result is None:
        return 0.0
    width, height = Image.open(result).size
    return float(rule.get("height") in (None, height) and rule.get("width") in (None, width))


def check_image_file_size(result: str | None, rule: dict[str, Any]) -> float:
    """1 when the file is smaller than `max_size` bytes."""
    if result is None:
        return 0.0
    return float(os.path.getsize(result) < rule["max_size"])


def compare_images(result: str | None, expected: str | None) -> float:
    """The SSIM (a score in [-1, 1], not a pass mark) of the two images in grey, each resized
    with Lanczos to the smaller size, where OSWorld's "smaller" is the lesser (width, height)
    pair in Python's tuple order."""
    if not result or not expected:
        return 0.0
    first, second = Image.open(result).convert("L"), Image.open(expected).convert("L")
    size = min(first.size, second.size)
    first = first.resize(size, Image.Resampling.LANCZOS)
    second = second.resize(size, Image.Resampling.LANCZOS)
    return structural_similarity(np.array(first), np.array(second))


def compare_image_list(results: str | list[str] | None, expected: str | list[str] | None
                       ) -> float:
    """1 when each result image is pixel for pixel its expected image (pairs in order)."""
    if not isinstance(results, list):
        results, expected = [results], [expected]
    for result, gold in zip(results, expected or [], strict=False):
        if not result or not gold:
            return 0.0
        if ImageChops.difference(Image.open(result), Image.open(gold)).getbbox():
            return 0.0
    return 1.0


def check_config_status(config_path: str | None, rule: dict[str, Any]) -> float:
    """1 when a line of a GIMP config file (`(key value)` forms, `#` comments) has the rule's
    `key` first (or, for a two-item `key`, both items first) and its `value` last."""
    if config_path is None:
        return 0.0
    key, value = rule["key"], rule["value"]
    with open(config_path) as file:
        for line in file:
            if line.startswith("#") or line == "\n":
                continue
            items = line.strip().lstrip("(").rstrip(")\n").split()
            if not items:
                continue
            if isinstance(key, str) and items[0] == key and items[-1] == value:
                return 1.0
            if (isinstance(key, list) and len(key) == 2 and len(items) > 1
                    and items[:2] == key and items[-1] == value):
                return 1.0
    return 0.0


IMAGE_METRICS = {
    "check_brightness_decrease_and_structure_sim": check_brightness_decrease_and_structure_sim,
    "check_saturation_increase_and_structure_sim": check_saturation_increase_and_structure_sim,
    "check_contrast_increase_and_structure_sim": check_contrast_increase_and_structure_sim,
    "check_file_exists_and_structure_sim": check_file_exists_and_structure_sim,
    "check_structure_sim": check_structure_sim,
    "check_structure_sim_resized": check_structure_sim_resized,
    "check_palette_and_structure_sim": check_palette_and_structure_sim,
    "check_image_mirror": check_image_mirror,
    "check_triangle_position": check_triangle_position,
    "check_textbox_on_leftside": check_textbox_on_leftside,
    "check_green_background": check_green_background,
    "check_image_size": check_image_size,
    "check_image_file_size": check_image_file_size,
    "compare_images": compare_images,
    "compare_image_list": compare_image_list,
    "check_config_status": check_config_status,
}
