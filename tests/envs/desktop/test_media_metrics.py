"""OSWorld's image metrics (GIMP tasks) and VLC's config and status metrics, on images and
files made here, checked against OSWorld's semantics (its quirks included)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from envs.desktop import image_metrics as im
from envs.desktop import vlc

RNG = np.random.default_rng(0)


def save(folder: Path, name: str, pixels: np.ndarray, mode: str | None = None) -> str:
    path = folder / name
    Image.fromarray(pixels.astype(np.uint8), mode).save(path)
    return str(path)


def photo(height: int = 48, width: int = 48) -> np.ndarray:
    """A smooth colour image with structure (gradients and a block) and a little noise."""
    rows, cols = np.mgrid[0:height, 0:width]
    red = 40 + 3 * cols
    green = 60 + 2 * rows
    blue = 90 + (rows + cols)
    image = np.stack([red, green, blue], axis=2).astype(float)
    image[10:20, 12:30] += 60
    return np.clip(image + RNG.integers(0, 6, image.shape), 0, 255)


def test_ssim_of_an_image_with_itself_is_1_and_of_flat_images_follows_the_formula() -> None:
    image = photo().astype(np.uint8)
    assert im.structural_similarity(image, image, channel_axis=-1) == pytest.approx(1.0)
    # Flat images: variances vanish, SSIM = (2ab + C1) / (a^2 + b^2 + C1), C1 = (0.01 * 255)^2.
    a, b, c1 = 100.0, 140.0, (0.01 * 255) ** 2
    flat_a, flat_b = np.full((20, 20), a, np.uint8), np.full((20, 20), b, np.uint8)
    assert im.structural_similarity(flat_a, flat_b) == pytest.approx(
        (2 * a * b + c1) / (a * a + b * b + c1))


def test_ssim_with_the_last_axis_as_channels_reads_a_grey_image_as_columns() -> None:
    """OSWorld passes channel_axis=-1 for one-band images too: each column is a 1-D signal, so
    columns that are each flat score by their own values, whatever their neighbours."""
    first = np.tile(np.array([50, 200] * 5, np.uint8), (12, 1))  # 12 rows, flat columns
    second = np.tile(np.array([50, 200] * 5, np.uint8)[::-1], (12, 1))
    c1 = (0.01 * 255) ** 2
    flat_pair = (2 * 50 * 200 + c1) / (50 ** 2 + 200 ** 2 + c1)
    assert im.structural_similarity(first, second, channel_axis=-1) == pytest.approx(flat_pair)
    assert im.structural_similarity(first, second) < 0.5  # as one 2-D image, far less alike


def test_ssim_refuses_images_of_two_shapes_or_below_the_window() -> None:
    with pytest.raises(ValueError, match="one shape"):
        im.structural_similarity(np.zeros((10, 10), np.uint8), np.zeros((10, 11), np.uint8))
    with pytest.raises(ValueError, match="window"):
        im.structural_similarity(np.zeros((5, 10), np.uint8), np.zeros((5, 10), np.uint8))


def test_a_darker_copy_passes_the_brightness_check_and_a_brighter_or_missing_one_fails(
        tmp_path: Path) -> None:
    original = photo()
    source = save(tmp_path, "source.png", original)
    assert im.check_brightness_decrease_and_structure_sim(
        save(tmp_path, "dark.png", original * 0.7), source) == 1.0
    assert im.check_brightness_decrease_and_structure_sim(
        save(tmp_path, "bright.png", np.clip(original * 1.2, 0, 255)), source) == 0.0
    unrelated = RNG.integers(0, 120, original.shape)
    assert im.check_brightness_decrease_and_structure_sim(
        save(tmp_path, "other.png", unrelated), source) == 0.0
    assert im.check_brightness_decrease_and_structure_sim(None, source) == 0.0


def test_saturation_and_contrast_checks_want_more_of_it_and_the_same_picture(
        tmp_path: Path) -> None:
    original = photo()
    source = save(tmp_path, "source.png", original)
    grey = original.mean(axis=2, keepdims=True)
    vivid = np.clip(grey + (original - grey) * 1.6, 0, 255)
    dull = grey + (original - grey) * 0.5
    assert im.check_saturation_increase_and_structure_sim(
        save(tmp_path, "vivid.png", vivid), source) == 1.0
    assert im.check_saturation_increase_and_structure_sim(
        save(tmp_path, "dull.png", dull), source) == 0.0
    mean = original.mean()
    assert im.check_contrast_increase_and_structure_sim(
        save(tmp_path, "strong.png", np.clip(mean + (original - mean) * 1.5, 0, 255)),
        source) == 1.0
    assert im.check_contrast_increase_and_structure_sim(
        save(tmp_path, "weak.png", mean + (original - mean) * 0.6), source) == 0.0


def test_structure_checks_accept_the_same_picture_and_refuse_another(tmp_path: Path) -> None:
    original = photo()
    source = save(tmp_path, "source.png", original)
    other = save(tmp_path, "other.png", RNG.integers(0, 255, original.shape))
    assert im.check_structure_sim(save(tmp_path, "copy.png", original), source) == 1.0
    assert im.check_structure_sim(other, source) == 0.0
    assert im.check_file_exists_and_structure_sim(source, source) == 1.0
    assert im.check_file_exists_and_structure_sim(str(tmp_path / "absent.png"), source) == 0.0
    assert im.check_structure_sim(None, source) == 0.0
    big = save(tmp_path, "big.png", np.array(Image.fromarray(original.astype(np.uint8))
                                             .resize((96, 96))))
    assert im.check_structure_sim_resized(big, source) == 1.0


def test_mirror_palette_and_size_checks(tmp_path: Path) -> None:
    original = photo()
    source = save(tmp_path, "source.png", original)
    assert im.check_image_mirror(save(tmp_path, "mirror.png", original[:, ::-1]), source) == 1.0
    assert im.check_image_mirror(source, source) == 0.0
    palette = tmp_path / "palette.png"
    Image.open(source).convert("P", palette=Image.Palette.ADAPTIVE, colors=255).save(palette)
    assert im.check_palette_and_structure_sim(str(palette), source) == 1.0
    assert im.check_palette_and_structure_sim(source, source) == 0.0  # RGB, not palette
    assert im.check_image_size(source, {"height": 48}) == 1.0
    assert im.check_image_size(source, {"height": 48, "width": 40}) == 0.0
    assert im.check_image_file_size(source, {"max_size": 10 ** 6}) == 1.0
    assert im.check_image_file_size(source, {"max_size": 10}) == 0.0


def test_triangle_position_takes_the_second_rarest_colour(tmp_path: Path) -> None:
    canvas = np.zeros((100, 100, 3))
    canvas[:] = (255, 255, 255)
    canvas[45:55, 45:55] = (255, 255, 0)  # the shape, centred: 100 pixels
    canvas[0:2, 0:2] = (0, 0, 255)  # a rarer colour (4 pixels): sorted first, skipped
    assert im.check_triangle_position(save(tmp_path, "middle.png", canvas)) == 1.0
    canvas[45:55, 45:55] = (255, 255, 255)
    canvas[5:15, 70:80] = (255, 255, 0)
    assert im.check_triangle_position(save(tmp_path, "side.png", canvas)) == 0.0


def test_textbox_on_the_left_and_green_background(tmp_path: Path) -> None:
    page = np.full((40, 100), 255)
    page[10:20, 3:30] = 0
    assert im.check_textbox_on_leftside(save(tmp_path, "left.png", page)) == 1.0
    page[10:20, 3:30], page[10:20, 40:60] = 255, 0
    assert im.check_textbox_on_leftside(save(tmp_path, "middle.png", page)) == 0.0
    white = np.full((20, 20, 3), 255)
    white[5:10, 5:10] = 0  # the black object
    original = save(tmp_path, "white.png", white)
    green = np.zeros((20, 20, 3))
    green[:] = (20, 200, 30)
    green[5:10, 5:10] = 0
    assert im.check_green_background(save(tmp_path, "green.png", green), original) == 1.0
    green[0, 0] = (200, 200, 30)
    assert im.check_green_background(save(tmp_path, "yellowish.png", green), original) == 0.0
    with pytest.raises(ValueError, match="square"):
        im.check_green_background(save(tmp_path, "wide.png", np.zeros((20, 30, 3))), original)


def test_compare_images_is_the_grey_ssim_after_resizing_to_the_lesser_size(
        tmp_path: Path) -> None:
    original = photo(40, 60)
    first = save(tmp_path, "first.png", original)
    assert im.compare_images(first, first) == pytest.approx(1.0)
    other = save(tmp_path, "other.png", RNG.integers(0, 255, (50, 50, 3)))
    # (50, 50) < (60, 40) as tuples: both go to 50x50 before the SSIM.
    grey_first = Image.open(first).convert("L").resize((50, 50), Image.Resampling.LANCZOS)
    grey_other = Image.open(other).convert("L").resize((50, 50), Image.Resampling.LANCZOS)
    assert im.compare_images(first, other) == pytest.approx(
        im.structural_similarity(np.array(grey_first), np.array(grey_other)))
    assert im.compare_images(None, other) == 0.0


def test_compare_image_list_wants_every_pair_identical(tmp_path: Path) -> None:
    a = save(tmp_path, "a.png", photo())
    b = save(tmp_path, "b.png", photo())  # new noise: not identical
    assert im.compare_image_list([a, a], [a, a]) == 1.0
    assert im.compare_image_list([a, b], [a, a]) == 0.0
    assert im.compare_image_list(a, a) == 1.0
    assert im.compare_image_list([a, None], [a, a]) == 0.0


def test_gimp_config_status_reads_key_value_forms(tmp_path: Path) -> None:
    sessionrc = tmp_path / "sessionrc"
    sessionrc.write_text("# GIMP sessionrc\n\n(session-info \"toplevel\")\n(hide-docks yes)\n")
    rule = {"type:": "key-value", "key": "hide-docks", "value": "yes"}
    assert im.check_config_status(str(sessionrc), rule) == 1.0
    assert im.check_config_status(str(sessionrc), {**rule, "value": "no"}) == 0.0
    history = tmp_path / "action-history"
    history.write_text('(history-item "filters-vignette" 0 1)\n(history-item "edit-undo" 0 3)\n')
    vignette = {"key": ["history-item", '"filters-vignette"'], "value": "1"}
    assert im.check_config_status(str(history), vignette) == 1.0
    assert im.check_config_status(str(history), {**vignette, "value": "3"}) == 0.0
    gimprc = tmp_path / "gimprc"
    gimprc.write_text('(theme "Light")\n(undo-levels 100)\n')
    assert im.check_config_status(str(gimprc), {"key": "theme", "value": '"Light"'}) == 1.0
    assert im.check_config_status(str(gimprc), {"key": "undo-levels", "value": "100"}) == 1.0
    assert im.check_config_status(None, {"key": "undo-levels", "value": "100"}) == 0.0


VLCRC = """\
[qt] # Qt interface
# Display background cone or art (boolean)
#qt-bgcone=1
qt-max-volume=200
#qt-minimal-view=0
qt-slider-colours=10;20;30;40;50;60;70;80;90;5;5;5
[core]
#input-record-path=
input-record-path=/home/user/Desktop
#global-key-play-pause=
one-instance-when-started-from-file=0
"""


def test_vlc_config_metrics_read_the_last_line_naming_the_option(tmp_path: Path) -> None:
    config = tmp_path / "vlcrc"
    config.write_text(VLCRC)
    path = str(config)
    assert vlc.check_qt_bgcone(path, {"expected_qt_bgcone": 1}) == 1.0  # the commented default
    assert vlc.check_qt_bgcone(path, {"expected_qt_bgcone": 0}) == 0.0
    assert vlc.check_qt_max_volume(path, {"expected_qt_max_volume": 200}) == 1.0
    assert vlc.check_qt_minimal_view(path, {"expected_qt_minimal_view": 1}) == 0.0
    assert vlc.check_one_instance_when_started_from_file(
        path, {"expected_one_instance_when_started_from_file": 0}) == 1.0
    assert vlc.check_global_key_play_pause(path, {"expected_global_key_play_pause": 1}) == 0.0
    assert vlc.is_vlc_recordings_folder(path, {"recording_file_path": "/home/user/Desktop"}) == 1.0
    assert vlc.check_qt_slider_colours(path, {"type": "blackish"}) == 1.0
    assert vlc.check_qt_slider_colours(path, {
        "type": "match", "expected_qt_slider_colours": "10;20;30;40;50;60;70;80;90;5;5;5"}) == 1.0
    config.write_text("qt-minimal-view=1\nglobal-key-play-pause=Ctrl+Space\n")
    assert vlc.check_qt_minimal_view(path, {"expected_qt_minimal_view": 1}) == 1.0
    assert vlc.check_global_key_play_pause(path, {"expected_global_key_play_pause": 1}) == 1.0
    # Options absent: VLC's defaults (a bright slider, the cone on, no recordings folder).
    assert vlc.check_qt_slider_colours(path, {"type": "blackish"}) == 0.0
    assert vlc.check_qt_bgcone(path, {"expected_qt_bgcone": 0}) == 0.0
    assert vlc.is_vlc_recordings_folder(path, {"recording_file_path": "/home/user/Desktop"}) == 0.0
    assert vlc.check_qt_max_volume(None, {"expected_qt_max_volume": 200}) == 0.0


STATUS = """<?xml version="1.0" encoding="utf-8" standalone="yes" ?>
<root><state>{state}</state><information><category name="meta">
<info name='filename'>clip.mp4</info><info name='url'>https://example.org/watch?v=1</info>
</category></information></root>"""


def test_vlc_playing_wants_the_playing_state_and_the_named_file_or_url(tmp_path: Path) -> None:
    status = tmp_path / "status.xml"
    status.write_text(STATUS.format(state="playing"))
    assert vlc.is_vlc_playing(str(status), {"type": "file_name", "file_name": "clip.mp4"}) == 1.0
    assert vlc.is_vlc_playing(str(status), {"type": "file_name", "file_name": "other.mp4"}) == 0.0
    assert vlc.is_vlc_playing(str(status), {"type": "url", "url": "watch?v=1"}) == 1.0
    status.write_text(STATUS.format(state="paused"))
    assert vlc.is_vlc_playing(str(status), {"type": "file_name", "file_name": "clip.mp4"}) == 0.0
    assert vlc.is_vlc_playing(None, {"type": "file_name", "file_name": "clip.mp4"}) == 0.0


def test_vlc_fullscreen_wants_the_window_the_size_of_the_screen() -> None:
    screen = {"width": 1280, "height": 800}
    assert vlc.is_vlc_fullscreen({"width": 1280, "height": 800}, screen) == 1.0
    assert vlc.is_vlc_fullscreen({"width": 600, "height": 420}, screen) == 0.0
    assert vlc.is_vlc_fullscreen(None, screen) == 0.0


def test_a_vlc_launch_keeps_its_arguments_and_adds_the_web_interface_relay() -> None:
    argv = vlc.command(["vlc", "--start-time=15", "/home/user/Desktop/Gen 2.mp4"])
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["sh", "--start-time=15",
                                                     "/home/user/Desktop/Gen 2.mp4"]
    assert "exec vlc --no-qt-privacy-ask --extraintf=http" in argv[2]
    assert f"UNIX-LISTEN:{vlc.HTTP_SOCKET}" in argv[2]
