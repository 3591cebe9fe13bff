"""OSWorld's own LibreOffice tasks, unchanged, run end to end on the desktop.

Three task files per office domain (`tests/data/osworld_office/`, copied from OSWorld) name
Google Drive files for their input documents and their expected results. The documents are
written here instead, small ones that fit each instruction, and go into the offline file cache
under those URLs. A scripted solution then plays each task through the env's own actions,
placing every click and choosing every value from the observation's text (the window listing
and the AT-SPI tree); it scores 1, and DONE at once scores 0.

OSWorld's expected decks were saved by LibreOffice, and `compare_pptx_files` reads what
LibreOffice writes (a shape's size to the 1/100 mm, each run's font, the bullets of its
placeholders), so the expected decks here are written by python-pptx and then converted once by
LibreOffice. The input decks are python-pptx's own, as LibreOffice then saves them once in the
episode, except a097acff's: its expected file is its input, so that input is LibreOffice's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import openpyxl
import pytest
from docx import Document
from osworld_play import Step, play
from pptx import Presentation

from envs.desktop import DesktopEnv, file_cache
from envs.desktop.accessibility import accessibility_missing
from envs.desktop.coverage import App, installed_here
from envs.desktop.display import REQUIRED_PROGRAMS, DesktopSession
from envs.desktop.oracle import Await, Click, call, find_in_tree

TASKS_DIR = Path(__file__).parents[2] / "data" / "osworld_office"
MAX_WAITS = 15  # WAIT turns a step may take for what it needs to show (a loaded machine is slow)

_missing = [program for program in (*REQUIRED_PROGRAMS, "soffice") if not shutil.which(program)]
if no_tree := accessibility_missing():
    _missing.append(no_tree)
if not installed_here(App("pyautogui", python_module="pyautogui")):
    _missing.append("pyautogui for the desktop's python3 (the tasks save with it)")
needs_office_desktop = pytest.mark.skipif(
    bool(_missing), reason=f"missing: {', '.join(_missing)} (`make desktop-apps` installs "
    "LibreOffice, pyautogui and the desktop's programs)")

# A step of a scripted solution: a tool call, a node to click, a screen to wait for, or a
# function that reads the screen and returns the tool calls to make.



def load_task(domain: str, task_id: str) -> dict:
    return json.loads(next((TASKS_DIR / domain).glob(f"{task_id}*.json")).read_text())


# Documents: (what the `download` step fetches, what the `cloud_file` getter fetches).

def write_workbook(path: Path, sheets: dict[str, list[tuple]]) -> Path:
    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
    book.save(path)
    return path


def write_document(path: Path, paragraphs: list[str]) -> Path:
    document = Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    document.save(path)
    return path


def write_deck(path: Path, slides: list[tuple[str, str | None]]) -> Path:
    """Title-and-content slides; a content of None leaves the placeholder empty."""
    deck = Presentation()
    for title, content in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        if content is not None:
            slide.placeholders[1].text = content
    deck.save(path)
    return path


def saved_by_libreoffice(paths: list[Path], folder: Path) -> list[Path]:
    """Each file as LibreOffice saves it in its own format (one headless run, own profile)."""
    folder.mkdir()
    subprocess.run(["soffice", f"-env:UserInstallation={(folder / 'profile').as_uri()}", "--headless",
                    "--convert-to", paths[0].suffix[1:], "--outdir", str(folder), *map(str, paths)],
                   check=True, capture_output=True, timeout=180)
    return [folder / path.name for path in paths]


ORDERS = [("Order ID", "Product", "Amount"), ("A-101", "pens", 12), ("A-102", "ink", 7),
          ("A-103", "paper", 30), ("A-104", "stapler", 18), ("A-105", "folders", 9)]
NET_INCOME = [("Month", "Revenue", "Expenses", "Net Income"), ("Jan", 1200, 800, 400),
              ("Feb", 1500, 900, 600), ("Mar", 1100, 950, 150), ("Apr", 1700, 1000, 700)]
LOWER_CASE = ["geography and magical realism", "the town in the novel exists on no map.",
              "its rivers and roads follow the story, not the land."]
SHOUTING = ["PRESENTATION INSTRUCTIONS", "Each team PRESENTS for TEN minutes.",
            "Send your SLIDES to the tutor BEFORE Friday."]
SENTENCES = ["Read the assigned chapter before class.", "Bring two questions to the tutorial.",
             "Post a short summary online afterwards."]
RUBRIC = "Grading follows the course rubric."
WORKSHOP = [("MLA workshop", "Citing sources"), ("Works cited", "List every source you quote"),
            ("Hanging indent", "Indent each entry after its first line")]


def capitalized(text: str) -> str:
    return " ".join(word[:1].upper() + word[1:] for word in text.split(" "))


def calc_documents(folder: Path) -> dict[str, list[Path]]:
    serial = ("Seq No.", *ORDERS[0])
    unnumbered = [(None, *row) for row in ORDERS[1:]]
    numbered = [(f"No. {number}", *row) for number, row in enumerate(ORDERS[1:], start=1)]
    return {
        "7efeb4b1": [
            write_workbook(folder / "serial.xlsx", {"Sheet1": [serial, *unnumbered]}),
            write_workbook(folder / "serial_gold.xlsx", {"Sheet1": [serial, *numbered]})],
        "1273e544": [  # the task's rule reads the new sheet only
            write_workbook(folder / "net.xlsx", {"Sheet1": NET_INCOME}),
            write_workbook(folder / "net_gold.xlsx", {
                "Sheet1": NET_INCOME, "Sheet2": [(row[1],) for row in NET_INCOME]})],
        "51b11269": [
            write_workbook(folder / "amounts.xlsx", {"Sheet1": ORDERS}),
            write_workbook(folder / "amounts_gold.xlsx", {
                "Sheet1": [ORDERS[0], *sorted(ORDERS[1:], key=lambda row: row[2])]})],
    }


def writer_documents(folder: Path) -> dict[str, list[Path]]:
    spaced = [part for sentence in SENTENCES for part in (sentence, "")]
    return {
        "e528b65e": [write_document(folder / "geography.docx", LOWER_CASE),
                     write_document(folder / "geography_gold.docx", [*map(capitalized, LOWER_CASE)])],
        "d53ff5ee": [write_document(folder / "instructions.docx", SHOUTING),
                     write_document(folder / "instructions_gold.docx", [p.lower() for p in SHOUTING])],
        "88fe4b2d": [write_document(folder / "guidelines.docx", [" ".join(SENTENCES), RUBRIC]),
                     write_document(folder / "guidelines_gold.docx", [*spaced, RUBRIC])],
    }


def impress_documents(folder: Path) -> dict[str, list[Path]]:
    """The expected decks, and a097acff's input, as LibreOffice saves them (module docstring).
    Duplicated slides follow the originals, where Impress's Duplicate Slide puts the copies of
    the slides selected."""
    page = write_deck(folder / "page.pptx", [("Quarterly review", "Sales grew"), ("Next steps", None)])
    workshop = write_deck(folder / "workshop.pptx", WORKSHOP)
    page_gold, workshop_gold, monetizing = saved_by_libreoffice([
        write_deck(folder / "page_gold.pptx", [("Quarterly review", "Sales grew"),
                                               ("Next steps", "Page 1")]),
        write_deck(folder / "workshop_gold.pptx", [*WORKSHOP, *WORKSHOP[1:]]),
        write_deck(folder / "monetizing.pptx", [("Secrets of monetizing video", "Know your audience"),
                                                ("Revenue streams", "Ads and sponsors")]),
    ], folder / "saved")
    return {"73c99fb9": [page, page_gold], "9ec204e4": [workshop, workshop_gold],
            "a097acff": [monetizing, monetizing]}


def author_documents(folder: Path) -> dict[str, list[Path]]:
    """Task id -> the files its URLs serve, in `file_cache.task_urls` order."""
    return calc_documents(folder) | writer_documents(folder) | impress_documents(folder)


# Reading the screen as a model would.

def name_box(screen: str) -> str:
    """The cell reference Calc's Name Box shows (the first text of its formula bar)."""
    found = re.search(r'tool bar "Formula Tool Bar".*\n.*\btext center .*\n\s*\| (\S+)', screen)
    assert found, screen
    return found[1]


