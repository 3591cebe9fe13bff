"""OSWorld's single-task Writer metrics, checked against OSWorld's semantics on .docx files the
tests write with python-docx (and a LibreOffice settings file). No desktop starts."""

from __future__ import annotations

from pathlib import Path

from docx import Document
from docx.enum.text import WD_ALIGN_PARAGRAPH, WD_BREAK, WD_TAB_ALIGNMENT
from docx.shared import Inches, Pt
from PIL import Image

from envs.desktop.coverage import METRIC_OPTIONS
from envs.desktop.evaluate import METRICS
from envs.desktop.writer_metrics import (
    WRITER_METRICS,
    check_italic_font_size_14,
    check_tabstops,
    compare_contains_image,
    compare_docx_files_and_ignore_new_lines,
    compare_docx_images,
    compare_docx_lines,
    compare_font_names,
    compare_references,
    compare_subscript_contains,
    contains_page_break,
    evaluate_strike_through_last_paragraph,
    find_default_font,
    has_page_numbers_in_footers,
    is_first_line_centered,
)


def docx(path: Path, *paragraphs: str, build=None) -> str:
    """A .docx of `paragraphs`; `build(document)` adds the formatting under test."""
    document = Document()
    for text in paragraphs:
        document.add_paragraph(text)
    if build is not None:
        build(document)
    document.save(path)
    return str(path)


def test_every_writer_metric_is_registered_with_its_options() -> None:
    for name in WRITER_METRICS:
        assert METRICS[name] is WRITER_METRICS[name] and name in METRIC_OPTIONS
    assert METRIC_OPTIONS["check_tabstops"] == {"word_number_split_by_tabstop", "index"}


def test_find_default_font_reads_writers_standard_font_from_the_settings(tmp_path) -> None:
    settings = tmp_path / "registrymodifications.xcu"
    settings.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/'
        'registry" xmlns:xs="http://www.w3.org/2001/XMLSchema">\n<item oor:path="/org.openoffice.'
        'Office.Common/Misc"><prop oor:name="Standard" oor:op="fuse"><value>Other</value></prop>'
        '</item>\n<item oor:path="/org.openoffice.Office.Writer/DefaultFont"><prop oor:name='
        '"Standard" oor:op="fuse"><value>Times New Roman</value></prop></item>\n</oor:items>\n')
    assert find_default_font(str(settings), {"font_name": "Times New Roman"}) == 1.0
    assert find_default_font(str(settings), {"font_name": "Liberation Serif"}) == 0.0
    broken = tmp_path / "broken.xcu"
    broken.write_text("<oor:items")
    assert find_default_font(str(broken), {"font_name": "Times New Roman"}) == 0.0
    assert find_default_font(None, {"font_name": "Times New Roman"}) == 0.0


def test_contains_page_break_finds_a_page_break_run(tmp_path) -> None:
    plain = docx(tmp_path / "plain.docx", "a", "b")
    broken = docx(tmp_path / "broken.docx", "a",
                  build=lambda d: d.paragraphs[0].add_run().add_break(WD_BREAK.PAGE))
    line = docx(tmp_path / "line.docx", "a",
                build=lambda d: d.paragraphs[0].add_run().add_break(WD_BREAK.LINE))
    assert (contains_page_break(broken), contains_page_break(plain),
            contains_page_break(line), contains_page_break(None)) == (1.0, 0.0, 0.0, 0.0)


def _font(name: str | None):
    def build(document) -> None:
        for paragraph in document.paragraphs:
            for run in paragraph.runs:
                run.font.name = name
    return build


def test_compare_font_names_wants_every_run_in_the_font(tmp_path) -> None:
    rules = {"font_name": "Times New Roman"}
    assert compare_font_names(docx(tmp_path / "a.docx", "x", "y", build=_font("Times New Roman")),
                              rules) == 1.0
    assert compare_font_names(docx(tmp_path / "b.docx", "x", build=_font(None)), rules) == 0.0


def test_compare_subscript_contains_wants_a_subscript_run_in_both(tmp_path) -> None:
    def subscript(document) -> None:
        paragraph = document.add_paragraph("H")
        paragraph.add_run("2").font.subscript = True
        paragraph.add_run("O")

    both = docx(tmp_path / "a.docx", build=subscript)
    gold = docx(tmp_path / "gold.docx", build=subscript)
    plain = docx(tmp_path / "plain.docx", build=lambda d: d.add_paragraph("H2O"))
    assert compare_subscript_contains(both, gold) == 1.0
    assert compare_subscript_contains(plain, gold) == 0.0


def test_has_page_numbers_in_footers_wants_a_digit_in_every_footer(tmp_path) -> None:
    numbered = docx(tmp_path / "a.docx", "x",
                    build=lambda d: setattr(d.sections[0].footer.paragraphs[0], "text", "Page 1"))
    unnumbered = docx(tmp_path / "b.docx", "x",
                      build=lambda d: setattr(d.sections[0].footer.paragraphs[0], "text", "Page"))
    assert has_page_numbers_in_footers(numbered) == 1.0
    assert has_page_numbers_in_footers(unnumbered) == 0.0


def test_is_first_line_centered_reads_the_first_paragraphs_alignment(tmp_path) -> None:
    def centre(document) -> None:
        document.paragraphs[0].alignment = WD_ALIGN_PARAGRAPH.CENTER

    assert is_first_line_centered(docx(tmp_path / "a.docx", "Title", "b", build=centre)) == 1.0
    assert is_first_line_centered(docx(tmp_path / "b.docx", "Title", "b")) == 0.0


def _tabs(*positions: float, alignment=WD_TAB_ALIGNMENT.LEFT):
    def build(document) -> None:
        for paragraph in document.paragraphs:
            for position in positions:
                paragraph.paragraph_format.tab_stops.add_tab_stop(Inches(position), alignment)
    return build


