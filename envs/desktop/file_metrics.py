"""OSWorld's metrics for plain files: CSV, JSON and YAML, text, archives and SQLite databases.

Each metric takes what OSWorld's does (host paths from `vm_file`, `cloud_file` or `cache_file`,
and a rule dict from the `rule` getter) and scores as OSWorld's does:

- `compare_text_file`: the two texts equal, after `ignore_blanks` drops all whitespace and
  `ignore_case` lower-cases them;
- `compare_csv`: the two files' lines equal, after `strict: false` strips each line and
  `ignore_case` lower-cases it;
- `check_csv`: rows read by `csv.DictReader`; every `expect` record (`{column: value}`) matches
  some row and no `unexpect` record matches any;
- `check_json`: each `expect` rule (`{"key": [path...], "method": ..., "ref": ...}`, a value
  rule of `value_rules`) holds for the value at its key path, and no `unexpect` rule holds;
  `is_yaml` reads YAML instead. An `expect` path that is absent scores 0;
- `diff_text_file`: difflib's similarity of the two files' lists of lines (a score in [0, 1]);
- `compare_archive`: both archives unpacked; the sorted names in `file_path` (a folder in
  them) must be equal, and the score is the mean of `file_type`'s metric over the pairs;
- `compare_zip_files`: the same member names, each member byte-equal, a PDF's text 95 %
  similar (difflib) instead;
- `run_sqlite3`: the first column of the first row of `rules["sql"]`, as a float;
- `file_contains`: the file holds every string of `rules["expected"]`;
- `check_line_number`: the number of lines holding a time (`HH:MM:SS`) is `rules["expected"]`;
- `compare_python_pure_text`: the files are equal once all whitespace is dropped.

A missing result file (None) scores 0, as in OSWorld.
"""

from __future__ import annotations

import csv
import difflib
import json
import re
import shutil
import sqlite3
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from envs.desktop.value_rules import matches_rule

__all__ = [
    "ARCHIVE_FILE_TYPES",
    "check_csv",
    "check_json",
    "check_line_number",
    "compare_archive",
    "compare_csv",
    "compare_python_pure_text",
    "compare_text_file",
    "compare_zip_files",
    "diff_text_file",
    "file_contains",
    "matches_record",
    "run_sqlite3",
]

_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d")
_PDF_TEXT_SIMILARITY = 0.95


def compare_text_file(result: str | None, expected: str | None, **options: Any) -> float:
    """1 if two text files hold the same text (`ignore_blanks` drops whitespace first)."""
    if result is None or expected is None:
        return 0.0
    result_text, expected_text = Path(result).read_text(), Path(expected).read_text()
    if options.get("ignore_blanks"):
        result_text, expected_text = "".join(result_text.split()), "".join(expected_text.split())
    if options.get("ignore_case"):
        result_text, expected_text = result_text.lower(), expected_text.lower()
    return float(result_text == expected_text)


def compare_csv(result: str | None, expected: str | None, **options: Any) -> float:
    """1 if the two CSV files hold the same lines (`strict`, default on, keeps their blanks;
    `ignore_case`)."""
    if result is None or expected is None:
        return 0.0
    lines = [Path(path).read_text().splitlines() for path in (result, expected)]
    if not options.get("strict", True):
        lines = [[line.strip() for line in file_lines] for file_lines in lines]
    if options.get("ignore_case", False):
        lines = [[line.lower() for line in file_lines] for file_lines in lines]
    return float(lines[0] == lines[1])


def matches_record(pattern: dict[str, Any], record: dict[str, Any]) -> bool:
    """Whether `record` has every key of `pattern` with the same value (OSWorld's
    `_match_record`, shared by CSV rows and Thunderbird's filters)."""
    return all(key in record and record[key] == value for key, value in pattern.items())


def check_csv(result: str | None, rules: dict[str, list[dict[str, str]]]) -> float:
    """1 if each `expect` record matches a row of the CSV file and no `unexpect` record
    matches any row."""
    if result is None:
        return 0.0
    with open(result, newline="") as file:
        rows = list(csv.DictReader(file))
    expected = all(any(matches_record(pattern, row) for row in rows)
                   for pattern in rules.get("expect", []))
    unexpected = any(matches_record(pattern, row) for row in rows
                     for pattern in rules.get("unexpect", []))
    return float(expected and not unexpected)


_MISSING = object()


def _at_key_path(document: Any, keys: list[Any]) -> Any:
    """The value at `keys` in nested dicts and lists, or `_MISSING` where a key is absent."""
    value = document
    for key in keys:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return value


def check_json(result: str | None, rules: dict[str, list[dict[str, Any]]],
               is_yaml: bool = False) -> float:
    """1 if every `expect` value rule holds at its key path and no `unexpect` rule does (an
    absent `unexpect` path is tested as None, as OSWorld does)."""
    if result is None:
        return 0.0
    with open(result) as file:
        document = yaml.safe_load(file) if is_yaml else json.load(file)
    for rule in rules.get("expect", []):
        value = _at_key_path(document, rule["key"])
        if value is _MISSING or not matches_rule(value, rule):
            return 0.0
    for rule in rules.get("unexpect", []):
        value = _at_key_path(document, rule["key"])
        if matches_rule(None if value is _MISSING else value, rule):
            return 0.0
    return 1.0


