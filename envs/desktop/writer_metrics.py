"""OSWorld's single-task LibreOffice Writer metrics, read with python-docx (and, for the default
font, LibreOffice's own settings file). Each scores as OSWorld's does, quirks included:

- `find_default_font`: the `Standard` value under `/org.openoffice.Office.Writer/DefaultFont`
  in `registrymodifications.xcu` is `rules["font_name"]`;
- `contains_page_break`: a body paragraph has a page break (`w:br w:type="page"`);
- `compare_font_names`: every run of every body paragraph names `rules["font_name"]`;
- `compare_subscript_contains`: some pair of runs, paired by position in paired paragraphs,
  is subscript in both documents;
- `has_page_numbers_in_footers`: each section's footer's first paragraph holds a digit;
- `is_first_line_centered`: the first paragraph is centred;
- `check_tabstops`: the documents have as many non-blank paragraphs, each with the same tab
  stops (cleared ones and a left one at 0 aside) of the same alignment; the score is 1 minus
  the mean over paragraphs of the summed position differences over the text width. With
  `word_number_split_by_tabstop: n`, the `index`-th tab-separated part of each of the result's
  paragraphs must hold n words;
- `compare_contains_image`: runs, paired by position, hold a picture in both or neither;
- `compare_docx_images`: the same number of images, each with the same pixels, in order;
- `evaluate_strike_through_last_paragraph`, `check_italic_font_size_14`: the documents pass
  `compare_docx_files`, and every run of the last paragraph is struck through, or every italic
  run is 14 pt;
- `compare_docx_lines`: the same set of stripped non-blank paragraph texts;
- `compare_docx_files_and_ignore_new_lines`: empty paragraphs dropped, then the texts equal
  with whitespace collapsed (`ignore_blanks`, default on) or paragraph by paragraph;
- `compare_references`: the references are the non-blank paragraphs after the first one that
  is exactly `reference_indicator` (default "References"): neither document having one scores
  1, one having it 0; else as many references in each are needed, and with `s` their
  mean rapidfuzz similarity, the score is `(s - b) / (1 - b)` above `reference_base_result`
  `b` (default 0.5), 0 below. OSWorld's task also passes `content_only`, which it ignores.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ElementTree
from typing import Any

from docx.enum.text import WD_PARAGRAPH_ALIGNMENT, WD_TAB_ALIGNMENT
from PIL import Image
from rapidfuzz import fuzz

from envs.desktop.docs_metrics import compare_docx_files, open_docx

__all__ = [
    "WRITER_METRICS",
    "WRITER_OPTIONS",
    "check_italic_font_size_14",
    "check_tabstops",
    "compare_contains_image",
    "compare_docx_files_and_ignore_new_lines",
    "compare_docx_images",
    "compare_docx_lines",
    "compare_font_names",
    "compare_references",
    "compare_subscript_contains",
    "contains_page_break",
    "evaluate_strike_through_last_paragraph",
    "find_default_font",
    "has_page_numbers_in_footers",
    "is_first_line_centered",
]

_OOR = "{http://openoffice.org/2001/registry}"
_WORD = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_DEFAULT_FONT_PATH = "/org.openoffice.Office.Writer/DefaultFont"


def find_default_font(result: str | None, rules: dict[str, Any]) -> float:
    """1 if LibreOffice's settings make `rules["font_name"]` Writer's default font (an
    unreadable file scores 0)."""
    if not result:
        return 0.0
    try:
        root = ElementTree.parse(result).getroot()
    except (ElementTree.ParseError, OSError):
        return 0.0
    font = None
    for item in root.iter("item"):
        if item.get(f"{_OOR}path") != _DEFAULT_FONT_PATH:
            continue
        for prop in item.iter("prop"):
            if prop.get(f"{_OOR}name") == "Standard":
                for value in prop.findall("value"):
                    font = value.text
    return float(font == rules["font_name"])


def contains_page_break(result: str | None) -> float:
    """1 if a body paragraph holds a page break."""
    document = open_docx(result)
    if document is None:
        return 0.0
    return float(any(br.get(f"{_WORD}type") == "page" for paragraph in document.paragraphs
                     for run in paragraph.runs for br in run.element.iter(f"{_WORD}br")))


def compare_font_names(result: str | None, rules: dict[str, Any]) -> float:
    """1 if every run of the body names the font `rules["font_name"]`."""
    document = open_docx(result)
    if document is None:
        return 0.0
    return float(all(run.font.name == rules["font_name"] for paragraph in document.paragraphs
                     for run in paragraph.runs))


def compare_subscript_contains(result: str | None, expected: str | None) -> float:
    """1 if some pair of runs (paired by position) is subscript in both documents."""
    document1, document2 = open_docx(result), open_docx(expected)
    if document1 is None or document2 is None:
        return 0.0
    return float(any(run1.font.subscript and run2.font.subscript
                     for paragraph1, paragraph2 in zip(document1.paragraphs, document2.paragraphs,
                                                       strict=False)
                     for run1, run2 in zip(paragraph1.runs, paragraph2.runs, strict=False)))


def has_page_numbers_in_footers(result: str | None) -> float:
    """1 if the first footer paragraph of every section holds a digit (its page number)."""
    document = open_docx(result)
    if document is None:
        return 0.0
    for section in document.sections:
        paragraphs = section.footer.paragraphs
        if not any(character.isdigit() for character in (paragraphs[0].text if paragraphs else "")):
            return 0.0
    return 1.0


def is_first_line_centered(result: str | None) -> float:
    """1 if the first paragraph is centred."""
    document = open_docx(result)
    if document is None or not document.paragraphs:
        return 0.0
    return float(document.paragraphs[0].paragraph_format.alignment
                 == WD_PARAGRAPH_ALIGNMENT.CENTER)


def _counted_tab_stops(paragraph: Any) -> list[Any]:
    return [stop for stop in paragraph.paragraph_format.tab_stops
            if not (stop.alignment == WD_TAB_ALIGNMENT.CLEAR
                    or (stop.alignment == WD_TAB_ALIGNMENT.LEFT and stop.position == 0))]


def check_tabstops(result: str | None, expected: str | None, **options: Any) -> float:
    """1 minus the tab stops' mean offset from the expected ones (module doc); 0 where the
    paragraphs, stops or alignments do not pair up."""
    document1, document2 = open_docx(result), open_docx(expected)
    if document1 is None or document2 is None:
        return 0.0
    paragraphs1 = [paragraph for paragraph in document1.paragraphs if paragraph.text.strip()]
    paragraphs2 = [paragraph for paragraph in document2.paragraphs if paragraph.text.strip()]
    if len(paragraphs1) != len(paragraphs2) or not paragraphs1:
        return 0.0
    if (words := options.get("word_number_split_by_tabstop")) is not None:
        index = int(options.get("index", 0))
        for paragraph in paragraphs1:
            parts = paragraph.text.split("\t")
            if index >= len(parts) or len(parts[index].split()) != words:
                return 0.0
    section = document2.sections[0]
    text_width = section.page_width - section.left_margin - section.right_margin
    offset = 0.0
    for paragraph1, paragraph2 in zip(paragraphs1, paragraphs2, strict=True):
        stops1, stops2 = _counted_tab_stops(paragraph1), _counted_tab_stops(paragraph2)
        if len(stops1) != len(stops2):
            return 0.0
        if any(stop1.alignment != stop2.alignment
               for stop1, stop2 in zip(stops1, stops2, strict=True)):
            return 0.0
        offset += sum(abs(stop1.position - stop2.position)
                      for stop1, stop2 in zip(stops1, stops2, strict=True)) / text_width
    return 1 - offset / len(paragraphs1)


def compare_contains_image(result: str | None, expected: str | None) -> float:
    """1 unless some pair of runs (paired by position) holds a picture in one document only."""
    document1, document2 = open_docx(result), open_docx(expected)
    if document1 is None or document2 is None:
        return 0.0
    for paragraph1, paragraph2 in zip(document1.paragraphs, document2.paragraphs, strict=False):
        for run1, run2 in zip(paragraph1.runs, paragraph2.runs, strict=False):
            if ("graphicData" in run1.element.xml) != ("graphicData" in run2.element.xml):
                return 0.0
    return 1.0


def _image_pixels(document: Any) -> list[bytes]:
    return [Image.open(io.BytesIO(relation.target_part.blob)).tobytes()
            for relation in document.part.rels.values() if "image" in relation.reltype]


def compare_docx_images(result: str | None, expected: str | None) -> float:
    """1 if the documents hold the same images with the same pixels, in relation order."""
    document1, document2 = open_docx(result), open_docx(expected)
    if document1 is None or document2 is None:
        return 0.0
    return float(_image_pixels(document1) == _image_pixels(document2))


def evaluate_strike_through_last_paragraph(result: str | None, expected: str | None) -> float:
    """1 if the documents have the same text and every run of the last paragraph is struck
    through."""
    if not compare_docx_files(result, expected):
        return 0.0
    document = open_docx(result)
    if document is None or not document.paragraphs:
        return 0.0
    return float(all(run.font.strike for run in document.paragraphs[-1].runs))


def check_italic_font_size_14(result: str | None, expected: str | None) -> float:
    """1 if the documents have the same text and every italic run is 14 pt."""
    if not compare_docx_files(result, expected):
        return 0.0
    document = open_docx(result)
    if document is None:
        return 0.0
    return float(all(run.font.size is not None and run.font.size.pt == 14
                     for paragraph in document.paragraphs for run in paragraph.runs
                     if run.italic))


def _lines(document: Any) -> set[str]:
    return {paragraph.text.strip() for paragraph in document.paragraphs if paragraph.text.strip()}


def compare_docx_lines(result: str | None, expected: str | None) -> float:
    """1 if the documents have the same set of stripped non-blank paragraphs (order and
    repeats aside)."""
    document1, document2 = open_docx(result), open_docx(expected)
    if document1 is None or document2 is None:
        return 0.0
    return float(_lines(document1) == _lines(document2))


def compare_docx_files_and_ignore_new_lines(result: str | None, expected: str | None,
                                            **options: Any) -> float:
    """1 if the documents' non-empty paragraphs read the same (module doc)."""
    document1, document2 = open_docx(result), open_docx(expected)
    if document1 is None or document2 is None:
        return 0.0
    paragraphs1 = [paragraph.text for paragraph in document1.paragraphs if paragraph.text != ""]
    paragraphs2 = [paragraph.text for paragraph in document2.paragraphs if paragraph.text != ""]
    if options.get("ignore_blanks", True):
        return float(re.sub(r"\s+", " ", "\n".join(paragraphs1)).strip()
                     == re.sub(r"\s+", " ", "\n".join(paragraphs2)).strip())
    return float(paragraphs1 == paragraphs2)