def panels_after(screen: str, anchor: str) -> list[tuple[str, int, int]]:
    """(name, x, y) of the panels listed right after the node `anchor`, at one depth of the
    tree (Impress's slide pane lists its slides so, in order)."""
    lines = screen.split(anchor, 1)[1].splitlines()[1:]
    panels: list[tuple[str, int, int]] = []
    indent = None
    for line in lines:
        found = re.match(r'(\s*)panel "(.*)" center \((\d+), (\d+)\)', line)
        if not found or indent not in (None, found[1]):
            break
        indent = found[1]
        panels.append((found[2], int(found[3]), int(found[4])))
    return panels


def first_paragraph(screen: str) -> str:
    """The first paragraph of Writer's document, as the tree lists it."""
    found = re.search(r'document text ".*\n\s*paragraph center .*\n\s*\| (.*)', screen)
    assert found, screen
    return found[1]


def fill_sequence_numbers(screen: str) -> list[str]:
    """From the "Seq No." header down to the last row the Name Box showed (after ctrl+End)."""
    last_row = int(re.sub(r"\D", "", name_box(screen)))
    x, y = find_in_tree(screen, Click("table cell", text="Seq No.")) or (0, 0)
    numbers = "".join(f"No. {number}\n" for number in range(1, last_row))
    return [call("CLICK", x=x, y=y), call("PRESS", key="down"), call("TYPING", text=numbers)]


