"""OSWorld's `compare_table`: a LibreOffice Calc result scored by a list of rules, each checking
one aspect of the result workbook against the expected one (or against a reference value).

The metric scores 1 when every rule passes, and stops at the first that fails. A rule names the
sheets it reads by an index:

- an int `n` or `"RIn"`: the result's n-th worksheet; `"RNname"`: the result's sheet `name`;
- `"EIn"`, `"ENname"`: the same in the expected workbook.

An index past the last sheet, or a name no sheet has, reads as a missing sheet, which fails
the rule. A result that is missing or is no workbook scores 0.

`RULE_KEYS` lists each rule type this module implements with the keys it reads, and
`RULE_PROPERTIES` the property names a rule's list of properties may hold; `coverage` reports
any other as missing, and the rules of `PARTIAL_RULES` too. The rules, as OSWorld defines them:

- `sheet_name`: both workbooks have the same worksheet names in the same order;
- `sheet_data` (`sheet_idx0`, `sheet_idx1`, `precision`=4): pandas reads both sheets with the
  first row as header, rounds numbers to `precision` decimals, and the frames are equal, dtypes
  included (OSWorld's tasks also pass `ignore_case`, which OSWorld ignores, and so do we);
- `sheet_print` (`ignore_case`): the sheets' CSV exports by LibreOffice, lines stripped and
  trailing blank lines dropped, are equal;
- `sheet_fuzzy` (`rules`: a list of `{range, type, threshold, ignore_case, ignore_chars,
  trim_leadings, trim_trailings, normalization}`): each cell of each range, as text, passes the
  rule's `type` against the same cell of the other sheet: `exact_match`, `includes` (the other
  value is in this one), `included_by`, or `fuzzy_match` (rapidfuzz ratio >= `threshold`, 85);
- `check_cell` (`sheet_idx`, `coordinate`, `props`): each of the cell's properties (`value` or a
  cell style, see `spreadsheets.cell_style`) passes its value rule (`value_rules`);
- `style` (`props`): every cell of both sheets has the same styles; a sheet with conditional
  formatting is refused (`UnsupportedSpreadsheetFeature`), as OSWorld evaluates its formulas;
- `freeze`: the same frozen panes; `zoom` (`sheet_idx`, `method`, `ref`): the sheet's zoom
  (100 when unset) passes the value rule;
- `row_props` (`props`): the same rows carry the same row properties;
- `data_validation` (`sheet_idx`, `dv_props`: a list of `{attribute: value rule}`): the sheet
  has at least as many validations as `dv_props` and each matches one of them;
- `chart` (`chart_props`): per data series, the sheets' charts have the same properties;
- `pivot_table` (`pivot_props`): per data source, the sheets' pivot tables have the same fields.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openpyxl.chart._chart import ChartBase
from openpyxl.pivot.table import TableDefinition
from openpyxl.utils import coordinate_to_tuple, get_column_letter
from openpyxl.worksheet.cell_range import MultiCellRange
from openpyxl.worksheet.worksheet import Worksheet
from rapidfuzz import fuzz

from envs.desktop.spreadsheets import CELL_STYLES, Spreadsheet, cell_style
from envs.desktop.value_rules import matches_rule

__all__ = ["FUZZY_CHECK_KEYS", "PARTIAL_RULES", "RULE_KEYS", "RULE_PROPERTIES",
           "UnsupportedSpreadsheetFeature", "UnsupportedTableRule", "compare_table"]

logger = logging.getLogger(__name__)


class UnsupportedTableRule(ValueError):
    """A `compare_table` rule of a type this module does not implement."""


class UnsupportedSpreadsheetFeature(ValueError):
    """A workbook holds something a rule would have to evaluate and this module cannot."""


@dataclass(frozen=True)
class _Books:
    result: Spreadsheet
    expected: Spreadsheet | None

    def sheet(self, index: int | str) -> tuple[Spreadsheet | None, str]:
        """The workbook and sheet name a rule's sheet index names."""
        if isinstance(index, int):
            return self.result, _nth(self.result, index)
        side, kind, rest = index[:1], index[1:2], index[2:]
        if side not in ("R", "E") or kind not in ("I", "N"):
            raise ValueError(f"sheet index {index!r} is none of OSWorld's: an int, 'RI<n>', "
                             "'RN<name>', 'EI<n>' or 'EN<name>'")
        book = self.result if side == "R" else self.expected
        if book is None or kind == "N":
            return book, rest
        return book, _nth(book, int(rest))

    def worksheet(self, index: int | str) -> Worksheet | None:
        book, name = self.sheet(index)
        return book.worksheet(name) if book is not None else None


