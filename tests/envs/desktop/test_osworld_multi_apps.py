"""OSWorld's own multi-app tasks, unchanged, run end to end on the desktop.

Task files in `tests/data/osworld_multi_apps/`, copied from OSWorld, that combine a terminal,
files and LibreOffice Writer:

- 2c9fc0de: a project in ~/projects/binder (unzipped from a download) with a local `origin`
  made by git; the task opens gnome-terminal in it (its stand-in here) and asks for a commit
  "daily update" pushed to origin main. Scored by `vm_command_line` (both repositories' last
  commits) with `check_include_exclude`.
- 8df7e444: "reminder.docx", open in Writer, says how to hand in the essay docx in the home;
  scored by `compare_zip_files` against the expected zip.
- 00fa164e: a report open in Writer gets, under "Main Results", a table of the LLM-based
  models' results from a spreadsheet beside it; saved by the task's own ctrl+s and scored by
  `compare_docx_tables` (the tables' cell texts).

Their downloads are written here (a zipped project; the reminder, the essay and the expected
zip; the report, the results workbook and the report with its table) and served from the
offline file cache under the task's URLs. A scripted solution reads what it needs from the
observation (a paragraph in Writer's AT-SPI tree, the terminal's prompt, menus and dialogs)
and acts through the env's actions; it scores 1, and DONE at once scores 0. The rows 00fa164e's
solution types are those of the workbook written here, which the task does not open.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import openpyxl
import pytest
from docx import Document
from osworld_play import Step, play

from envs.desktop import DesktopEnv, file_cache
from envs.desktop.accessibility import accessibility_missing
from envs.desktop.display import REQUIRED_PROGRAMS
from envs.desktop.oracle import Await, Click, TitleButton, call, command
from envs.desktop.setup_steps import _app_start

TASKS_DIR = Path(__file__).parents[2] / "data" / "osworld_multi_apps"
MAX_WAITS = 20  # WAIT turns a step may take for what it needs to show (a loaded machine is slow)

_missing = [program for program in (*REQUIRED_PROGRAMS, "xfce4-terminal", "soffice", "git", "zip")
            if not shutil.which(program)]
if no_tree := accessibility_missing():
    _missing.append(no_tree)
needs_desktop_apps = pytest.mark.skipif(
    bool(_missing), reason=f"missing: {', '.join(_missing)} (`make desktop-apps` installs "
    "LibreOffice and the desktop's programs)")

ESSAY = "Recruitment_and_retention_of_health_professionals_across_Europe.docx"
REMINDER = ["Essay submission",
            "Compress your essay (the docx file in your home folder) into a zip archive of the "
            "same name, and leave it in your home folder."]

# A step of a scripted solution: a tool call, a node or title-bar button to click, a screen to
# wait for, or a function that reads the screen and returns the tool calls to make.



def load_task(task_id: str) -> dict:
    return json.loads(next((TASKS_DIR / "multi_apps").glob(f"{task_id}*.json")).read_text())


RESULTS = [("Model", "Type", "Success"), ("GPT-4", "LLM", "12.2"), ("CogAgent", "VLM", "8.1"),
           ("Mixtral", "LLM", "5.0"), ("Random", "baseline", "0.4")]
LLM_TABLE = [(model, success) for model, kind, success in RESULTS if kind in ("Type", "LLM")]
REPORT = ["Awesome desktop environments", "Introduction", "We compare agents on desktop tasks.",
          "Main Results", "Conclusion", "Agents still fail most tasks."]


def write_workbook(path: Path, rows: list[tuple[str, ...]]) -> Path:
    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(row)
    book.save(path)
    return path


def write_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def write_document(path: Path, paragraphs: list[str],
                   table: list[tuple[str, ...]] | None = None, after: str = "") -> Path:
    """Paragraphs, with `table` (rows of cell texts) after the paragraph `after`."""
    document = Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
        if table and paragraph == after:
            grid = document.add_table(rows=len(table), cols=len(table[0]))
            for row, cells in zip(grid.rows, table, strict=True):
                for cell, text in zip(row.cells, cells, strict=True):
                    cell.text = text
    document.save(path)
    return path


def author_files(folder: Path) -> dict[str, list[Path]]:
    """Task id -> the files its URLs serve, in `file_cache.task_urls` order."""
    essay = write_document(folder / ESSAY, ["Health workforce", "Europe keeps its nurses by..."])
    return {
        "2c9fc0de": [write_zip(folder / "binder.zip", {
            "binder/README.md": b"# Binder\nNotebooks for the course.\n",
            "binder/environment.yml": b"name: binder\ndependencies:\n  - python=3.11\n"})],
        "8df7e444": [essay, write_document(folder / "reminder.docx", REMINDER),
                     write_zip(folder / "gold.zip", {ESSAY: essay.read_bytes()})],
        "00fa164e": [write_document(folder / "awe_desk_env.docx", REPORT),
                     write_workbook(folder / "expe-results.xlsx", RESULTS),
                     write_document(folder / "awe_desk_env_gt.docx", REPORT, LLM_TABLE,
                                    after="Main Results")],
    }


def click_terminal_in_root_menu(screen: str) -> list[str]:
    found = re.search(r'menu item "Terminal" at .* center \((\d+), (\d+)\)', screen)
    assert found, screen
    return [call("CLICK", x=int(found[1]), y=int(found[2]))]


def type_rows_below(rows: list[tuple[str, ...]]) -> list[str]:
    """New paragraphs after the caret's, one per row, cells apart by tabs; then the rows
    selected, caret at the end of the last one."""
    text = "".join("\n" + "\t".join(row) for row in rows)
    return [call("PRESS", key="end"), call("TYPING", text=text),
            *[call("HOTKEY", keys=["shift", "up"])] * (len(rows) - 1),
            call("HOTKEY", keys=["shift", "home"])]


WRITER = "reminder.docx - LibreOffice Writer"
SOLUTIONS: dict[str, list[Step]] = {
    # The task's terminal opens in the project, whose origin is a local repository.
    "2c9fc0de": [Await(r'window "Terminal - '), *command("git add -A"),
                 *command('git commit -qm "daily update"'), *command("git push -q origin main")],
    # Read the reminder in Writer, put Writer aside, and zip the essay under its own name.
    "8df7e444": [Await(r"\| Compress your essay .* into a zip archive of the same name"),
                 TitleButton(WRITER, "minimize"), Await(rf'window "{WRITER}" .*\bhidden\b'),
                 call("CLICK", x=900, y=700, button="right"), click_terminal_in_root_menu,
                 *command("cd ~ && F=$(ls *.docx)"), *command('zip "${F%.docx}.zip" "$F"')],
    # Type the rows under the heading and make them a table (Table > Convert > Text to Table,
    # tabs apart by default).
    "00fa164e": [Click("paragraph", text="Main Results"), lambda _: type_rows_below(LLM_TABLE),
                 Click("menu", "Table"), Click("menu", "Convert"),
                 Click("menu item", "Text to Table..."), Click("push button", "OK"),
                 Await(r'push button "OK"', present=False)],
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every task's files in a private file cache, under the URLs its task file names."""
    folder = tmp_path_factory.mktemp("osworld-multi-apps")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENT_RL_HOME", str(folder / "agent-rl-home"))
        for task_id, files in author_files(folder).items():
            for url, file in zip(file_cache.task_urls(load_task(task_id)), files, strict=True):
                file_cache.add(url, file)
        yield


