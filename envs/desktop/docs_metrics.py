"""OSWorld's LibreOffice Writer metrics over .docx files, read with python-docx.

- `compare_docx_files`: the documents' paragraph texts (body paragraphs; tables, headers and
  footers are not read) compared under its options, OSWorld's defaults:
  - `ignore_blanks` (on): the paragraphs joined by newlines with every run of whitespace made
    one space, then stripped, must be equal; off, the paragraph lists must be equal one by one;
  - `ignore_case` (off): lower-case first;
  - `ignore_order` (off): sort the paragraphs first;
  - `content_only` (off): score the rapidfuzz ratio (0 to 1) of the whitespace-collapsed texts,
    a partial score rather than 0 or 1.
- `compare_line_spacing`: the documents pass `compare_docx_files` and every paragraph has the
  same line spacing.
- `compare_docx_tables`: the same number of tables, each of the same shape, with the same text
  in each cell (stripped).

OSWorld also compares two .odt documents in `compare_docx_files` (through odfpy, reading text
and spans' text only); no OSWorld task gives it one, and here any file that is not .docx
scores 0, as a mismatch of types does there.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from docx import Document
from docx.document import Document as DocxDocument
from rapidfuzz import fuzz

__all__ = ["DOCX_OPTIONS", "compare_docx_files", "compare_docx_tables", "compare_line_spacing",
           "open_docx"]

logger = logging.getLogger(__name__)

DOCX_OPTIONS = frozenset({"ignore_blanks", "ignore_case", "ignore_order", "content_only"})


def open_docx(path: str | None) -> DocxDocument | None:
    """The .docx document at `path`, or None (logged) where there is none or python-docx
    cannot read it: OSWorld's Writer metrics score such a file 0."""
    if not path or not str(path).endswith(".docx"):
        if path:
            logger.info("%s is no .docx file; OSWorld's Writer metrics here read .docx only", path)
        return None
    try:
        return Document(path)
    except Exception as error:  # noqa: BLE001 - a file python-docx cannot read scores 0, as in OSWorld
        logger.info("python-docx cannot read %s: %r", path, error)
        return None


def _collapsed(paragraphs: list[str]) -> str:
    return re.sub(r"\s+", " ", "\n".join(paragraphs)).strip()


def compare_docx_files(result: str | None, expected: str | None, **options: Any) -> float:
    """1 if the documents' paragraphs read the same under the options (module doc); with
    `content_only`, their similarity from 0 to 1."""
    documents = [open_docx(result), open_docx(expected)]
    if None in documents:
        return 0.0
    paragraphs1, paragraphs2 = ([paragraph.text for paragraph in document.paragraphs]
                                for document in documents)
    if options.get("ignore_order", False):
        paragraphs1, paragraphs2 = sorted(paragraphs1), sorted(paragraphs2)
    ignore_case = options.get("ignore_case", False)
    if options.get("content_only", False) or options.get("ignore_blanks", True):
        text1, text2 = _collapsed(paragraphs1), _collapsed(paragraphs2)
        if ignore_case:
            text1, text2 = text1.lower(), text2.lower()
        if options.get("content_only", False):
            return fuzz.ratio(text1, text2) / 100.0
        return float(text1 == text2)
    if ignore_case:
        paragraphs1 = [paragraph.lower() for paragraph in paragraphs1]
        paragraphs2 = [paragraph.lower() for paragraph in paragraphs2]
    return float(paragraphs1 == paragraphs2)


def compare_line_spacing(result: str | None, expected: str | None) -> float:
    """1 if the documents have the same text (`compare_docx_files`' defaults) and each paragraph
    the same line spacing (python-docx's: a multiple of lines, or a length)."""
    if not compare_docx_files(result, expected):
        return 0.0
    document1, document2 = open_docx(result), open_docx(expected)
    assert document1 is not None and document2 is not None  # compare_docx_files opened them
    paragraphs1, paragraphs2 = document1.paragraphs, document2.paragraphs
    return float(len(paragraphs1) == len(paragraphs2) and all(
        first.paragraph_format.line_spacing == second.paragraph_format.line_spacing
        for first, second in zip(paragraphs1, paragraphs2, strict=True)))


def compare_docx_tables(result: str | None, expected: str | None) -> float:
    """1 if the documents have the same tables: count, rows, columns and stripped cell texts."""
    document1, document2 = open_docx(result), open_docx(expected)
    if document1 is None or document2 is None or len(document1.tables) != len(document2.tables):
        return 0.0
    for table1, table2 in zip(document1.tables, document2.tables, strict=True):
        if (len(table1.rows), len(table1.columns)) != (len(table2.rows), len(table2.columns)):
            return 0.0
        for row in range(len(table1.rows)):
            for column in range(len(table1.columns)):
                if table1.cell(row, column).text.strip() != table2.cell(row, column).text.strip():
                    return 0.0
    return 1.0
