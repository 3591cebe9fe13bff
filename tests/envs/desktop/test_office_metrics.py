"""OSWorld's LibreOffice metrics (`compare_table`, `compare_pptx_files`, `compare_docx_files` and
friends) on small workbooks, decks and documents authored here with openpyxl, python-pptx and
python-docx. For each rule and option: a matching pair scores 1, a pair that differs in what it
checks scores 0, and a difference it ignores still scores 1, as in OSWorld's
`desktop_env/evaluators/metrics/{table,slides,docs}.py`. No desktop starts; only the printed-sheet
test runs LibreOffice, and skips without it."""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openpyxl
import pytest
from docx import Document
from docx.shared import Pt as DocxPt
from openpyxl.chart import BarChart, LineChart, Reference
from openpyxl.formatting.rule import FormulaRule
from openpyxl.pivot.cache import CacheDefinition, CacheField, CacheSource, SharedItems, WorksheetSource
from openpyxl.pivot.table import (
    DataField,
    FieldItem,
    Location,
    PageField,
    PivotField,
    RowColField,
    TableDefinition,
)
from openpyxl.styles import Font, GradientFill, PatternFill
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.datavalidation import DataValidation
from PIL import Image
from pptx import Presentation
from pptx.dml.color import RGBColor
from pptx.enum.dml import MSO_THEME_COLOR
from pptx.enum.text import PP_ALIGN
from pptx.oxml.ns import qn
from pptx.util import Emu, Pt

from envs.desktop.coverage import Part, task_coverage
from envs.desktop.docs_metrics import compare_docx_files, compare_docx_tables, compare_line_spacing
from envs.desktop.evaluate import METRICS, check_direct_json_object
from envs.desktop.spreadsheets import soffice_program
from envs.desktop.table_metrics import UnsupportedSpreadsheetFeature, UnsupportedTableRule, compare_table
from envs.desktop.value_rules import UnknownRuleMethod, matches_rule

PAIR = {"sheet_idx0": 0, "sheet_idx1": "EI0"}


def _rows() -> list[list[Any]]:
    return [["Name", "Score"], ["ada", 1.5], ["bob", 2.25]]


def workbook(path: Path, edit: Callable[[Workbook], None] | None = None,
             rows: list[list[Any]] | None = None) -> str:
    """Sheet1 with a small table (and Sheet2, empty), changed by `edit`, saved at `path`."""
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Sheet1"
    for row in rows or _rows():
        sheet.append(row)
    book.create_sheet("Sheet2")
    if edit is not None:
        edit(book)
    book.save(path)
    return str(path)


def pair(tmp_path: Path, edit: Callable[[Workbook], None] | None = None,
         base: Callable[[Workbook], None] | None = None, **kwargs: Any) -> tuple[str, str]:
    """(result, expected): the expected workbook, and the same with `edit` applied on top."""
    def edited(book: Workbook) -> None:
        if base is not None:
            base(book)
        if edit is not None:
            edit(book)
    return (workbook(tmp_path / "result.xlsx", edited, **kwargs),
            workbook(tmp_path / "expected.xlsx", base, **kwargs))


def score(tmp_path: Path, rules: list[dict[str, Any]], edit: Callable[[Workbook], None] | None = None,
          base: Callable[[Workbook], None] | None = None, **kwargs: Any) -> float:
    return compare_table(*pair(tmp_path, edit, base, **kwargs), rules=rules)


def set_cell(coordinate: str, value: Any, sheet: str = "Sheet1") -> Callable[[Workbook], None]:
    def edit(book: Workbook) -> None:
        book[sheet][coordinate] = value
    return edit


def test_compare_table_is_registered_and_a_missing_or_broken_result_scores_0(tmp_path) -> None:
    assert METRICS["compare_table"] is compare_table
    expected = workbook(tmp_path / "expected.xlsx")
    assert compare_table(None, expected, rules=[{"type": "sheet_name"}]) == 0.0
    (tmp_path / "broken.xlsx").write_text("not a workbook")
    assert compare_table(str(tmp_path / "broken.xlsx"), expected, rules=[{"type": "sheet_name"}]) == 0.0


@pytest.mark.parametrize("indices", [(0, "EI0"), ("RI0", "EI0"), ("RNSheet1", "ENSheet1"),
                                     ("RI1", "ENSheet2")])
def test_sheet_indices_name_sheets_by_position_or_name_in_either_workbook(tmp_path, indices) -> None:
    rule = {"type": "sheet_data", "sheet_idx0": indices[0], "sheet_idx1": indices[1]}
    assert score(tmp_path, [rule]) == 1.0


def test_a_sheet_index_past_the_last_sheet_or_an_unknown_name_fails_the_rule(tmp_path) -> None:
    for indices in [("RI5", "EI0"), ("RNGone", "EI0"), (0, "EI7"), (0, "ENGone")]:
        rule = {"type": "sheet_data", "sheet_idx0": indices[0], "sheet_idx1": indices[1]}
        assert score(tmp_path, [rule]) == 0.0, indices
    with pytest.raises(ValueError, match="sheet index 'XI0'"):
        score(tmp_path, [{"type": "sheet_data", "sheet_idx0": "XI0", "sheet_idx1": 0}])


def test_rules_are_a_conjunction_and_an_unknown_rule_type_is_an_error(tmp_path) -> None:
    rules = [{"type": "sheet_name"}, {"type": "sheet_data", **PAIR}]
    assert score(tmp_path, rules) == 1.0
    assert score(tmp_path, rules, set_cell("B2", 9)) == 0.0
    with pytest.raises(UnsupportedTableRule, match="'sparkline'"):
        score(tmp_path, [{"type": "sparkline", **PAIR}])