def _nth(book: Spreadsheet, index: int) -> str:
    try:
        return book.sheet_names[index]
    except IndexError:
        return ""


def _sheet_name(rule: dict[str, Any], books: _Books) -> bool:
    return books.expected is not None and books.result.sheet_names == books.expected.sheet_names


def _sheet_data(rule: dict[str, Any], books: _Books) -> bool:
    frames = []
    for index in (rule["sheet_idx0"], rule["sheet_idx1"]):
        book, name = books.sheet(index)
        frame = book.data_frame(name) if book is not None else None
        if frame is None:
            return False
        frames.append(frame.round(rule.get("precision", 4)))
    return frames[0].equals(frames[1])


def _sheet_print(rule: dict[str, Any], books: _Books) -> bool:
    printed = []
    for index in (rule["sheet_idx0"], rule["sheet_idx1"]):
        book, name = books.sheet(index)
        lines = book.printed_lines(name) if book is not None else None
        if lines is None:
            return False
        printed.append([line.lower() for line in lines] if rule.get("ignore_case") else lines)
    return printed[0] == printed[1]


def _normalized(value: str, check: dict[str, Any]) -> str:
    for old, new in check.get("normalization", []):
        value = value.replace(old, new)
    if "trim_leadings" in check:
        value = value.lstrip(check["trim_leadings"])
    if "trim_trailings" in check:
        value = value.rstrip(check["trim_trailings"])
    if "ignore_chars" in check:
        value = "".join(char for char in value if char not in set(check["ignore_chars"]))
    return value.lower() if check.get("ignore_case") else value


def _fuzzy_pair_passes(check: dict[str, Any], first: str, second: str) -> bool:
    kind = check["type"]
    if kind == "includes":
        return second in first
    if kind == "included_by":
        return first in second
    if kind == "fuzzy_match":
        return fuzz.ratio(first, second) >= check.get("threshold", 85.0)
    if kind == "exact_match":
        return first == second
    raise UnsupportedTableRule(f"sheet_fuzzy check type {kind!r} is none of includes, included_by, "
                               "fuzzy_match, exact_match")


def _sheet_fuzzy(rule: dict[str, Any], books: _Books) -> bool:
    first, second = books.sheet(rule["sheet_idx0"]), books.sheet(rule["sheet_idx1"])
    for check in rule["rules"]:
        for cell_range in MultiCellRange(check["range"]):
            for row, column in cell_range.cells:
                coordinate = f"{get_column_letter(column)}{row}"
                # OSWorld compares str() of the values: an empty cell is "None", 3 is "3.0"
                values = [_normalized(str(_cell_value(book, name, coordinate)), check)
                          for book, name in (first, second)]
                if not _fuzzy_pair_passes(check, *values):
                    return False
    return True


def _cell_value(book: Spreadsheet | None, name: str, coordinate: str) -> float | str | None:
    return book.cell_value(name, coordinate) if book is not None else None


def _check_cell(rule: dict[str, Any], books: _Books) -> bool:
    sheet = books.worksheet(rule["sheet_idx"])
    if sheet is None:
        return False
    cell = sheet[rule["coordinate"]]
    for prop, value_rule in rule["props"].items():
        value = (_cell_value(*books.sheet(rule["sheet_idx"]), rule["coordinate"]) if prop == "value"
                 else cell_style(prop, cell))
        if not matches_rule(value, value_rule):
            return False
    return True


def _styles(sheet: Worksheet | None, props: list[str]) -> dict[str, list[Any]]:
    if sheet is None:
        return {}
    if any(formatting.rules for formatting in sheet.conditional_formatting):
        raise UnsupportedSpreadsheetFeature(
            f"sheet {sheet.title!r} has conditional formatting; OSWorld's style rule evaluates its "
            "formulas to find the cells it styles, which this env does not do")
    return {cell.coordinate: [cell_style(prop, cell) for prop in props]
            for column in sheet.iter_cols() for cell in column}


def _style(rule: dict[str, Any], books: _Books) -> bool:
    props = rule.get("props", [])
    return (_styles(books.worksheet(rule["sheet_idx0"]), props)
            == _styles(books.worksheet(rule["sheet_idx1"]), props))


