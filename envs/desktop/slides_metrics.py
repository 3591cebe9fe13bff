"""OSWorld's `compare_pptx_files`: a LibreOffice Impress result against the expected deck.

Slides are compared in order, and on each slide the shapes in order, pairwise (`zip`: a shape one
deck has beyond the other's is not looked at), then each text shape's paragraphs and runs
pairwise. Each `examine_*` option switches one check. On by default, each fails the deck when:

- `examine_number_of_slides`: the decks have different numbers of slides;
- `examine_note`: a slide's notes differ (stripped);
- `examine_shape`: a shape's position or size differs;
- `examine_text`: a shape's text (stripped) or a paragraph's text differs;
- `examine_alignment`, `examine_indent`: a paragraph's alignment, or level, differs;
- `examine_font_name`, `_size`, `_bold`, `_italic`, `_underline`, `examine_strike_through`: a
  run's font differs so; `examine_color_rgb`: a run's RGB color, where both runs have one;
- `examine_bullets`: on a slide with a run, any paragraph's level, bullet character, bullet color
  or text differs;
- `examine_background_color`: never. OSWorld's check reads no color: its `fill.background()`
  call makes the fill transparent and returns None, for both decks.

Off by default, the rest were written for single OSWorld tasks, with their constants (lengths
in EMU, 914400 to the inch). Where such an option's condition does not hold for a shape pair,
the pair must keep its position and size (not so under `examine_right_position`). A pair passes:

- `examine_title_bottom_position`: with the same text, unless it is "Product Comparison"; with
  that text, when the result's top is below the expected's and at least 3600000;
- `examine_table_bottom_position`: on slide 3, two tables, when the result's top is below the
  expected's and at least 3600000;
- `examine_right_position`: on slide 2, two shapes without text, when the result's left is right
  of the expected's and at least 4320000; other pairs are not checked;
- `examine_top_position`: on slide 2, two pictures, when the result's top is above the
  expected's and at most 1980000;
- `examine_shape_for_shift_size`: with the same geometry, or both holding "Elaborate on what you
  want to discuss.";
- `examine_image_size`: two pictures, with the same width and height;
- `examine_modify_height`: two shapes without text, or two freeforms, with the same height.

One task passes `examine_aligment`, a misspelling OSWorld does not read: alignment is still
examined there, and here.
"""

from __future__ import annotations

from typing import Any

from pptx import Presentation
from pptx.enum.shapes import MSO_SHAPE_TYPE
from pptx.oxml.ns import qn
from pptx.shapes.base import BaseShape
from pptx.slide import Slide

__all__ = ["SLIDE_OPTIONS", "compare_pptx_files"]

_ON_BY_DEFAULT = ("examine_number_of_slides", "examine_shape", "examine_text", "examine_indent",
                  "examine_font_name", "examine_font_size", "examine_font_bold", "examine_font_italic",
                  "examine_color_rgb", "examine_font_underline", "examine_strike_through",
                  "examine_alignment", "examine_bullets", "examine_background_color", "examine_note")
_OFF_BY_DEFAULT = ("examine_title_bottom_position", "examine_table_bottom_position",
                   "examine_right_position", "examine_top_position", "examine_shape_for_shift_size",
                   "examine_image_size", "examine_modify_height")
SLIDE_OPTIONS = frozenset({*_ON_BY_DEFAULT, *_OFF_BY_DEFAULT, "examine_aligment"})

_PICTURE, _TABLE, _FREEFORM = MSO_SHAPE_TYPE.PICTURE, MSO_SHAPE_TYPE.TABLE, MSO_SHAPE_TYPE.FREEFORM
_TITLE_TEXT = "Product Comparison"
_SHIFTED_TEXT = "Elaborate on what you want to discuss."
_LOWEST_TOP, _LEAST_LEFT, _HIGHEST_TOP = 3600000, 4320000, 1980000


def _same_geometry(first: BaseShape, second: BaseShape) -> bool:
    return (first.left, first.top, first.width, first.height) == (
        second.left, second.top, second.width, second.height)


def _has_text(shape: BaseShape) -> bool:
    # python-pptx gives `text` to the shapes that can hold a text frame (not pictures, tables
    # or groups); OSWorld tells text shapes apart by it.
    return hasattr(shape, "text")


def _notes(slide: Slide) -> str:
    frame = slide.notes_slide.notes_text_frame
    return frame.text if frame is not None else ""


def _bullets(slide: Slide) -> list[tuple[str, str, str, str]]:
    """(level, bullet character, text, bullet color) of every paragraph on the slide; python-pptx
    has no bullet API, so they are read from the slide's XML."""
    bullets = []
    for paragraph in slide.element.iter(qn("a:p")):
        properties = paragraph.find(qn("a:pPr"))
        level, char, color = "No Level", "No Bullet", "No Color"
        if properties is not None:
            level = properties.get("lvl")
            bullet = properties.find(qn("a:buChar"))
            char = bullet.get("char") if bullet is not None else "No Bullet"
            bullet_color = properties.find(f"{qn('a:buClr')}/{qn('a:srgbClr')}")
            color = bullet_color.get("val") if bullet_color is not None else "No Color"
        text = "".join(node.text or "" for node in paragraph.iter(qn("a:t")))
        bullets.append((level, char, text, color))
    return bullets