def test_sheet_name_compares_the_worksheet_names_in_order_and_nothing_else(tmp_path) -> None:
    rule = [{"type": "sheet_name"}]
    assert score(tmp_path, rule, set_cell("B2", 9)) == 1.0
    assert score(tmp_path, rule, lambda book: setattr(book["Sheet2"], "title", "Other")) == 0.0
    assert score(tmp_path, rule, lambda book: book.move_sheet("Sheet2", offset=-1)) == 0.0


def test_sheet_data_compares_values_rounded_to_the_precision(tmp_path) -> None:
    rule = {"type": "sheet_data", **PAIR}
    assert score(tmp_path, [rule], lambda book: setattr(book["Sheet1"]["B2"], "font", Font(bold=True))) == 1.0
    assert score(tmp_path, [rule], set_cell("A3", "carl")) == 0.0
    assert score(tmp_path, [rule], set_cell("B3", 2.25001)) == 1.0  # 4 decimals by default
    assert score(tmp_path, [rule | {"precision": 6}], set_cell("B3", 2.25001)) == 0.0
    assert score(tmp_path, [rule], set_cell("B3", "=1+1.25")) == 0.0  # a formula without a cached value


def test_sheet_data_reads_the_first_row_as_the_header_and_ignores_ignore_case(tmp_path) -> None:
    rule = {"type": "sheet_data", **PAIR, "ignore_case": True}  # as three OSWorld tasks pass it
    assert score(tmp_path, [rule], set_cell("A1", "NAME")) == 0.0
    assert score(tmp_path, [rule], set_cell("A2", "ADA")) == 0.0


def with_csv(path: str, lines: list[str], sheet: str = "Sheet1") -> str:
    Path(path).with_name(f"{Path(path).stem}-{sheet}.csv").write_text("\n".join(lines))
    return path


def test_sheet_print_compares_the_csv_exports_beside_the_workbooks(tmp_path) -> None:
    result, expected = pair(tmp_path)
    with_csv(expected, ["Name,Score", "ada,1.50", "bob,2.25", ""])
    rule = {"type": "sheet_print", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1"}
    with_csv(result, ["Name,Score", "  ada,1.50  ", "bob,2.25", "", "  "])
    assert compare_table(result, expected, rules=[rule]) == 1.0  # stripped, trailing blanks dropped
    with_csv(result, ["Name,Score", "ada,1.5", "bob,2.25"])
    assert compare_table(result, expected, rules=[rule]) == 0.0
    with_csv(result, ["NAME,Score", "Ada,1.50", "bob,2.25"])
    assert compare_table(result, expected, rules=[rule]) == 0.0
    assert compare_table(result, expected, rules=[rule | {"ignore_case": True}]) == 1.0


@pytest.mark.skipif(soffice_program() is None,
                    reason="LibreOffice (soffice) is not installed: apt-get install -y libreoffice-calc")
def test_sheet_print_exports_with_libreoffice_and_sees_number_formats_that_sheet_data_does_not(
        tmp_path) -> None:
    def two_decimals(book: Workbook) -> None:
        book["Sheet1"]["B2"].number_format = "0.00"
    result, expected = pair(tmp_path, two_decimals)
    assert compare_table(result, expected, rules=[{"type": "sheet_data", **PAIR}]) == 1.0
    assert compare_table(result, expected, rules=[{"type": "sheet_print", **PAIR}]) == 0.0
    assert compare_table(expected, expected, rules=[{"type": "sheet_print", **PAIR}]) == 1.0


# OSWorld task d1acdb87 (multi_apps), options verbatim: tidy an address book.
ADDRESS_BOOK_RULES = [{"type": "sheet_fuzzy", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1", "rules": [
    {"range": ["A1:A6", "D1:D6"], "type": "exact_match"},
    {"range": ["B1:B6"], "type": "fuzzy_match", "threshold": 85,
     "normalization": [["Rd", "Road"], ["St", "Street"]], "ignore_case": True},
    {"range": ["C1:C6"], "type": "includes", "trim_leadings": "+ ", "ignore_chars": " ()-"}]}]
ADDRESS_BOOK = [["Name", "Address", "Phone", "Email"], ["Ada", "12 Main Street", "5551234567", "a@x.org"],
                ["Bob", "3 Mill Road", "5559876543", "b@x.org"]]


def test_sheet_fuzzy_applies_an_osworld_tasks_normalizations_before_matching(tmp_path) -> None:
    def tidied_differently(book: Workbook) -> None:
        book["Sheet1"]["B2"], book["Sheet1"]["B3"] = "12 Main St", "3 Mill Rd"
        book["Sheet1"]["C2"], book["Sheet1"]["C3"] = "+1 (555) 123-4567", "555-987-6543"
    assert score(tmp_path, ADDRESS_BOOK_RULES, tidied_differently, rows=ADDRESS_BOOK) == 1.0
    assert score(tmp_path, ADDRESS_BOOK_RULES, set_cell("B3", "99 Elm Avenue"), rows=ADDRESS_BOOK) == 0.0
    # normalization comes before ignore_case: "ST" is not "St", and "12 main st" is too far from
    # "12 main streetreet" (the expected side's "Street" normalized too)
    assert score(tmp_path, ADDRESS_BOOK_RULES, set_cell("B2", "12 MAIN ST"), rows=ADDRESS_BOOK) == 0.0
    assert score(tmp_path, ADDRESS_BOOK_RULES, set_cell("C2", "555 123"), rows=ADDRESS_BOOK) == 0.0
    assert score(tmp_path, ADDRESS_BOOK_RULES, set_cell("D3", "B@x.org"), rows=ADDRESS_BOOK) == 0.0
    assert score(tmp_path, ADDRESS_BOOK_RULES, set_cell("E9", "outside"), rows=ADDRESS_BOOK) == 1.0