def test_check_tabstops_scores_the_offset_of_the_tab_stops(tmp_path) -> None:
    lines = ("Ann Lee Smith\tbook", "Bob Roy Tan\tpen")
    gold = docx(tmp_path / "gold.docx", *lines, build=_tabs(3))
    assert check_tabstops(docx(tmp_path / "a.docx", *lines, build=_tabs(3)), gold) == 1.0
    section_width = 6.0  # python-docx's default page (8.5 in) less two 1.25 in margins
    shifted = check_tabstops(docx(tmp_path / "b.docx", *lines, build=_tabs(3.6)), gold)
    assert abs(shifted - (1 - 0.6 / section_width)) < 1e-6
    assert check_tabstops(docx(tmp_path / "c.docx", *lines), gold) == 0.0  # no stop
    right = docx(tmp_path / "d.docx", *lines, build=_tabs(3, alignment=WD_TAB_ALIGNMENT.RIGHT))
    assert check_tabstops(right, gold) == 0.0
    options = {"word_number_split_by_tabstop": 3, "index": 0}
    assert check_tabstops(docx(tmp_path / "e.docx", *lines, build=_tabs(3)), gold, **options) == 1.0
    two_words = docx(tmp_path / "f.docx", "Ann Lee\tbook", "Bob Roy Tan\tpen", build=_tabs(3))
    assert check_tabstops(two_words, gold, **options) == 0.0


def _picture(tmp_path: Path, colour: str):
    image = tmp_path / f"{colour}.png"
    Image.new("RGB", (8, 8), colour).save(image)
    return lambda document: document.add_picture(str(image))


def test_compare_contains_image_and_compare_docx_images(tmp_path) -> None:
    red = docx(tmp_path / "red.docx", build=_picture(tmp_path, "red"))
    red_again = docx(tmp_path / "red2.docx", build=_picture(tmp_path, "red"))
    blue = docx(tmp_path / "blue.docx", build=_picture(tmp_path, "blue"))
    text = docx(tmp_path / "text.docx", "just text")
    assert compare_contains_image(red, blue) == 1.0
    assert compare_contains_image(text, red) == 0.0
    assert compare_docx_images(red, red_again) == 1.0
    assert compare_docx_images(red, blue) == 0.0
    assert compare_docx_images(text, red) == 0.0


def test_strike_through_and_italic_size_need_the_same_text_first(tmp_path) -> None:
    def strike_last(document) -> None:
        document.add_paragraph().add_run("old rule").font.strike = True

    gold = docx(tmp_path / "gold.docx", "Outline", build=strike_last)
    assert evaluate_strike_through_last_paragraph(
        docx(tmp_path / "a.docx", "Outline", build=strike_last), gold) == 1.0
    unstruck = docx(tmp_path / "b.docx", "Outline", "old rule")
    assert evaluate_strike_through_last_paragraph(unstruck, gold) == 0.0
    assert evaluate_strike_through_last_paragraph(
        docx(tmp_path / "c.docx", "Other", build=strike_last), gold) == 0.0

    def italic(size: int):
        def build(document) -> None:
            run = document.add_paragraph().add_run("emphasis")
            run.italic, run.font.size = True, Pt(size)
        return build

    gold = docx(tmp_path / "gold14.docx", "x", build=italic(14))
    assert check_italic_font_size_14(docx(tmp_path / "d.docx", "x", build=italic(14)), gold) == 1.0
    assert check_italic_font_size_14(docx(tmp_path / "e.docx", "x", build=italic(12)), gold) == 0.0


def test_compare_docx_lines_compares_sets_of_stripped_lines(tmp_path) -> None:
    gold = docx(tmp_path / "gold.docx", "a", "b", "")
    assert compare_docx_lines(docx(tmp_path / "a.docx", " b", "a ", "a"), gold) == 1.0
    assert compare_docx_lines(docx(tmp_path / "b.docx", "a"), gold) == 0.0


def test_compare_docx_files_and_ignore_new_lines_drops_empty_paragraphs(tmp_path) -> None:
    gold = docx(tmp_path / "gold.docx", "Gemini  results", "", "done")
    spaced = docx(tmp_path / "a.docx", "Gemini results", "done", "")
    assert compare_docx_files_and_ignore_new_lines(spaced, gold) == 1.0
    assert compare_docx_files_and_ignore_new_lines(spaced, gold, ignore_blanks=False) == 0.0
    exact = docx(tmp_path / "b.docx", "Gemini  results", "done")
    assert compare_docx_files_and_ignore_new_lines(exact, gold, ignore_blanks=False) == 1.0


def test_compare_references_rescales_the_reference_similarity(tmp_path) -> None:
    gold = docx(tmp_path / "gold.docx", "Body", "References", "Smith, J. (2020). A study.",
                "Doe, A. (2019). Another.")
    assert compare_references(docx(tmp_path / "a.docx", "Body text", "References",
                                   "Smith, J. (2020). A study.", "Doe, A. (2019). Another."),
                              gold, content_only=True, reference_base_result=0.92) == 1.0
    close = docx(tmp_path / "b.docx", "References", "Smith, J. (2020). A study",
                 "Doe, A. (2019). Another.")
    score = compare_references(close, gold, reference_base_result=0.92)
    assert 0.0 < score < 1.0
    assert compare_references(docx(tmp_path / "c.docx", "References", "Only one."), gold) == 0.0
    assert compare_references(docx(tmp_path / "d.docx", "No list"), gold) == 0.0
    assert compare_references(docx(tmp_path / "e.docx", "x"), docx(tmp_path / "f.docx", "y")) == 1.0