@pytest.fixture(scope="module")
def env(cache: None) -> Iterator[DesktopEnv]:
    desktop = DesktopEnv(max_turns=80)  # room for the steps' WAITs
    yield desktop
    desktop.close()




@pytest.mark.slow
@needs_desktop_apps
@pytest.mark.parametrize("task_id", list(SOLUTIONS))
def test_osworld_multi_app_task_scores_a_scripted_solution_1_and_a_no_op_0(
        env: DesktopEnv, task_id: str) -> None:
    task = load_task(task_id)
    reward, info = play(env, task, [], MAX_WAITS)
    assert (reward, info.get("evaluation_error")) == (0.0, None)
    reward, info = play(env, task, SOLUTIONS[task_id], MAX_WAITS)
    assert (reward, info.get("evaluation_error")) == (1.0, None)


def test_an_execute_step_that_only_opens_gnome_terminal_or_a_folder_waits_for_its_window() -> None:
    """OSWorld's terminal tasks open gnome-terminal so (2c9fc0de and five more), os task
    4127319a a folder with xdg-open; any other command runs to completion as before."""
    opens = ("export DBUS_SESSION_BUS_ADDRESS='unix:path=/run/user/1000/bus'\n"
             "gnome-terminal --maximize --working-directory=/home/user/projects/binder")
    expected = (["gnome-terminal", "--maximize", "--working-directory=/home/user/projects/binder"]
                if shutil.which("gnome-terminal") is None else None)
    assert _app_start(opens, shell=True) == expected
    assert _app_start(opens, shell=False) is None
    assert _app_start("export A=1\ngsettings get org.gnome.shell favorite-apps", True) is None
    assert _app_start("echo hi; gnome-terminal", True) is None
    opens_folder = opens.splitlines()[0] + "\nxdg-open /home/user/project"
    assert _app_start(opens_folder, shell=True) == ["xdg-open", "/home/user/project"]