@pytest.mark.parametrize(("check", "result_value", "expected_value", "passes"), [
    ({"type": "exact_match"}, "abc", "abc", True),
    ({"type": "exact_match"}, "abc", "abd", False),
    ({"type": "exact_match", "ignore_case": True}, "ABC", "abc", True),
    ({"type": "includes"}, "abc def", "def", True),
    ({"type": "includes"}, "def", "abc def", False),
    ({"type": "included_by"}, "def", "abc def", True),
    ({"type": "fuzzy_match"}, "Mississippi", "Misissippi", True),
    ({"type": "fuzzy_match", "threshold": 99}, "Mississippi", "Misissippi", False),
    ({"type": "exact_match", "trim_leadings": "+ "}, "+ 42x", "42x", True),
    ({"type": "exact_match", "trim_trailings": "."}, "end...", "end", True),
    ({"type": "exact_match", "ignore_chars": "-"}, "a-b-c", "abc", True),
    ({"type": "exact_match", "normalization": [["Rd", "Road"]]}, "Mill Rd", "Mill Road", True),
    ({"type": "exact_match"}, 3, "3.0", True),  # numbers compare as str(float)
    ({"type": "exact_match"}, None, "None", True),  # and so does an empty cell
])
def test_sheet_fuzzy_checks(tmp_path, check, result_value, expected_value, passes) -> None:
    rule = {"type": "sheet_fuzzy", **PAIR, "rules": [check | {"range": ["A2"]}]}
    def put(value: Any) -> Callable[[Workbook], None]:
        return set_cell("A2", value)

    result = workbook(tmp_path / "result.xlsx", put(result_value))
    expected = workbook(tmp_path / "expected.xlsx", put(expected_value))
    assert compare_table(result, expected, rules=[rule]) == float(passes)


# OSWorld task 30e3e107 (libreoffice_calc), its check_cell rule verbatim: a styled title cell.
TITLE_CELL_RULE = {"type": "check_cell", "sheet_idx": "RNSheet2", "coordinate": "A1", "props": {
    "bgcolor": {"method": "eq", "ref": "FF0000FF"}, "font_color": {"method": "eq", "ref": "FFFFFFFF"},
    "font_bold": {"method": "eq", "ref": True}, "value": {"method": "eq", "ref": "Demographic Profile"}}}


def title_cell(bold: bool = True, text: str = "Demographic Profile") -> Callable[[Workbook], None]:
    def edit(book: Workbook) -> None:
        cell = book["Sheet2"]["A1"]
        cell.value = text
        cell.font = Font(bold=bold, color="FFFFFFFF")
        cell.fill = PatternFill("solid", fgColor="FF0000FF", bgColor="FF0000FF")
    return edit


def test_check_cell_reads_the_result_cells_value_and_styles(tmp_path) -> None:
    assert score(tmp_path, [TITLE_CELL_RULE], title_cell()) == 1.0
    assert score(tmp_path, [TITLE_CELL_RULE], title_cell(bold=False)) == 0.0
    assert score(tmp_path, [TITLE_CELL_RULE], title_cell(text="Demographics")) == 0.0
    assert score(tmp_path, [TITLE_CELL_RULE]) == 0.0


def test_check_cell_values_are_cached_results_with_numbers_and_dates_as_floats(tmp_path) -> None:
    def cells(book: Workbook) -> None:
        sheet = book["Sheet1"]
        sheet["C1"], sheet["C2"], sheet["C3"] = 7, datetime.date(2024, 1, 1), True
    def value_is(coordinate: str, method: str, ref: Any) -> dict[str, Any]:
        return {"type": "check_cell", "sheet_idx": 0, "coordinate": coordinate,
                "props": {"value": {"method": method, "ref": ref}}}
    result = workbook(tmp_path / "result.xlsx", cells)
    for rule, passes in [(value_is("B2", "approx:0.001", 1.5004), True),
                         (value_is("B2", "approx:0.1", 1.7), False),
                         (value_is("C1", "eq", 7.0), True), (value_is("C2", "eq", 45292.0), True),
                         (value_is("C3", "eq", None), True),
                         (value_is("A2", "re.I", "^ADA$"), True), (value_is("A2", "approx:1", 0), False)]:
        assert compare_table(result, None, rules=[rule]) == float(passes), rule


@pytest.mark.parametrize(("style", "styled", "value"), [
    ("number_format", lambda cell: setattr(cell, "number_format", "0.00%"), "0.00%"),
    ("font_name", lambda cell: setattr(cell, "font", Font(name="Arial")), "Arial"),
    ("font_size", lambda cell: setattr(cell, "font", Font(size=20)), 20),
    ("font_italic", lambda cell: setattr(cell, "font", Font(italic=True)), True),
    ("font_underline", lambda cell: setattr(cell, "font", Font(underline="double")), "double"),
    ("font_family", lambda cell: setattr(cell, "font", Font(family=3)), 3),
    ("fill_type", lambda cell: setattr(cell, "fill", GradientFill(stop=("FFFF0000", "FF0000FF"))),
     "gradientFill"),
    ("fgcolor", lambda cell: setattr(cell, "fill", PatternFill("solid", fgColor="FFFF0000")), "FFFF0000"),
])
def test_check_cell_reads_each_cell_style(tmp_path, style, styled, value) -> None:
    result = workbook(tmp_path / "result.xlsx", lambda book: styled(book["Sheet1"]["B2"]))
    rule = {"type": "check_cell", "sheet_idx": 0, "coordinate": "B2",
            "props": {style: {"method": "eq", "ref": value}}}
    assert compare_table(result, None, rules=[rule]) == 1.0
    assert compare_table(result, None, rules=[rule | {"coordinate": "B3"}]) == 0.0


