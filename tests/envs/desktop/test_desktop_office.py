"""LibreOffice and pyautogui on the desktop, as OSWorld's office tasks use them.

A spreadsheet served from the offline file cache (`download`) is `open`ed, as xdg-open would,
in LibreOffice Calc under the title OSWorld's post-config steps activate, with no dialog over
it; OSWorld's own kind of `python -c "import pyautogui; ..."` steps then type into it on the
sandbox's display and save it with ctrl+s and Enter, and the `vm_file` getter hands back an
.xlsx whose cell holds what was typed. The rest checks, without a desktop, what `make
desktop-apps` runs, which app each document type opens in, and what coverage counts."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from xml.etree import ElementTree

import pytest

from envs.desktop import DesktopEnv, file_cache, install
from envs.desktop.apps import PYTHON_PACKAGES, PYTHON_SITE
from envs.desktop.coverage import App, Part, installed_here, task_coverage
from envs.desktop.display import REQUIRED_PROGRAMS
from envs.desktop.evaluate import EvalContext, get_active_window_title, get_vm_file
from envs.desktop.office import open_command
from envs.desktop.setup_steps import SUPPORTED_STEPS, SetupError, run_steps

_missing = [program for program in (*REQUIRED_PROGRAMS, "soffice") if not shutil.which(program)]
needs_libreoffice = pytest.mark.skipif(
    bool(_missing), reason=f"programs missing: {', '.join(_missing)} (LibreOffice and the "
    "desktop's programs come with `make desktop-apps`)")
needs_pyautogui = pytest.mark.skipif(
    not installed_here(App("pyautogui", python_module="pyautogui")),
    reason=f"pyautogui is not installed for the desktop's python3 in {PYTHON_SITE} (`make "
    "desktop-apps`, or `agent-rl desktop install-apps --no-apt`)")

URL = "https://example.org/osworld/Book1.xlsx"
TITLE = "Book1.xlsx - LibreOffice Calc"
TYPED = "4242"
TYPE_INTO_A4 = ("import pyautogui; pyautogui.hotkey('ctrl', 'home'); "
                "pyautogui.press('down', presses=3); pyautogui.write('4242'); "
                "pyautogui.press('enter')")
# Word for word the save step of OSWorld's office tasks that answer the keep-format question.
SAVE = ('import pyautogui; import time; pyautogui.hotkey("ctrl", "s"); time.sleep(0.5); '
        'pyautogui.press("enter");')
CALC_TASK = {
    "id": "office-open-and-save", "snapshot": "libreoffice_calc",
    "related_apps": ["libreoffice_calc"], "instruction": "Put 4242 in A4 and save.",
    "config": [
        {"type": "download", "parameters": {"files": [
            {"url": URL, "path": "/home/user/Book1.xlsx"}]}},
        {"type": "open", "parameters": {"path": "/home/user/Book1.xlsx"}},
    ],
    "evaluator": {"func": "check_include_exclude",
                  "result": {"type": "vm_command_line", "command": "ls /home/user", "shell": True},
                  "expected": {"type": "rule", "rules": {"include": ["Book1.xlsx"]}}},
}
# Post-config steps as OSWorld's Calc tasks write them, run before the file is read back.
POSTCONFIG = [
    {"type": "activate_window", "parameters": {"window_name": TITLE, "strict": True}},
    {"type": "execute", "parameters": {"command": ["python", "-c", TYPE_INTO_A4]}},
    {"type": "execute", "parameters": {"command": ["python", "-c", SAVE]}},
]


def author_spreadsheet(folder: Path) -> Path:
    """Book1.xlsx: a header row and two rows of data, written with openpyxl where it is
    installed, else converted from CSV by LibreOffice itself (in a throwaway profile)."""
    book = folder / "Book1.xlsx"
    if importlib.util.find_spec("openpyxl") is not None:
        import openpyxl

        workbook = openpyxl.Workbook()
        for row in (("name", "value"), ("alpha", 1), ("beta", 2)):
            workbook.active.append(row)
        workbook.save(book)
        return book
    (folder / "Book1.csv").write_text("name,value\nalpha,1\nbeta,2\n")
    subprocess.run(["soffice", f"-env:UserInstallation=file://{folder}/profile", "--headless",
                    "--convert-to", "xlsx", "--outdir", str(folder), str(folder / "Book1.csv")],
                   check=True, capture_output=True, timeout=120)
    return book


def cell(book: Path, reference: str) -> str | None:
    """What a cell of the first sheet holds, read from the .xlsx's XML (a shared string
    looked up), so that no spreadsheet library is needed."""
    namespace = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
    with zipfile.ZipFile(book) as archive:
        sheet = ElementTree.fromstring(archive.read("xl/worksheets/sheet1.xml"))
        node = sheet.find(f".//m:c[@r='{reference}']", namespace)
        value = None if node is None else node.findtext("m:v", namespaces=namespace)
        if value is None or node.get("t") != "s":
            return value
        strings = ElementTree.fromstring(archive.read("xl/sharedStrings.xml"))
        return "".join(strings.findall("m:si", namespace)[int(value)].itertext())


@pytest.fixture(scope="module")
def calc_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DesktopEnv]:
    """One episode of CALC_TASK after its reset: Book1.xlsx downloaded and opened."""
    folder = tmp_path_factory.mktemp("office")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENT_RL_HOME", str(folder / "agent-rl-home"))
        file_cache.add(URL, author_spreadsheet(folder))
        env = DesktopEnv()
        try:
            env.reset(options={"task": CALC_TASK})
            yield env
        finally:
            env.close()


def window_titles(env: DesktopEnv) -> list[str]:
    observer = env._observer
    assert observer is not None
    return [observer.title(window) for window in observer.client_windows()]


@pytest.mark.slow
@needs_libreoffice
def test_open_of_an_xlsx_shows_libreoffice_calc_under_the_title_osworld_activates(
        calc_env: DesktopEnv) -> None:
    assert window_titles(calc_env) == [TITLE]  # no tip of the day, no recovery dialog
    assert calc_env._session is not None and calc_env._observer is not None
    context = EvalContext(calc_env._session, calc_env._observer, ended_by=None)
    assert get_active_window_title(context, {}) == TITLE


@pytest.mark.slow
@needs_libreoffice
@needs_pyautogui
def test_pyautogui_types_and_ctrl_s_enter_saves_the_sheet_as_xlsx(calc_env: DesktopEnv) -> None:
    session, observer = calc_env._session, calc_env._observer
    assert session is not None and observer is not None
    run_steps((session, observer), POSTCONFIG)
    context = EvalContext(session, observer, ended_by="DONE")
    deadline = time.monotonic() + 30
    while True:  # LibreOffice writes the file a moment after the keys arrive
        saved = get_vm_file(context, {"path": "/home/user/Book1.xlsx"})
        assert saved is not None
        if zipfile.is_zipfile(saved) and cell(Path(saved), "A4") == TYPED:
            break
        assert time.monotonic() < deadline, "the typed value never reached the saved .xlsx"
        time.sleep(0.5)
    assert cell(Path(saved), "A1") == "name" and cell(Path(saved), "B3") == "2"
    assert window_titles(calc_env) == [TITLE]  # still an .xlsx: no format question left open


def test_office_documents_open_in_the_libreoffice_module_xdg_open_picks() -> None:
    assert open_command("/home/user/Book1.xlsx")[:2] == ["soffice", "--calc"]
    assert open_command("/home/user/notes.DOCX")[:2] == ["soffice", "--writer"]
    assert open_command("/home/user/slides.pptx")[:2] == ["soffice", "--impress"]
    with pytest.raises(ValueError, match="does not open"):
        open_command("/home/user/paper.pdf")


def test_an_open_of_an_office_document_is_implemented_and_needs_libreoffice() -> None:
    task = CALC_TASK | {"related_apps": []}
    coverage = task_coverage(task, "libreoffice_calc", lambda app: app.name != "libreoffice")
    assert coverage.implemented and coverage.missing_apps == ("libreoffice",)
    assert task_coverage(task, "libreoffice_calc", lambda app: True).runnable
    video = task | {"config": [{"type": "open", "parameters": {"path": "/home/user/clip.mp4"}}]}
    assert Part("option", "open.path *.mp4 (xdg-open's app for it)") in task_coverage(
        video, "os", lambda app: True).missing_parts
    pdf = task | {"config": [{"type": "open", "parameters": {"path": "/home/user/paper.pdf"}}]}
    pdf_coverage = task_coverage(pdf, "os", lambda app: app.name != "evince")
    assert pdf_coverage.implemented and pdf_coverage.missing_apps == ("evince",)


def test_a_launch_of_a_missing_app_fails_naming_its_debian_package(monkeypatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda program, **_: None)
    with pytest.raises(SetupError, match="apt-get install .*--no-install-recommends thunderbird"):
        SUPPORTED_STEPS["launch"]((None, None), {"command": ["/usr/bin/thunderbird"]})
    with pytest.raises(SetupError, match="libreoffice-calc libreoffice-writer"):
        SUPPORTED_STEPS["launch"]((None, None), {"command": ["libreoffice", "--calc"]})


def test_make_desktop_apps_installs_the_debian_packages_then_pyautogui_for_the_desktop(
        monkeypatch) -> None:
    ran: list[Sequence[str]] = []
    monkeypatch.setattr(install.os, "geteuid", lambda: 0)
    monkeypatch.setattr(install, "desktop_python", lambda: "/usr/bin/python3")
    install.install_desktop_apps(run=lambda command: ran.append(command) or 0)
    update, apt, pip = ran
    assert update[:2] == ["apt-get", "update"]
    assert {"libreoffice-calc", "libreoffice-writer", "libreoffice-impress", "socat",
            "python3-xlib", "python3-tk", "python3-pip", "xvfb"} <= set(apt)
    assert pip[:3] == ["/usr/bin/python3", "-m", "pip"]  # built for the desktop's python3
    assert pip[pip.index("--target") + 1] == PYTHON_SITE and pip[-len(PYTHON_PACKAGES):] == [
        *PYTHON_PACKAGES]
    ran.clear()
    install.install_desktop_apps(apt=False, run=lambda command: ran.append(command) or 0)
    assert [command[2] for command in ran] == ["pip"]
    with pytest.raises(install.InstallError, match="apt-get install .* exited with status 100"):
        install.install_desktop_apps(run=lambda command: 100 if "install" in command else 0)
    monkeypatch.setattr(install.os, "geteuid", lambda: 1000)
    with pytest.raises(install.InstallError, match="sudo make desktop-apps"):
        install.install_desktop_apps(run=lambda command: 0)