def diff_text_file(result: str | None, expected: str | None) -> float:
    """How alike two text files are, line by line (difflib's ratio, in [0, 1])."""
    if result is None or expected is None:
        return 0.0
    result_lines = Path(result).read_text().splitlines()
    expected_lines = Path(expected).read_text().splitlines()
    return difflib.SequenceMatcher(a=result_lines, b=expected_lines).ratio()


def _unpack(archive: str, folder: Path) -> None:
    """Unpack an archive the agent made: zipfile drops the parts of a member's name that would
    leave `folder` (absolute paths, `..`), and tar's `data` filter refuses such members and
    links out of it."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as members:
            members.extractall(folder)
    else:
        shutil.unpack_archive(archive, folder, filter="data")


def _archive_metric(file_type: str) -> Callable[..., float]:
    # Imported here: the office metrics import pandas and python-pptx, which most tasks skip.
    from envs.desktop.docs_metrics import compare_docx_files
    from envs.desktop.pdf_metrics import compare_pdfs
    from envs.desktop.slides_metrics import compare_pptx_files
    from envs.desktop.table_metrics import compare_table

    metrics: dict[str, Callable[..., float]] = {
        "text": compare_text_file, "pdf": compare_pdfs, "docx": compare_docx_files,
        "ppt": compare_pptx_files, "csv": compare_csv, "table": compare_table,
    }
    if file_type not in metrics:
        raise ValueError(f"compare_archive cannot compare {file_type!r} files here; file_type "
                         f"is one of {', '.join(metrics)}")
    return metrics[file_type]


ARCHIVE_FILE_TYPES = frozenset({"text", "pdf", "docx", "ppt", "csv", "table"})


def compare_archive(result: str | None, expected: str | None, **options: Any) -> float:
    """The mean of `file_type`'s metric (default `text`) over the files of the two archives'
    `file_path` folder (default their root), paired by sorted name; 0 if the names differ.
    Other options go to that metric."""
    if result is None or expected is None:
        return 0.0
    options = dict(options)
    file_path = str(options.pop("file_path", ""))
    metric = _archive_metric(str(options.pop("file_type", "text")))
    with tempfile.TemporaryDirectory(prefix="compare-archive-") as scratch:
        result_root, expected_root = Path(scratch, "result"), Path(scratch, "expected")
        _unpack(result, result_root)
        _unpack(expected, expected_root)
        result_folder, expected_folder = result_root / file_path, expected_root / file_path
        if not result_folder.is_dir() or not expected_folder.is_dir():
            return 0.0
        result_names = sorted(path.name for path in result_folder.iterdir())
        expected_names = sorted(path.name for path in expected_folder.iterdir())
        if result_names != expected_names or not result_names:
            return 0.0
        scores = [float(metric(str(result_folder / name), str(expected_folder / name), **options))
                  for name in result_names]
    return sum(scores) / len(scores)


def _pdf_text(data: bytes) -> str:
    from envs.desktop.pdf_metrics import pdf_text

    with tempfile.NamedTemporaryFile(suffix=".pdf") as file:
        file.write(data)
        file.flush()
        return pdf_text(file.name, strip=False)


def compare_zip_files(result: str | None, expected: str | None) -> float:
    """1 if two zip files hold the same member names, each member byte-equal, except that a
    PDF member's text need only be 95 % similar."""
    if result is None or expected is None:
        return 0.0
    with zipfile.ZipFile(result) as result_zip, zipfile.ZipFile(expected) as expected_zip:
        names = set(result_zip.namelist())
        if names != set(expected_zip.namelist()):
            return 0.0
        for name in names:
            result_data, expected_data = result_zip.read(name), expected_zip.read(name)
            if name.lower().endswith(".pdf"):
                ratio = difflib.SequenceMatcher(None, _pdf_text(result_data),
                                                _pdf_text(expected_data)).ratio()
                if ratio < _PDF_TEXT_SIMILARITY:
                    return 0.0
            elif result_data != expected_data:
                return 0.0
    return 1.0


def run_sqlite3(result: str | None, rules: dict[str, Any]) -> float:
    """The first value `rules["sql"]` selects from the database (None counts 0)."""
    if result is None:
        return 0.0
    connection = sqlite3.connect(result)
    try:
        row = connection.execute(rules["sql"]).fetchone()
    finally:
        connection.close()
    return float((row[0] if row else None) or 0)


def file_contains(result: str | None, rules: dict[str, Any]) -> float:
    """1 if the text file holds every string of `rules["expected"]` (an unreadable file
    scores 0)."""
    if not result:
        return 0.0
    try:
        text = Path(result).read_text()
    except (OSError, UnicodeDecodeError):
        return 0.0
    return float(all(part in text for part in rules["expected"]))


def check_line_number(result: str | None, rules: dict[str, Any]) -> float:
    """1 if the number of lines holding a time of day (`HH:MM:SS`) is `rules["expected"]`."""
    if result is None or not Path(result).is_file():
        return 0.0
    try:
        lines = Path(result).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return 0.0
    return float(sum(1 for line in lines if _TIME.search(line)) == int(rules["expected"]))


def compare_python_pure_text(result: str | None, expected: str | None) -> float:
    """1 if the two files are equal once every whitespace character is dropped."""
    if not result or not expected:
        return 0.0
    result_text, expected_text = Path(result).read_text(), Path(expected).read_text()
    return float("".join(result_text.split()) == "".join(expected_text.split()))