def _position_options_pass(first: BaseShape, second: BaseShape, slide_number: int,
                           examine: dict[str, bool]) -> bool:
    same = _same_geometry(first, second)
    both_text = _has_text(first) and _has_text(second)
    if examine["examine_title_bottom_position"]:
        if both_text and first.text == second.text:
            if first.text == _TITLE_TEXT and (first.top <= second.top or first.top < _LOWEST_TOP):
                return False
        elif not same:
            return False
    if examine["examine_table_bottom_position"]:
        if slide_number == 3 and first.shape_type == _TABLE and second.shape_type == _TABLE:
            if first.top <= second.top or first.top < _LOWEST_TOP:
                return False
        elif not same:
            return False
    if (examine["examine_right_position"] and slide_number == 2 and not _has_text(first)
            and not _has_text(second) and (first.left <= second.left or first.left < _LEAST_LEFT)):
        return False
    if examine["examine_top_position"]:
        if slide_number == 2 and first.shape_type == _PICTURE and second.shape_type == _PICTURE:
            if first.top >= second.top or first.top > _HIGHEST_TOP:
                return False
        elif not same:
            return False
    if (examine["examine_shape_for_shift_size"] and not same
            and not (both_text and first.text == second.text == _SHIFTED_TEXT)):
        return False
    if examine["examine_shape"] and not same:
        return False
    if examine["examine_image_size"]:
        if first.shape_type == _PICTURE and second.shape_type == _PICTURE:
            if (first.width, first.height) != (second.width, second.height):
                return False
        elif not same:
            return False
    if examine["examine_modify_height"]:
        if ((not _has_text(first) and not _has_text(second))
                or (first.shape_type == _FREEFORM and second.shape_type == _FREEFORM)):
            if first.height != second.height:
                return False
        elif not same:
            return False
    return True


def _run_fonts_match(first: Any, second: Any, examine: dict[str, bool]) -> bool:
    font1, font2 = first.font, second.font
    pairs = {"examine_font_name": (font1.name, font2.name),
             "examine_font_size": (font1.size, font2.size),
             "examine_font_bold": (font1.bold, font2.bold),
             "examine_font_italic": (font1.italic, font2.italic),
             "examine_font_underline": (font1.underline, font2.underline),
             # python-pptx has no strike-through property; it is an attribute of the run's rPr
             "examine_strike_through": (font1._element.get("strike", "noStrike"),
                                        font2._element.get("strike", "noStrike"))}
    if hasattr(font1.color, "rgb") and hasattr(font2.color, "rgb"):
        pairs["examine_color_rgb"] = (font1.color.rgb, font2.color.rgb)
    return all(not examine[option] or one == other for option, (one, other) in pairs.items())


def _texts_match(first: BaseShape, second: BaseShape, slides: tuple[Slide, Slide],
                 examine: dict[str, bool]) -> bool:
    if examine["examine_text"] and first.text.strip() != second.text.strip():
        return False
    for paragraph1, paragraph2 in zip(first.text_frame.paragraphs, second.text_frame.paragraphs,
                                      strict=False):
        if examine["examine_alignment"] and paragraph1.alignment != paragraph2.alignment:
            return False
        if examine["examine_text"] and paragraph1.text != paragraph2.text:
            return False
        if examine["examine_indent"] and paragraph1.level != paragraph2.level:
            return False
        for run1, run2 in zip(paragraph1.runs, paragraph2.runs, strict=False):
            if not _run_fonts_match(run1, run2, examine):
                return False
            if examine["examine_bullets"] and _bullets(slides[0]) != _bullets(slides[1]):
                return False
    return True


def _slides_match(slide1: Slide, slide2: Slide, slide_number: int, examine: dict[str, bool]) -> bool:
    if examine["examine_note"] and _notes(slide1).strip() != _notes(slide2).strip():
        return False
    for first, second in zip(slide1.shapes, slide2.shapes, strict=False):
        if not _position_options_pass(first, second, slide_number, examine):
            return False
        if (_has_text(first) and _has_text(second)
                and not _texts_match(first, second, (slide1, slide2), examine)):
            return False
    return True


def compare_pptx_files(result: str | None, expected: str | None, **options: Any) -> float:
    """1 if the result deck matches the expected one under the `examine_*` options (module doc)."""
    if result is None or expected is None:
        return 0.0
    examine = {name: bool(options.get(name, True)) for name in _ON_BY_DEFAULT}
    examine |= {name: bool(options.get(name, False)) for name in _OFF_BY_DEFAULT}
    deck1, deck2 = Presentation(result), Presentation(expected)
    if examine["examine_number_of_slides"] and len(deck1.slides) != len(deck2.slides):
        return 0.0
    for number, (slide1, slide2) in enumerate(zip(deck1.slides, deck2.slides, strict=False), start=1):
        if not _slides_match(slide1, slide2, number, examine):
            return 0.0
    return 1.0
