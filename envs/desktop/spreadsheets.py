"""A workbook as OSWorld's spreadsheet checks read it: through openpyxl (formulas and styles, or
the values LibreOffice last computed), through pandas (a sheet as a table) and as LibreOffice
prints it (a sheet's CSV export).

`compare_table` reads each sheet the way its rule does in OSWorld, so the quirks of each view
matter: pandas takes the first row as the header, a cell's value is its cached result, and a
printed sheet is the text LibreOffice shows, number formats applied.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import openpyxl
import pandas as pd
from openpyxl.cell.cell import Cell
from openpyxl.utils.datetime import to_excel
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.worksheet import Worksheet

from envs.errors import EnvsError

__all__ = [
    "CELL_STYLES",
    "CSV_EXPORT_FILTER",
    "OfficeConversionError",
    "Spreadsheet",
    "UnknownCellStyle",
    "cell_style",
    "soffice_program",
]

logger = logging.getLogger(__name__)

# OSWorld's tasks export sheets with this filter (comma, double quote, UTF-8, cells as shown);
# the last field, -1, writes every sheet to `<stem>-<sheet name>.csv`.
CSV_EXPORT_FILTER = "csv:Text - txt - csv (StarCalc):44,34,UTF-8,,,,false,true,true,false,false,-1"
_CONVERSION_TIMEOUT_S = 120


class OfficeConversionError(EnvsError):
    """LibreOffice could not convert a document that a metric needs in another form."""


class UnknownCellStyle(ValueError):
    """A check names a cell style OSWorld does not read."""


def soffice_program() -> str | None:
    """LibreOffice's command on this machine, or None."""
    return shutil.which("soffice") or shutil.which("libreoffice")


def _export_csv(book: Path, folder: Path) -> None:
    """Every sheet of `book` as `folder/<stem>-<sheet>.csv`, by a headless LibreOffice with a
    private profile (a profile in use by another LibreOffice would make it hand the job over)."""
    program = soffice_program()
    if program is None:
        raise OfficeConversionError(
            f"cannot print {book.name}'s sheets: LibreOffice is not installed (apt-get install -y "
            "libreoffice-calc), and no CSV export lies beside the workbook")
    command = [program, f"-env:UserInstallation={(folder / 'profile').as_uri()}", "--headless",
               "--convert-to", CSV_EXPORT_FILTER, "--outdir", str(folder), str(book)]
    try:
        subprocess.run(command, capture_output=True, timeout=_CONVERSION_TIMEOUT_S, check=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        raise OfficeConversionError(f"LibreOffice failed to export {book} as CSV: {error}") from error


def _printed_lines(csv_file: Path) -> list[str]:
    # OSWorld strips every line and drops the blank lines at the end.
    lines = [line.strip() for line in csv_file.read_text(encoding="utf-8").splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


class Spreadsheet:
    """One .xlsx file. Each view is read once, when a rule first needs it.

    Raises (on creation):
        Exception: whatever openpyxl or pandas raise for a file that is no workbook.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.formulas: Workbook = openpyxl.load_workbook(self.path)
        self.tables = pd.ExcelFile(self.path, engine="openpyxl")

    @property
    def sheet_names(self) -> list[str]:
        """The worksheets' names in order (chart sheets left out, as pandas does)."""
        return list(self.tables.sheet_names)

    @functools.cached_property
    def values(self) -> Workbook:
        """The workbook with each formula replaced by its cached result."""
        return openpyxl.load_workbook(self.path, data_only=True)

    def worksheet(self, name: str) -> Worksheet | None:
        """The sheet `name` with formulas and styles, or None when there is none."""
        return self.formulas[name] if name in self.formulas.sheetnames else None

    def data_frame(self, name: str) -> pd.DataFrame | None:
        """The sheet as pandas reads it (first row as header), or None when there is none."""
        if name not in self.sheet_names:
            return None
        return pd.read_excel(self.tables, sheet_name=name)

    def cell_value(self, name: str, coordinate: str) -> float | str | None:
        """A cell's stored value as OSWorld reads it from the file: numbers (dates too) as
        floats, text as text, and None for an empty cell, a boolean, an error or a missing sheet.

        OSWorld reads shared strings only, which LibreOffice and Excel write; an inline string
        (openpyxl writes them) reads as None there and as its text here."""
        if name not in self.values.sheetnames:
            return None
        cell = self.values[name][coordinate]
        if cell.value is None or cell.data_type in ("b", "e"):
            return None
        if cell.data_type == "d":  # openpyxl turns date-formatted numbers into datetimes
            return float(to_excel(cell.value, self.values.epoch))
        if cell.data_type == "n":
            return float(cell.value)
        return str(cell.value)

    @functools.cached_property
    def _exported(self) -> Path:
        folder = Path(tempfile.mkdtemp(prefix="sheets-csv-"))
        try:
            _export_csv(self.path, folder)
        except OfficeConversionError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return folder

    def printed_lines(self, name: str) -> list[str] | None:
        """The sheet as LibreOffice prints it to CSV, one stripped line per row, blank lines at
        the end dropped; None when the workbook has no such sheet.

        OSWorld's tasks export the CSV on the desktop, beside the workbook (`<stem>-<sheet>.csv`),
        and copy it out with it; where no such file lies beside the workbook, LibreOffice here
        exports it.

        Raises:
            OfficeConversionError: no CSV beside the workbook, and LibreOffice could not make it.
        """
        if name not in self.sheet_names:
            return None
        beside = self.path.with_name(f"{self.path.stem}-{name}.csv")
        if beside.is_file():
            return _printed_lines(beside)
        exported = self._exported / f"{self.path.stem}-{name}.csv"
        return _printed_lines(exported) if exported.is_file() else None

    def close(self) -> None:
        """Let go of the files pandas holds open and of the exported CSVs."""
        self.tables.close()
        if "_exported" in self.__dict__:
            shutil.rmtree(self.__dict__["_exported"], ignore_errors=True)


def _rgb(color: Any) -> Any:
    return color.rgb if color is not None else None


# OSWorld's cell styles. Font styles read None for an empty cell, and a number format reads
# None but for a number (a formula's cell is no number: openpyxl types it "f").
CELL_STYLES = frozenset({"number_format", "font_name", "font_family", "font_color", "font_bold",
                         "font_italic", "font_underline", "font_size", "fill_type", "bgcolor",
                         "fgcolor", "hyperlink"})
_FONT_STYLES = {"font_name": "name", "font_family": "family", "font_bold": "bold",
                "font_italic": "italic", "font_underline": "underline", "font_size": "size"}


def cell_style(style: str, cell: Cell) -> Any:
    """The value of one of `CELL_STYLES` for `cell`; colors are aRGB strings (`FFFF0000`).

    Raises:
        UnknownCellStyle: `style` is not one of them.
    """
    if style == "number_format":
        return cell.number_format if cell.value is not None and cell.data_type == "n" else None
    if style in _FONT_STYLES:
        return getattr(cell.font, _FONT_STYLES[style]) if cell.value is not None else None
    if style == "font_color":
        return _rgb(cell.font.color) if cell.value is not None else None
    if style == "fill_type":
        return getattr(cell.fill, "tagname", None)
    if style in ("bgcolor", "fgcolor"):
        return _rgb(getattr(cell.fill, "bgColor" if style == "bgcolor" else "fgColor", None))
    if style == "hyperlink":
        return (cell.hyperlink or "") if cell.value is not None else None
    raise UnknownCellStyle(f"cell style {style!r} is not one OSWorld reads: "
                           f"{', '.join(sorted(CELL_STYLES))}")