def separate_sentences(screen: str) -> list[str]:
    """Retype the first paragraph with an empty paragraph after each of its sentences."""
    sentences = re.split(r"(?<=[.!?])\s+", first_paragraph(screen))
    return [call("HOTKEY", keys=["ctrl", "home"]), call("HOTKEY", keys=["ctrl", "shift", "down"]),
            call("TYPING", text="".join(f"{sentence}\n\n" for sentence in sentences)[:-1])]


def open_second_slide(screen: str) -> list[str]:
    _, x, y = panels_after(screen, 'document frame "Slides View"')[1]
    return [call("CLICK", x=x, y=y)]


def select_last_two_slides(screen: str) -> list[str]:
    (_, x1, y1), (_, x2, y2) = panels_after(screen, 'document frame "Slides View"')[-2:]
    return [call("CLICK", x=x1, y=y1), call("KEY_DOWN", key="shift"), call("CLICK", x=x2, y=y2),
            call("KEY_UP", key="shift")]


def change_case(item: str) -> list[Step]:
    return [call("HOTKEY", keys=["ctrl", "a"]), Click("menu", "Format"), Click("menu", "Text"),
            Click("menu item", item)]


SOLUTIONS: dict[str, tuple[str, list[Step]]] = {
    "7efeb4b1": ("libreoffice_calc", [
        Click("table cell", text="Seq No."), call("HOTKEY", keys=["ctrl", "end"]),
        fill_sequence_numbers]),
    "1273e544": ("libreoffice_calc", [
        Click("table cell", text="Revenue"), call("HOTKEY", keys=["ctrl", "shift", "down"]),
        call("HOTKEY", keys=["ctrl", "c"]), Click("menu", "Sheet"),
        Click("menu item", "Insert Sheet at End..."), Click("push button", "OK"),
        call("HOTKEY", keys=["ctrl", "v"]), Await(r'table cell "A1" .*\n\s*\| Revenue$')]),
    "51b11269": ("libreoffice_calc", [
        Click("table cell", text="Amount"), Click("push button", "Sort Ascending")]),
    "e528b65e": ("libreoffice_writer", change_case("Capitalize Every Word")),
    "d53ff5ee": ("libreoffice_writer", change_case("lowercase")),
    "88fe4b2d": ("libreoffice_writer", [separate_sentences]),
    "73c99fb9": ("libreoffice_impress", [
        open_second_slide, Click("paragraph", text="Click to add Text"),
        call("TYPING", text="Page 1"), call("PRESS", key="esc")]),
    "9ec204e4": ("libreoffice_impress", [
        select_last_two_slides, Click("menu", "Slide"), Click("menu item", "Duplicate Slide"),
        Await(r"\| Slide \d+ of 5$")]),
    "a097acff": ("libreoffice_impress", [
        call("HOTKEY", keys=["ctrl", "shift", "s"]), Await(r'file chooser "Save"'),
        call("TYPING", text="~/Desktop/pre.pptx\n"),
        Await(r'window "pre\.pptx - LibreOffice Impress"')]),
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every task's documents in a private file cache, under the URLs its task file names."""
    folder = tmp_path_factory.mktemp("osworld-office")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENT_RL_HOME", str(folder / "agent-rl-home"))
        for task_id, files in author_documents(folder).items():
            task = load_task(SOLUTIONS[task_id][0], task_id)
            for url, file in zip(file_cache.task_urls(task), files, strict=True):
                file_cache.add(url, file)
        yield


@pytest.fixture(scope="module")
def env(cache: None) -> Iterator[DesktopEnv]:
    desktop = DesktopEnv(max_turns=60)  # room for the steps' WAITs
    yield desktop
    desktop.close()



@pytest.mark.slow
@needs_office_desktop
@pytest.mark.parametrize("task_id", list(SOLUTIONS))
def test_osworld_office_task_scores_a_scripted_solution_1_and_a_no_op_0(
        env: DesktopEnv, task_id: str) -> None:
    domain, steps = SOLUTIONS[task_id]
    task = load_task(domain, task_id)
    reward, info = play(env, task, [], MAX_WAITS)
    assert (reward, info.get("evaluation_error")) == (0.0, None)
    reward, info = play(env, task, steps, MAX_WAITS)
    assert (reward, info.get("evaluation_error")) == (1.0, None)


@pytest.mark.slow
@needs_office_desktop
def test_a_click_placed_from_the_first_screen_of_calc_selects_that_cell(env: DesktopEnv) -> None:
    """LibreOffice places its widgets right in the first screen, not a title bar's height
    above them (it learns its window's position from the pointer's motion)."""
    messages, _ = env.reset(options={"task": load_task("libreoffice_calc", "1273e544")})
    x, y = find_in_tree(messages[-1]["content"], Click("table cell", text="Revenue")) or (0, 0)
    messages, *_ = env.step(call("CLICK", x=x, y=y))
    assert name_box(messages[-1]["content"]) == "B1"  # a click above it selects column B


@pytest.mark.skipif(any(not shutil.which(program) for program in REQUIRED_PROGRAMS),
                    reason=f"the desktop needs {', '.join(REQUIRED_PROGRAMS)}")
def test_a_relative_task_path_starts_from_the_home_which_has_a_desktop_folder() -> None:
    """As in OSWorld's VM: a097acff downloads to `Downloads/...` and saves to ~/Desktop."""
    session = DesktopSession()
    try:
        assert session.vm_path("Downloads/a.pptx") == "/home/user/Downloads/a.pptx"
        with pytest.raises(ValueError, match="outside the episode's folders"):
            session.vm_path("../../etc/passwd")
        assert (session.home / "Desktop").is_dir()
    finally:
        session.close()