def test_check_cell_reads_a_hyperlink_as_empty_text_where_a_filled_cell_has_none(tmp_path) -> None:
    result = workbook(tmp_path / "result.xlsx",
                      lambda book: setattr(book["Sheet1"]["B2"], "hyperlink", "https://example.org/"))
    def link(coordinate: str, method: str) -> list[dict[str, Any]]:
        return [{"type": "check_cell", "sheet_idx": 0, "coordinate": coordinate,
                 "props": {"hyperlink": {"method": method, "ref": ""}}}]
    assert compare_table(result, None, rules=link("B2", "ne")) == 1.0
    assert compare_table(result, None, rules=link("B3", "eq")) == 1.0
    assert compare_table(result, None, rules=link("B2", "eq")) == 0.0


def red_font(coordinate: str) -> Callable[[Workbook], None]:
    def edit(book: Workbook) -> None:
        book["Sheet1"][coordinate].font = Font(color="FFFF0000")
    return edit


def test_style_compares_every_cells_styles_and_not_its_value(tmp_path) -> None:
    rule = {"type": "style", **PAIR, "props": ["font_color"]}
    assert score(tmp_path, [rule], set_cell("B2", 99), base=red_font("B3")) == 1.0
    assert score(tmp_path, [rule], red_font("B2")) == 0.0
    assert score(tmp_path, [rule | {"props": ["bgcolor"]}], red_font("B2")) == 1.0


def test_style_refuses_conditional_formatting_which_osworld_evaluates(tmp_path) -> None:
    def highlight(book: Workbook) -> None:
        green = FormulaRule(formula=["B2>2"], font=Font(color="FF00FF00"))
        book["Sheet1"].conditional_formatting.add("B2:B3", green)
    with pytest.raises(UnsupportedSpreadsheetFeature, match="conditional formatting"):
        score(tmp_path, [{"type": "style", **PAIR, "props": ["font_color"]}], highlight)


def test_freeze_compares_the_frozen_panes(tmp_path) -> None:
    rule = {"type": "freeze", **PAIR}
    def freeze(cell: str) -> Callable[[Workbook], None]:
        return lambda book: setattr(book["Sheet1"], "freeze_panes", cell)
    assert score(tmp_path, [rule], set_cell("B2", 5), base=freeze("B2")) == 1.0
    assert score(tmp_path, [rule], freeze("A3"), base=freeze("B2")) == 0.0
    assert score(tmp_path, [rule], freeze("B2")) == 0.0


def test_zoom_checks_the_result_sheets_zoom_100_when_unset(tmp_path) -> None:
    rule = {"type": "zoom", "sheet_idx": 0, "method": "lt", "ref": 260}  # OSWorld task 1334ca3e
    def zoom(scale: int) -> Callable[[Workbook], None]:
        return lambda book: setattr(book["Sheet1"].sheet_view, "zoomScale", scale)
    assert score(tmp_path, [rule], zoom(200)) == 1.0
    assert score(tmp_path, [rule], zoom(300)) == 0.0
    assert score(tmp_path, [rule]) == 1.0


def test_row_props_compares_the_properties_of_the_rows_that_have_any(tmp_path) -> None:
    rule = {"type": "row_props", **PAIR, "props": ["hidden"]}  # OSWorld task 6054afcb
    def hide(row: int) -> Callable[[Workbook], None]:
        return lambda book: setattr(book["Sheet1"].row_dimensions[row], "hidden", True)
    assert score(tmp_path, [rule], set_cell("A2", "x"), base=hide(2)) == 1.0
    assert score(tmp_path, [rule], hide(3), base=hide(2)) == 0.0
    def tall(book: Workbook) -> None:
        book["Sheet1"].row_dimensions[2].height = 40
    assert score(tmp_path, [rule | {"props": ["height"]}], tall) == 0.0


# OSWorld task ecb0df7a (libreoffice_calc), verbatim: a Pass/Fail/Held drop-down on column D.
DROPDOWN_RULE = {"type": "data_validation", "sheet_idx": 0, "dv_props": [
    {"ranges": {"method": "spreadsheet_range", "ref": ["D2:D29", "D2:D1048576"]},
     "type": {"method": "eq", "ref": "list"},
     "formula1": {"method": "str_set_eq", "ref": ["Pass", "Fail", "Held"]}}]}


def dropdown(cells: str, choices: str = '"Held,Pass,Fail"') -> Callable[[Workbook], None]:
    def edit(book: Workbook) -> None:
        validation = DataValidation(type="list", formula1=choices)
        validation.add(cells)
        book["Sheet1"].add_data_validation(validation)
    return edit


def test_data_validation_matches_each_validation_of_the_result_to_a_wanted_one(tmp_path) -> None:
    result = workbook(tmp_path / "result.xlsx", dropdown("D2:D100"))
    assert compare_table(result, None, rules=[DROPDOWN_RULE]) == 1.0
    for edit in [dropdown("D2:D10"), dropdown("E2:E100"), dropdown("D2:D100", '"Pass,Fail"')]:
        result = workbook(tmp_path / "result.xlsx", edit)
        assert compare_table(result, None, rules=[DROPDOWN_RULE]) == 0.0
    assert compare_table(workbook(tmp_path / "result.xlsx"), None, rules=[DROPDOWN_RULE]) == 0.0


def chart(kind: type = BarChart, title: str = "Scores", direction: str = "col", x_title: str = "Name",
          legend: str | None = "r") -> Callable[[Workbook], None]:
    def edit(book: Workbook) -> None:
        sheet = book["Sheet1"]
        plot = kind()
        plot.add_data(Reference(sheet, min_col=2, min_row=1, max_row=3), titles_from_data=True)
        plot.set_categories(Reference(sheet, min_col=1, min_row=2, max_row=3))
        plot.title, plot.x_axis.title, plot.y_axis.title = title, x_title, "Score"
        if kind is BarChart:
            plot.type = direction
        if legend is None:
            plot.legend = None
        else:
            plot.legend.position = legend
        sheet.add_chart(plot, "D2")
    return edit