def _freeze(rule: dict[str, Any], books: _Books) -> bool:
    sheets = [books.worksheet(rule["sheet_idx0"]), books.worksheet(rule["sheet_idx1"])]
    return None not in sheets and sheets[0].freeze_panes == sheets[1].freeze_panes


def _zoom(rule: dict[str, Any], books: _Books) -> bool:
    sheet = books.worksheet(rule["sheet_idx"])
    return sheet is not None and matches_rule(sheet.sheet_view.zoomScale or 100.0, rule)


def _rows(sheet: Worksheet | None, props: list[str]) -> dict[int, dict[str, Any]]:
    if sheet is None:
        return {}
    return {number: {prop: getattr(dimension, prop) for prop in props}
            for number, dimension in sheet.row_dimensions.items()}


def _row_props(rule: dict[str, Any], books: _Books) -> bool:
    props = rule.get("props", [])
    return (_rows(books.worksheet(rule["sheet_idx0"]), props)
            == _rows(books.worksheet(rule["sheet_idx1"]), props))


def _data_validation(rule: dict[str, Any], books: _Books) -> bool:
    sheet = books.worksheet(rule["sheet_idx"])
    if sheet is None:
        return False
    validations = sheet.data_validations.dataValidation
    return len(validations) >= len(rule["dv_props"]) and all(
        any(all(matches_rule(getattr(validation, attribute), value_rule)
                for attribute, value_rule in wanted.items()) for wanted in rule["dv_props"])
        for validation in validations)


def _formula(source: Any) -> str:
    for kind in ("numRef", "strRef"):
        reference = getattr(source, kind, None)
        if reference is not None:
            return str(reference.f)
    return ""


def _title(title: Any) -> str | None:
    try:
        return title.tx.rich.p[0].r[0].t
    except (AttributeError, IndexError, TypeError):
        return None


def _chart_properties(chart: ChartBase, props: set[str]) -> dict[str, Any]:
    readers: dict[str, Callable[[], Any]] = {
        "title": lambda: _title(chart.title),
        "legend": lambda: chart.legend.position if chart.legend is not None else None,
        "type": lambda: chart.tagname,
        "direction": lambda: getattr(chart, "barDir", None),
        "xtitle": lambda: _title(getattr(chart.x_axis, "title", None)),
        "ytitle": lambda: _title(getattr(chart.y_axis, "title", None)),
    }
    return {prop: readers[prop]() for prop in readers if prop in props}


def _charts(sheet: Worksheet | None, props: set[str]) -> dict[str, dict[str, Any]]:
    """Each chart's properties keyed by its series (`values,categories;...`). openpyxl keeps
    the charts it read in `_charts`, its only record of them."""
    if sheet is None:
        return {}
    return {";".join(f"{_formula(series.val)},{_formula(series.cat)}" for series in chart.series):
            _chart_properties(chart, props) for chart in sheet._charts}


def _chart(rule: dict[str, Any], books: _Books) -> bool:
    props = set(rule.get("chart_props", []))
    return (_charts(books.worksheet(rule["sheet_idx0"]), props)
            == _charts(books.worksheet(rule["sheet_idx1"]), props))


def _pivot_properties(pivot: TableDefinition, props: set[str]) -> tuple[str, dict[str, Any]]:
    """The pivot table's data source and fields. As OSWorld does, fields are numbered from the
    first source column that a field selects items of: a table built on A:E that uses only
    B:D reads the same as one built on B:D."""
    selections = [[(item.h, item.x) for item in field.items if item.x is not None]
                  for field in pivot.pivotFields]
    used = [number for number, selection in enumerate(selections) if selection]
    left = used[0] if used else len(selections)
    right = len(selections) - 1 - used[-1] if used else 0
    source = pivot.cache.cacheSource
    first, last = source.worksheetSource.ref.split(":")
    first_row, first_column = coordinate_to_tuple(first)
    last_row, last_column = coordinate_to_tuple(last)
    key = (f"{source.type};{(first_row, first_column + left)}:{(last_row, last_column - right)};"
           f"{source.worksheetSource.sheet}")
    info: dict[str, Any] = {}
    if "filter" in props:
        info["selection"] = [set(selection) for selection in selections[left:len(selections) - right]]
        info["filter_fields"] = {field.fld for field in pivot.pageFields}
    if "col_fields" in props:
        info["col_fields"] = [field.x - left for field in pivot.colFields]
    if "row_fields" in props:
        info["row_fields"] = [field.x - left for field in pivot.rowFields]
    if "data_fields" in props:
        info["data_fields"] = [f"{field.fld - left:d};;{field.subtotal};{field.showDataAs}"
                               for field in pivot.dataFields]
    return key, info


