"""OSWorld's PDF metrics, read with pypdf.

- `compare_pdfs`: the text of each pair of PDFs (all pages), compared by rapidfuzz's `ratio`
  (0 to 1); lists of PDFs (a `multi` getter) are paired in order and the score is the mean over
  the expected list's length. A pair that cannot be read scores 0.
- `check_pdf_pages`: the page count against `rules["ref_value"]` by `rules["relation"]`
  (`eq`, `lt`, `ge`, ... from `operator`).

OSWorld extracts text with PyMuPDF, which is AGPL-licensed; pypdf's text of the same page can
differ in line breaks and spacing, so a fuzzy score may differ in its last digits. Two PDFs
with the same text still score 1 and unrelated ones near 0.
"""

from __future__ import annotations

import logging
import operator
from typing import Any

from pypdf import PdfReader
from pypdf.errors import PdfReadError
from rapidfuzz import fuzz

__all__ = ["PAGE_RELATIONS", "check_pdf_pages", "compare_pdfs", "pdf_text"]

logger = logging.getLogger(__name__)

PAGE_RELATIONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


def pdf_text(path: str, strip: bool = True) -> str:
    """The text of every page of a PDF, a line break between pages."""
    text = "\n".join(page.extract_text() or "" for page in PdfReader(path).pages)
    return text.strip() if strip else text


def compare_pdfs(result: str | list[str | None] | None,
                 expected: str | list[str | None] | None) -> float:
    """How alike the PDFs' texts are (rapidfuzz ratio in [0, 1]), averaged over the pairs."""
    if not isinstance(expected, list):
        result, expected = [result], [expected]  # type: ignore[list-item]
    if not isinstance(result, list) or not expected:
        return 0.0
    total = 0.0
    for result_path, expected_path in zip(result, expected, strict=False):
        if result_path is None or expected_path is None:
            continue
        try:
            total += fuzz.ratio(pdf_text(result_path), pdf_text(expected_path)) / 100
        except (OSError, PdfReadError) as error:
            logger.info("compare_pdfs could not read %s or %s: %s", result_path, expected_path,
                        error)
    return total / len(expected)


def check_pdf_pages(result: str | None, rules: dict[str, Any]) -> float:
    """1 if the PDF's page count stands in `rules["relation"]` to `rules["ref_value"]`."""
    if result is None:
        return 0.0
    relation = str(rules["relation"])
    if relation not in PAGE_RELATIONS:
        raise ValueError(f"check_pdf_pages: relation {relation!r} is not one of "
                         f"{', '.join(sorted(PAGE_RELATIONS))}")
    pages = len(PdfReader(result).pages)
    return float(getattr(operator, relation)(pages, rules["ref_value"]))