@pytest.mark.parametrize(("props", "changed"), [
    (["type"], chart(LineChart)), (["title"], chart(title="Totals")), (["direction"], chart(direction="bar")),
    (["legend"], chart(legend="b")), (["legend"], chart(legend=None)), (["xtitle"], chart(x_title="Who")),
    (["ytitle", "type"], None)])
def test_chart_compares_the_named_properties_of_each_series_chart(tmp_path, props, changed) -> None:
    rule = {"type": "chart", **PAIR, "chart_props": props}
    assert score(tmp_path, [rule], base=chart()) == 1.0
    if changed is not None:
        result = workbook(tmp_path / "result.xlsx", changed)
        expected = workbook(tmp_path / "expected.xlsx", chart())
        assert compare_table(result, expected, rules=[rule]) == 0.0
        unconcerned = rule | {"chart_props": ["ytitle"]}
        assert compare_table(result, expected, rules=[unconcerned]) == 1.0
    assert score(tmp_path, [rule]) == 1.0  # no chart on either side
    assert compare_table(workbook(tmp_path / "result.xlsx"), workbook(tmp_path / "expected.xlsx", chart()),
                         rules=[rule]) == 0.0


PIVOT_PROPS = ["col_fields", "filter", "row_fields", "data_fields"]  # every OSWorld pivot task's


def pivot(rows: tuple[int, ...] = (0,), data: tuple[tuple[int, str], ...] = ((2, "sum"),),
          pages: tuple[int, ...] = (), hidden: tuple[int, ...] = (), ref: str = "A1:C3"
          ) -> Callable[[Workbook], None]:
    """A pivot table on Sheet2 over Sheet1!`ref` (Name, Score, and a third column)."""
    def edit(book: Workbook) -> None:
        source = book["Sheet1"]
        source["C1"], source["C2"], source["C3"] = "Team", "red", "blue"
        fields = [PivotField(axis="axisRow" if index in rows else ("axisPage" if index in pages else None),
                             dataField=index in {field for field, _ in data} or None,
                             items=[FieldItem(x=0, h=0 in hidden or None), FieldItem(x=1),
                                    FieldItem(t="default")] if index in rows or index in pages else ())
                  for index in range(3)]
        table = TableDefinition(
            name="Pivot", cacheId=1, dataCaption="Values", location=Location(ref="A1:B4", firstHeaderRow=1,
                                                                             firstDataRow=1, firstDataCol=1),
            pivotFields=fields, rowFields=[RowColField(x=index) for index in rows],
            pageFields=[PageField(fld=index) for index in pages],
            dataFields=[DataField(name=f"{kind} of {field}", fld=field, subtotal=kind)
                        for field, kind in data])
        table.cache = CacheDefinition(
            cacheSource=CacheSource(type="worksheet",
                                    worksheetSource=WorksheetSource(ref=ref, sheet="Sheet1")),
            cacheFields=[CacheField(name=name, sharedItems=SharedItems())
                         for name in ("Name", "Score", "Team")])
        book["Sheet2"].add_pivot(table)
    return edit


def test_pivot_table_compares_the_fields_of_each_source_ranges_pivot(tmp_path) -> None:
    rule = {"type": "pivot_table", "sheet_idx0": "RNSheet2", "sheet_idx1": "ENSheet2",
            "pivot_props": PIVOT_PROPS}
    expected = workbook(tmp_path / "expected.xlsx", pivot())
    def result_scores(edit: Callable[[Workbook], None], props: list[str] = PIVOT_PROPS) -> float:
        return compare_table(workbook(tmp_path / "result.xlsx", edit), expected,
                             rules=[rule | {"pivot_props": props}])
    assert result_scores(pivot()) == 1.0
    assert result_scores(pivot(rows=(2,))) == 0.0
    assert result_scores(pivot(data=((2, "count"),))) == 0.0
    assert result_scores(pivot(data=((2, "count"),)), ["row_fields"]) == 1.0
    assert result_scores(pivot(pages=(2,))) == 0.0
    assert result_scores(pivot(hidden=(0,))) == 0.0  # a filtered-out item
    assert result_scores(pivot(ref="A1:C9")) == 0.0  # another source range
    assert result_scores(lambda book: None) == 0.0


@pytest.mark.parametrize(("value", "method", "ref", "passes"), [
    (3, "eq", 3, True), (3, "ne", 3, False), (3, "lt", 4, True), (3, "ge", 4, False),
    ("Total: 12", "re", r"\d+", True), ("TOTAL", "re.I", "^total$", True), ("TOTAL", "re", "^total$", False),
    (10.05, "approx:0.1", 10, True), (10.2, "approx:0.1", 10, False), ("n/a", "approx:1", 0, False),
    (2, "range.te", [0, 2], True), (0, "range.te", [0, 2], False), (0, "range.ee", [0, 2], True),
    ('"a,b,c"', "str_list_eq", ["a", "b", "c"], True), ('"c,b,a"', "str_list_eq", ["a", "b", "c"], False),
    ('"c,b,a"', "str_set_eq", ["a", "b", "c"], True),
])
def test_value_rules_follow_osworlds_methods(value, method, ref, passes) -> None:
    assert matches_rule(value, {"method": method, "ref": ref}) is passes


def test_an_unknown_value_rule_method_is_an_error_naming_it() -> None:
    with pytest.raises(UnknownRuleMethod, match="'about'"):
        matches_rule(1, {"method": "about", "ref": 1})


CENTER = PP_ALIGN.CENTER
PICTURE_LEFT, PICTURE_TOP, TABLE_TOP, TITLE_TOP = 1000000, 3000000, 1000000, 1000000