def _pivots(sheet: Worksheet | None, props: set[str]) -> dict[str, dict[str, Any]]:
    if sheet is None:
        return {}
    return dict(_pivot_properties(pivot, props) for pivot in sheet._pivots)


def _pivot_table(rule: dict[str, Any], books: _Books) -> bool:
    props = set(rule.get("pivot_props", []))
    return (_pivots(books.worksheet(rule["sheet_idx0"]), props)
            == _pivots(books.worksheet(rule["sheet_idx1"]), props))


_RULES: dict[str, Callable[[dict[str, Any], _Books], bool]] = {
    "sheet_name": _sheet_name,
    "sheet_data": _sheet_data,
    "sheet_print": _sheet_print,
    "sheet_fuzzy": _sheet_fuzzy,
    "check_cell": _check_cell,
    "style": _style,
    "freeze": _freeze,
    "zoom": _zoom,
    "row_props": _row_props,
    "data_validation": _data_validation,
    "chart": _chart,
    "pivot_table": _pivot_table,
}
_PAIR = frozenset({"type", "sheet_idx0", "sheet_idx1"})
_ONE = frozenset({"type", "sheet_idx"})
RULE_KEYS: dict[str, frozenset[str]] = {
    "sheet_name": frozenset({"type"}),
    "sheet_data": _PAIR | {"precision", "ignore_case"},
    "sheet_print": _PAIR | {"ignore_case"},
    "sheet_fuzzy": _PAIR | {"rules"},
    "check_cell": _ONE | {"coordinate", "props"},
    "style": _PAIR | {"props"},
    "freeze": _PAIR,
    "zoom": _ONE | {"method", "ref"},
    "row_props": _PAIR | {"props"},
    "data_validation": _ONE | {"dv_props"},
    "chart": _PAIR | {"chart_props"},
    "pivot_table": _PAIR | {"pivot_props"},
}
# Rule types implemented for only some workbooks, with what is left out: coverage counts them
# as missing, since a task's result may well need what is left out.
PARTIAL_RULES: dict[str, str] = {"style": "conditional formatting is not evaluated"}
# The keys of one of `sheet_fuzzy`'s checks.
FUZZY_CHECK_KEYS = frozenset({"range", "type", "threshold", "ignore_case", "ignore_chars",
                              "trim_leadings", "trim_trailings", "normalization"})
# Rule type -> (the key holding a list or dict of property names, the names handled).
RULE_PROPERTIES: dict[str, tuple[str, frozenset[str]]] = {
    "check_cell": ("props", CELL_STYLES | {"value"}),
    "style": ("props", CELL_STYLES),
    "row_props": ("props", frozenset({"hidden", "height"})),
    "chart": ("chart_props", frozenset({"title", "legend", "type", "direction", "xtitle", "ytitle"})),
    "pivot_table": ("pivot_props", frozenset({"filter", "col_fields", "row_fields", "data_fields"})),
}


def compare_table(result: str | None, expected: str | None = None, **options: Any) -> float:
    """1 if the result workbook passes every rule of `options["rules"]` (module doc).

    Raises:
        UnsupportedTableRule: a rule of a type not in `RULE_KEYS`.
        UnsupportedSpreadsheetFeature: a `style` rule on a sheet with conditional formatting.
    """
    if result is None:
        return 0.0
    try:
        result_book = Spreadsheet(result)
    except Exception as error:  # noqa: BLE001 - any unreadable result scores 0, as in OSWorld
        logger.info("compare_table: %s is no workbook: %r", result, error)
        return 0.0
    expected_book = Spreadsheet(expected) if expected is not None else None
    books = _Books(result_book, expected_book)
    try:
        for rule in options["rules"]:
            if rule["type"] not in _RULES:
                raise UnsupportedTableRule(f"compare_table rule type {rule['type']!r} is not "
                                           f"implemented; implemented: {', '.join(_RULES)}")
            if not _RULES[rule["type"]](rule, books):
                logger.debug("compare_table: rule %s failed", rule)
                return 0.0
        return 1.0
    finally:
        result_book.close()
        if expected_book is not None:
            expected_book.close()