def compare_references(result: str | None, expected: str | None, **options: Any) -> float:
    """How alike the documents' reference lists are, rescaled above `reference_base_result`
    (module doc)."""
    document1, document2 = open_docx(result), open_docx(expected)
    if document1 is None or document2 is None:
        return 0.0
    indicator = options.get("reference_indicator", "References")
    base = float(options.get("reference_base_result", 0.5))
    paragraphs1 = [paragraph.text for paragraph in document1.paragraphs]
    paragraphs2 = [paragraph.text for paragraph in document2.paragraphs]
    if indicator not in paragraphs1 and indicator not in paragraphs2:
        return 1.0
    if indicator not in paragraphs1 or indicator not in paragraphs2:
        return 0.0
    references1 = [text for text in paragraphs1[paragraphs1.index(indicator) + 1:] if text.strip()]
    references2 = [text for text in paragraphs2[paragraphs2.index(indicator) + 1:] if text.strip()]
    if len(references1) != len(references2) or not references1:
        return 0.0
    similarity = sum(fuzz.ratio(first, second) / 100
                     for first, second in zip(references1, references2, strict=True))
    similarity /= len(references1)
    return (similarity - base) / (1 - base) if similarity >= base else 0.0


WRITER_METRICS = {
    "find_default_font": find_default_font,
    "contains_page_break": contains_page_break,
    "compare_font_names": compare_font_names,
    "compare_subscript_contains": compare_subscript_contains,
    "has_page_numbers_in_footers": has_page_numbers_in_footers,
    "is_first_line_centered": is_first_line_centered,
    "check_tabstops": check_tabstops,
    "compare_contains_image": compare_contains_image,
    "compare_docx_images": compare_docx_images,
    "evaluate_strike_through_last_paragraph": evaluate_strike_through_last_paragraph,
    "check_italic_font_size_14": check_italic_font_size_14,
    "compare_docx_lines": compare_docx_lines,
    "compare_docx_files_and_ignore_new_lines": compare_docx_files_and_ignore_new_lines,
    "compare_references": compare_references,
}
# The options each metric takes (coverage's METRIC_OPTIONS); the others take none.
WRITER_OPTIONS: dict[str, frozenset[str]] = {
    **{name: frozenset() for name in WRITER_METRICS},
    "check_tabstops": frozenset({"word_number_split_by_tabstop", "index"}),
    "compare_docx_files_and_ignore_new_lines": frozenset({"ignore_blanks"}),
    "compare_references": frozenset({"reference_indicator", "reference_base_result",
                                     "content_only"}),
}