def deck(path: Path, image: Path, edit: Callable[[Any], None] | None = None) -> str:
    """Three slides: 1, a "Product Comparison" title and a two-paragraph text box with notes; 2, a
    picture and a text box; 3, a table. `edit` changes the Presentation before it is saved."""
    presentation = Presentation()
    blank = presentation.slide_layouts[6]
    first = presentation.slides.add_slide(blank)
    title = first.shapes.add_textbox(Emu(1000000), Emu(TITLE_TOP), Emu(4000000), Emu(800000))
    title.text_frame.text = "Product Comparison"
    body = first.shapes.add_textbox(Emu(1000000), Emu(2000000), Emu(6000000), Emu(2000000))
    body.text_frame.text = "First point"
    body.text_frame.add_paragraph().text = "Second point"
    for paragraph in body.text_frame.paragraphs:
        paragraph.alignment = PP_ALIGN.LEFT
        for run in paragraph.runs:
            run.font.color.rgb = RGBColor(0, 0, 0)
    first.notes_slide.notes_text_frame.text = "Say hello"
    second = presentation.slides.add_slide(blank)
    second.shapes.add_picture(str(image), Emu(PICTURE_LEFT), Emu(PICTURE_TOP), Emu(1000000), Emu(1000000))
    second.shapes.add_textbox(Emu(5000000), Emu(1000000), Emu(3000000), Emu(800000)).text_frame.text = (
        "Elaborate on what you want to discuss.")
    third = presentation.slides.add_slide(blank)
    table = third.shapes.add_table(2, 2, Emu(1000000), Emu(TABLE_TOP), Emu(4000000), Emu(1000000))
    table.table.cell(0, 0).text = "Model"
    if edit is not None:
        edit(presentation)
    presentation.save(path)
    return str(path)


@pytest.fixture
def decks(tmp_path) -> Callable[..., tuple[str, str]]:
    image = tmp_path / "dot.png"
    Image.new("RGB", (8, 8), "red").save(image)
    def make(edit: Callable[[Any], None] | None = None) -> tuple[str, str]:
        return deck(tmp_path / "result.pptx", image, edit), deck(tmp_path / "expected.pptx", image)
    return make


def shape(slide: int, index: int) -> Callable[[Any], Any]:
    return lambda presentation: presentation.slides[slide - 1].shapes[index]


def moved(slide: int, index: int, **geometry: int) -> Callable[[Any], None]:
    def edit(presentation: Any) -> None:
        target = shape(slide, index)(presentation)
        for name, value in geometry.items():
            setattr(target, name, Emu(value))
    return edit


def both(*edits: Callable[[Any], None]) -> Callable[[Any], None]:
    def edit(presentation: Any) -> None:
        for one in edits:
            one(presentation)
    return edit


def first_run(edit: Callable[[Any], None]) -> Callable[[Any], None]:
    return lambda presentation: edit(shape(1, 1)(presentation).text_frame.paragraphs[0].runs[0])


def first_paragraph(edit: Callable[[Any], None]) -> Callable[[Any], None]:
    return lambda presentation: edit(shape(1, 1)(presentation).text_frame.paragraphs[0])


def add_bullet(paragraph: Any) -> None:
    properties = paragraph._p.get_or_add_pPr()
    properties.append(properties.makeelement(qn("a:buChar"), {"char": "•"}))


def test_compare_pptx_files_is_registered_and_identical_decks_score_1(decks) -> None:
    assert METRICS["compare_pptx_files"](*decks()) == 1.0
    assert METRICS["compare_pptx_files"](None, decks()[1]) == 0.0


@pytest.mark.parametrize(("option", "edit", "also_off"), [
    ("examine_number_of_slides", lambda p: p.slides.add_slide(p.slide_layouts[6]), ()),
    ("examine_shape", moved(1, 1, left=1200000), ()),
    ("examine_note", lambda p: setattr(p.slides[0].notes_slide.notes_text_frame, "text", "Bye"), ()),
    ("examine_text", first_run(lambda run: setattr(run, "text", "Third point")), ("examine_bullets",)),
    ("examine_alignment", first_paragraph(lambda paragraph: setattr(paragraph, "alignment", CENTER)), ()),
    ("examine_indent", first_paragraph(lambda paragraph: setattr(paragraph, "level", 1)),
     ("examine_bullets",)),
    ("examine_font_name", first_run(lambda run: setattr(run.font, "name", "Arial")), ()),
    ("examine_font_size", first_run(lambda run: setattr(run.font, "size", Pt(40))), ()),
    ("examine_font_bold", first_run(lambda run: setattr(run.font, "bold", True)), ()),
    ("examine_font_italic", first_run(lambda run: setattr(run.font, "italic", True)), ()),
    ("examine_font_underline", first_run(lambda run: setattr(run.font, "underline", True)), ()),
    ("examine_color_rgb", first_run(lambda run: setattr(run.font.color, "rgb", RGBColor(255, 0, 0))), ()),
    ("examine_strike_through", first_run(lambda run: run.font._element.set("strike", "sngStrike")), ()),
    ("examine_bullets", first_paragraph(add_bullet), ()),
])
def test_each_default_on_examine_option_fails_what_it_checks_and_off_lets_it_pass(
        decks, option, edit, also_off) -> None:
    result, expected = decks(edit)
    assert METRICS["compare_pptx_files"](result, expected) == 0.0
    assert METRICS["compare_pptx_files"](result, expected, **{option: False},
                                         **dict.fromkeys(also_off, False)) == 1.0


def test_a_differing_background_passes_as_in_osworld_whose_check_reads_no_color(decks) -> None:
    def yellow(presentation: Any) -> None:
        fill = presentation.slides[0].background.fill
        fill.solid()
        fill.fore_color.rgb = RGBColor(255, 255, 0)
    assert METRICS["compare_pptx_files"](*decks(yellow)) == 1.0


def test_the_misspelt_examine_aligment_of_an_osworld_task_leaves_alignment_examined(decks) -> None:
    result, expected = decks(first_paragraph(lambda paragraph: setattr(paragraph, "alignment", CENTER)))
    assert METRICS["compare_pptx_files"](result, expected, examine_aligment=False) == 0.0  # task af2d657a


def test_a_color_is_compared_only_where_both_runs_have_an_rgb_color(decks) -> None:
    def theme_colored(presentation: Any) -> None:
        run = shape(1, 1)(presentation).text_frame.paragraphs[0].runs[0]
        run.font.color.theme_color = MSO_THEME_COLOR.ACCENT_1
    assert METRICS["compare_pptx_files"](*decks(theme_colored)) == 1.0


@pytest.mark.parametrize(("option", "passing", "failing"), [
    ("examine_title_bottom_position", [moved(1, 0, top=4000000)],
     [moved(1, 0, top=500000), moved(1, 0, top=3000000), moved(1, 1, left=1200000)]),
    ("examine_table_bottom_position", [moved(3, 0, top=4000000)],
     [moved(3, 0, top=3000000), moved(2, 0, left=1200000)]),
    ("examine_right_position",
     [moved(2, 0, left=5000000), both(moved(2, 0, left=5000000), moved(1, 1, left=1200000))],
     [moved(2, 0, left=4000000), moved(2, 0, left=500000), moved(1, 1, left=1200000)]),
    ("examine_top_position", [moved(2, 0, top=1000000)], [moved(2, 0, top=2500000), moved(1, 0, top=200000)]),
    ("examine_shape_for_shift_size", [moved(2, 1, height=2000000)], [moved(1, 0, height=2000000)]),
    ("examine_image_size", [moved(2, 0, left=3000000, top=200000)], [moved(2, 0, width=2000000),
                                                                      moved(1, 0, left=3000000)]),
    ("examine_modify_height", [moved(2, 0, width=3000000), moved(3, 0, width=5000000)],
     [moved(2, 0, height=3000000), moved(1, 0, width=3000000)]),
])
def test_each_single_task_position_option_with_examine_shape_off_as_its_task(
        decks, option, passing, failing) -> None:
    for edit in passing:
        assert METRICS["compare_pptx_files"](*decks(edit), examine_shape=False, **{option: True}) == 1.0
    for edit in failing:
        assert METRICS["compare_pptx_files"](*decks(edit), examine_shape=False, **{option: True}) == 0.0


def document(path: Path, paragraphs: list[str], spacing: float | None = None,
             table: list[list[str]] | None = None) -> str:
    doc = Document()
    for text in paragraphs:
        paragraph = doc.add_paragraph(text)
        if spacing is not None:
            paragraph.paragraph_format.line_spacing = spacing
    if table is not None:
        grid = doc.add_table(rows=len(table), cols=len(table[0]))
        for row, cells in enumerate(table):
            for column, text in enumerate(cells):
                grid.cell(row, column).text = text
    doc.save(path)
    return str(path)


def docs(tmp_path: Path, result: list[str], expected: list[str], **kwargs: Any) -> tuple[str, str]:
    return (document(tmp_path / "result.docx", result, **kwargs),
            document(tmp_path / "expected.docx", expected, **kwargs))


def test_compare_docx_files_collapses_blanks_by_default(tmp_path) -> None:
    assert compare_docx_files(*docs(tmp_path, ["One  two", "three"], ["One two three"])) == 1.0
    assert compare_docx_files(*docs(tmp_path, ["One two", "four"], ["One two three"])) == 0.0
    options = {"ignore_blanks": False}  # OSWorld task 88fe4b2d's
    assert compare_docx_files(*docs(tmp_path, ["One  two", "three"], ["One two three"]), **options) == 0.0
    assert compare_docx_files(*docs(tmp_path, ["One two", "three"], ["One two", "three"]), **options) == 1.0


def test_compare_docx_files_ignore_case_and_ignore_order(tmp_path) -> None:
    assert compare_docx_files(*docs(tmp_path, ["Hello World"], ["hello world"])) == 0.0
    assert compare_docx_files(*docs(tmp_path, ["Hello World"], ["hello world"]), ignore_case=True) == 1.0
    assert compare_docx_files(*docs(tmp_path, ["Hello"], ["hello"]), ignore_blanks=False,
                              ignore_case=True) == 1.0
    assert compare_docx_files(*docs(tmp_path, ["b", "a"], ["a", "b"])) == 0.0
    verbatim = {"ignore_blanks": True, "ignore_case": True, "ignore_order": True}  # OSWorld task 236833a3
    assert compare_docx_files(*docs(tmp_path, ["beta", "Alpha"], ["alpha", "beta"]), **verbatim) == 1.0
    # paragraphs are sorted before they are lower-cased: "Beta" sorts before "alpha"
    assert compare_docx_files(*docs(tmp_path, ["Beta", "alpha"], ["alpha", "beta"]), **verbatim) == 0.0
    assert compare_docx_files(*docs(tmp_path, ["Beta", "gamma"], ["alpha", "beta"]), **verbatim) == 0.0


def test_compare_docx_files_content_only_scores_the_similarity_between_0_and_1(tmp_path) -> None:
    assert compare_docx_files(*docs(tmp_path, ["abcd"], ["abcd"]), content_only=True) == 1.0
    assert compare_docx_files(*docs(tmp_path, ["abcd"], ["abce"]), content_only=True) == pytest.approx(0.75)
    assert compare_docx_files(*docs(tmp_path, ["ABCD"], ["abce"]), content_only=True,
                              ignore_case=True) == 0.75


def test_compare_docx_files_reads_docx_only_and_a_missing_file_scores_0(tmp_path) -> None:
    result, expected = docs(tmp_path, ["same"], ["same"])
    assert compare_docx_files(None, expected) == 0.0
    odt = tmp_path / "result.odt"
    odt.write_bytes(Path(result).read_bytes())
    assert compare_docx_files(str(odt), expected) == 0.0
    (tmp_path / "broken.docx").write_text("not a document")
    assert compare_docx_files(str(tmp_path / "broken.docx"), expected) == 0.0


def test_compare_line_spacing_needs_the_same_text_and_the_same_spacing(tmp_path) -> None:
    result = document(tmp_path / "result.docx", ["a", "b"], spacing=2.0)
    assert compare_line_spacing(result, document(tmp_path / "expected.docx", ["a", "b"], spacing=2.0)) == 1.0
    assert compare_line_spacing(result, document(tmp_path / "expected.docx", ["a", "b"], spacing=1.5)) == 0.0
    assert compare_line_spacing(result, document(tmp_path / "expected.docx", ["a", "c"], spacing=2.0)) == 0.0
    exact = document(tmp_path / "exact.docx", ["a", "b"], spacing=DocxPt(24))
    assert compare_line_spacing(result, exact) == 0.0


def test_compare_docx_tables_compares_shape_and_stripped_cell_text(tmp_path) -> None:
    grid = [["Task", "Hours"], ["Draft", "3"]]
    expected = document(tmp_path / "expected.docx", ["x"], table=grid)
    def result_with(table: list[list[str]], text: str = "other text") -> str:
        return document(tmp_path / "result.docx", [text], table=table)
    assert compare_docx_tables(result_with([["Task ", " Hours"], ["Draft", "3"]]), expected) == 1.0
    assert compare_docx_tables(result_with([["Task", "Hours"], ["Draft", "4"]]), expected) == 0.0
    assert compare_docx_tables(result_with([*grid, ["Review", "1"]]), expected) == 0.0
    assert compare_docx_tables(document(tmp_path / "result.docx", ["x"]), expected) == 0.0


def test_check_direct_json_object_compares_the_expected_keys() -> None:
    rules = {"expected": {"from": "NYC", "to": "LA"}}
    assert check_direct_json_object({"from": "NYC", "to": "LA", "date": "x"}, rules) == 1.0
    assert check_direct_json_object("{'from': 'NYC', 'to': 'LA'}", rules) == 1.0  # ' read as "
    assert check_direct_json_object({"from": "NYC", "to": "SF"}, rules) == 0.0
    assert check_direct_json_object(None, rules) == 0.0


def test_check_direct_json_object_expect_in_result_looks_for_substrings_and_list_items() -> None:
    rules = {"expect_in_result": True, "expected": {"q": "shoes", "size": ["9", "9.5"]}}
    assert check_direct_json_object({"q": "red shoes", "size": ["9.5", "10"]}, rules) == 1.0
    assert check_direct_json_object({"q": "red shoes", "size": ["10"]}, rules) == 0.0
    assert check_direct_json_object({"q": "hats", "size": ["9"]}, rules) == 0.0
    assert check_direct_json_object({"size": ["9"]}, rules) == 0.0
    numbers = {"expect_in_result": True, "expected": {"n": 3}}  # neither a string nor a list
    assert check_direct_json_object({"q": "shoes", "n": 3}, numbers) == 0.0


def calc_task(rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": "calc-rules", "instruction": "Fix the sheet.", "config": [], "related_apps": [],
            "evaluator": {"func": "compare_table",
                          "result": {"type": "vm_file", "path": "/home/user/a.xlsx", "dest": "a.xlsx"},
                          "expected": {"type": "cloud_file", "path": "https://example.org/a.xlsx",
                                       "dest": "a_gold.xlsx"},
                          "options": {"rules": rules}}}


def missing(rules: list[dict[str, Any]]) -> tuple[Part, ...]:
    return task_coverage(calc_task(rules), "libreoffice_calc", lambda app: True).missing_parts


def test_coverage_counts_compare_table_tasks_whose_rules_are_all_implemented() -> None:
    assert missing(ADDRESS_BOOK_RULES + [TITLE_CELL_RULE, DROPDOWN_RULE]) == ()
    assert missing([{"type": "chart", **PAIR, "chart_props": ["xtitle", "ytitle", "type", "legend", "title"]},
                    {"type": "pivot_table", **PAIR, "pivot_props": PIVOT_PROPS}]) == ()


def test_coverage_names_each_unimplemented_rule_type_key_and_property() -> None:
    assert missing([{"type": "sheet_data", **PAIR}, {"type": "sparkline", **PAIR}]) == (
        Part("option", "compare_table.rules[sparkline]"),)
    assert missing([{"type": "chart", **PAIR, "chart_props": ["type", "anchor"]},
                    {"type": "pivot_table", **PAIR, "pivot_props": ["name"]},
                    {"type": "sheet_data", **PAIR, "strict": True},
                    {"type": "sheet_fuzzy", **PAIR, "rules": [{"range": ["A1"], "type": "exact_match",
                                                               "trim": " "}]}]) == (
        Part("option", "compare_table.rules[chart].chart_props[anchor]"),
        Part("option", "compare_table.rules[pivot_table].pivot_props[name]"),
        Part("option", "compare_table.rules[sheet_data].strict"),
        Part("option", "compare_table.rules[sheet_fuzzy].rules.trim"))


def test_coverage_counts_the_style_rule_missing_for_the_conditional_formatting_it_refuses() -> None:
    assert missing([{"type": "style", **PAIR, "props": ["font_color"]}]) == (
        Part("option", "compare_table.rules[style] (conditional formatting is not evaluated)"),)


def test_coverage_checks_the_slide_and_document_options_too() -> None:
    task = copy.deepcopy(calc_task([]))
    task["evaluator"] |= {"func": "compare_pptx_files", "options": {
        "examine_shape": False, "examine_aligment": False, "examine_everything": True}}
    assert task_coverage(task, "libreoffice_impress", lambda app: True).missing_parts == (
        Part("option", "compare_pptx_files.examine_everything"),)
    task["evaluator"] |= {"func": "compare_docx_files", "options": {"ignore_blanks": True, "fuzzy": True}}
    assert task_coverage(task, "libreoffice_writer", lambda app: True).missing_parts == (
        Part("option", "compare_docx_files.fuzzy"),)
