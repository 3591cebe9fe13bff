"""`agent-rl desktop coverage`: what of an OSWorld task set this env runs, checked on a fixture
folder in OSWorld's layout (`tests/data/osworld_coverage/`, tasks authored in OSWorld's format).
No X server starts: coverage is a function of the task files and of what is installed.

Then OSWorld's `cloud_file` and `cache_file` getters, which the coverage showed most tasks
need: served from the offline file cache with each of their options, and through a real
desktop episode."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_rl.cli.desktop import app
from agent_rl.cli.main import is_user_error
from envs.desktop import DesktopEnv, file_cache
from envs.desktop.apps import APT_PACKAGES
from envs.desktop.coverage import (
    GETTER_KEYS,
    METRIC_OPTIONS,
    STEP_PARAMETERS,
    CoverageError,
    Part,
    coverage_report,
    load_osworld_tasks,
    needs_google_drive,
    task_coverage,
)
from envs.desktop.display import REQUIRED_PROGRAMS
from envs.desktop.evaluate import GETTERS, METRICS, EvalContext, evaluate
from envs.desktop.file_cache import MissingDownload
from envs.desktop.setup_steps import SUPPORTED_STEPS
from envs.desktop.task_cache import task_cache_dir
from envs.desktop.tasks import check_task
from envs.tool_calls import format_tool_call

FIXTURE = Path(__file__).parents[2] / "data" / "osworld_coverage"
runner = CliRunner()
_missing = [program for program in (*REQUIRED_PROGRAMS, "xfce4-terminal")
            if not shutil.which(program)]
needs_desktop = pytest.mark.skipif(
    bool(_missing), reason=f"desktop programs missing: {', '.join(_missing)} (apt-get install -y "
    f"--no-install-recommends {APT_PACKAGES})")


BASE_SYSTEM = ("touch", "mkdir", "ls", "cat", "python3")


def installed_only(*programs: str):
    """A machine with the base system, `programs` and no Python module beyond the stdlib."""
    return lambda app: any(program in (*BASE_SYSTEM, *programs) for program in app.programs)


def tasks_by_id() -> dict[str, tuple[str, dict]]:
    return {task["id"]: (domain, task) for domain, task in load_osworld_tasks(FIXTURE)}


def coverage_of(task_id: str, *programs: str):
    domain, task = tasks_by_id()[task_id]
    return task_coverage(task, domain, installed_only(*programs))


def test_every_registered_step_getter_and_metric_declares_the_options_it_handles() -> None:
    assert set(STEP_PARAMETERS) == set(SUPPORTED_STEPS)
    assert set(GETTER_KEYS) == set(GETTERS)
    assert set(METRIC_OPTIONS) == set(METRICS)


def test_the_fixture_loads_in_the_order_of_its_index() -> None:
    index = json.loads((FIXTURE / "test_all.json").read_text())
    pairs = load_osworld_tasks(FIXTURE)
    assert [(domain, task["id"]) for domain, task in pairs] == [
        (domain, task_id) for domain, task_ids in index.items() for task_id in task_ids]


def test_an_osworld_checkout_is_found_above_its_evaluation_examples(tmp_path) -> None:
    (tmp_path / "evaluation_examples").symlink_to(FIXTURE.resolve())
    assert len(load_osworld_tasks(tmp_path)) == len(load_osworld_tasks(FIXTURE))


def test_a_missing_index_or_task_file_is_an_error_naming_it(tmp_path) -> None:
    with pytest.raises(CoverageError, match="test_all.json does not exist"):
        load_osworld_tasks(tmp_path)
    (tmp_path / "test_all.json").write_text(json.dumps({"os": ["gone"]}))
    with pytest.raises(CoverageError, match=r"os/gone.*examples/os/gone.json does not exist"):
        load_osworld_tasks(tmp_path)


def test_a_task_of_supported_parts_is_implemented_and_runs_where_its_apps_are() -> None:
    echo = coverage_of("os-echo-into-file", "xfce4-terminal")
    assert echo.implemented and echo.runnable
    nothing = coverage_of("os-echo-into-file")
    assert nothing.implemented and not nothing.runnable
    assert nothing.missing_apps == ("terminal", "gnome-terminal")


def test_osworld_gnome_apps_count_as_installed_where_this_desktop_stands_in_for_them() -> None:
    # The task launches gnome-terminal; the desktop starts xfce4-terminal (or xterm) instead.
    assert coverage_of("os-echo-into-file", "xterm").runnable
    assert coverage_of("multi-notes-from-the-web", "mousepad", "xterm").missing_apps == ()


def test_related_apps_and_launched_programs_map_to_the_programs_they_need() -> None:
    calc = coverage_of("calc-infeasible-macro")  # related_apps "libreoffice calc", as OSWorld spells it
    assert calc.implemented and calc.missing_apps == ("libreoffice",)
    assert coverage_of("calc-infeasible-macro", "soffice").missing_apps == ("libreoffice",)
    assert coverage_of("calc-infeasible-macro", "libreoffice", "soffice").runnable
    # google-chrome launched by name: Chromium stands in for it (`apps.BROWSER_STAND_INS`).
    assert coverage_of("chrome-open-docs-tab").missing_apps == ("chrome", "google-chrome",
                                                                "socat")
    assert coverage_of("chrome-open-docs-tab", "chromium").missing_apps == ("socat",)
    assert coverage_of("chrome-open-docs-tab", "chromium", "socat").runnable
    assert coverage_of("vlc-minimal-view").missing_apps == ("vlc",)
    assert coverage_of("gimp-list-layers").missing_apps == ("gimp",)


def test_a_python_step_needs_the_modules_it_imports_in_the_desktops_python() -> None:
    focus = coverage_of("os-focus-with-pyautogui", "xfce4-terminal")
    assert focus.implemented and not focus.runnable
    assert focus.missing_apps == ("pyautogui (python3 module)",)
    domain, task = tasks_by_id()["os-focus-with-pyautogui"]
    with_pyautogui = task_coverage(task, domain, lambda app: True)
    assert with_pyautogui.runnable


def test_an_option_a_supported_part_does_not_handle_leaves_the_task_unimplemented() -> None:
    layers = coverage_of("gimp-list-layers", "gimp")
    assert Part("option", "literal_match.type") in layers.missing_parts
    assert not layers.implemented and not layers.runnable


def test_multi_vm_files_and_kept_command_output_are_implemented() -> None:
    assert coverage_of("multi-two-reports", "xfce4-terminal").runnable  # vm_file multi, gives
    assert coverage_of("os-list-with-stdout", "xfce4-terminal").runnable  # execute stdout


def test_opening_an_office_document_is_libreoffices_and_needs_no_missing_part() -> None:
    sums = coverage_of("calc-sum-column", "libreoffice")
    assert not [part for part in sums.missing_parts if part.name.startswith("open.path")]
    assert sums.missing_parts == (Part("option", "compare_table.rules[sparkline]"),)


def test_what_check_task_refuses_is_never_implemented() -> None:
    for domain, task in load_osworld_tasks(FIXTURE):
        coverage = task_coverage(task, domain, lambda app: True)
        try:
            check_task(task)
        except ValueError:
            assert not coverage.implemented, task["id"]


def test_a_task_without_config_is_named_as_check_task_refuses_it() -> None:
    no_config = coverage_of("os-no-config", "xfce4-terminal")
    assert [part.kind for part in no_config.missing_parts] == ["task"]
    assert "lacks config" in no_config.missing_parts[0].name


def test_google_drive_and_login_tasks_are_named_online_and_never_count() -> None:
    drive = coverage_of("calc-to-google-drive", "libreoffice", "chromium")
    assert drive.online == ("googledrive step", "login step", "googledrive_file getter")
    assert not drive.implemented and not drive.runnable
    assert coverage_of("chrome-login-and-star").online == ("login step",)
    folder = coverage_of("chrome-drive-folder", "google-chrome")
    assert folder.online == ("Google Drive page https://drive.google.com/drive/folders/"
                             "fixture-folder",)


def test_drive_download_links_are_plain_downloads_and_drive_pages_are_online() -> None:
    assert not needs_google_drive("https://drive.google.com/uc?id=abc&export=download")
    assert not needs_google_drive("https://drive.usercontent.google.com/download?id=abc&confirm=t")
    assert not needs_google_drive("https://files.example.org/notes.txt")
    assert needs_google_drive("https://drive.google.com/drive/folders/abc")
    assert needs_google_drive("https://docs.google.com/spreadsheets/d/abc/edit")


def test_the_report_counts_per_domain_and_ranks_missing_parts_and_apps() -> None:
    report = coverage_report(load_osworld_tasks(FIXTURE),
                             installed_only("xfce4-terminal", "mousepad", "libreoffice"))
    domains = {row.domain: row for row in report.domains()}
    assert list(domains) == ["os", "libreoffice_calc", "chrome", "vlc", "gimp", "multi_apps"]
    assert (domains["os"].tasks, domains["os"].implemented, domains["os"].runnable) == (4, 3, 2)
    assert (domains["libreoffice_calc"].implemented, domains["libreoffice_calc"].runnable,
            domains["libreoffice_calc"].online) == (1, 1, 1)
    assert domains["chrome"].online == 2
    assert [task.task_id for task in report.online_tasks()] == [
        "calc-to-google-drive", "chrome-login-and-star", "chrome-drive-folder"]
    counts = [count for _, count in report.missing_parts()]
    assert counts == sorted(counts, reverse=True)
    apps = dict(report.missing_apps())
    assert apps["pyautogui (python3 module)"] == 2  # online tasks are not counted
    assert "libreoffice" not in apps and "terminal" not in apps
    # The online tasks' own gaps (compare_table's sparkline rule via Drive) are left out of the counts.
    assert dict(report.missing_parts())[Part("option", "compare_table.rules[sparkline]")] == 1


def test_the_command_prints_the_tables_and_writes_the_same_as_json(tmp_path) -> None:
    out = tmp_path / "coverage.json"
    result = runner.invoke(app, ["coverage", str(FIXTURE), "--json", str(out)],
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    for text in ("What runs of OSWorld", "libreoffice_calc", "implemented", "runs here",
                 "calc-to-google-drive", "googledrive step", "compare_table.rules[sparkline]",
                 "literal_match.type"):
        assert text in result.output
    data = json.loads(out.read_text())
    assert data["total"]["tasks"] == 14 and data["total"]["online"] == 3
    assert {row["domain"] for row in data["domains"]} == {
        "os", "libreoffice_calc", "chrome", "vlc", "gimp", "multi_apps"}
    assert {"kind": "option", "name": "compare_table.rules[sparkline]", "tasks": 1} in data[
        "missing_parts"]
    assert [task["id"] for task in data["online"]] == [
        "calc-to-google-drive", "chrome-login-and-star", "chrome-drive-folder"]
    assert len(data["tasks"]) == 14


def test_the_command_writes_the_tables_as_markdown_for_the_docs(tmp_path) -> None:
    out = tmp_path / "coverage.md"
    result = runner.invoke(app, ["coverage", str(FIXTURE), "--markdown", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("| domain | tasks | format implemented | runs here | online")
    assert "| `libreoffice_calc` | 3 |" in text and "| total | 14 |" in text
    assert "| option `compare_table.rules[sparkline]` | 1 |" in text


def test_a_wrong_folder_is_an_error_the_cli_prints_as_one_line(tmp_path) -> None:
    result = runner.invoke(app, ["coverage", str(tmp_path)])
    assert isinstance(result.exception, CoverageError) and is_user_error(result.exception)


def test_an_unknown_related_app_is_needed_under_its_own_name() -> None:
    task = {"id": "t", "instruction": "Tag the MP3s.", "config": [], "related_apps": ["Picard"],
            "evaluator": {"func": "infeasible"}}
    assert task_coverage(task, "multi_apps", lambda app: False).missing_apps == ("picard",)
    assert task_coverage(task | {"related_apps": ["pdf", "image"]}, "multi_apps",
                         lambda app: False).missing_apps == ()


# --- cloud_file and cache_file -------------------------------------------------------------

NOTES_URL = "https://drive.google.com/uc?id=fixture-notes&export=download"
GOLD_URL = "https://drive.usercontent.google.com/download?id=fixture-gold&export=download"


@dataclass
class EpisodeFolder:
    """The part of a desktop session the two getters touch: its host folder."""

    root: Path


@pytest.fixture
def cached(tmp_path, monkeypatch) -> dict[str, bytes]:
    """An offline cache (in a fresh AGENT_RL_HOME) holding NOTES_URL and GOLD_URL."""
    monkeypatch.setenv("AGENT_RL_HOME", str(tmp_path / "home"))
    files = {NOTES_URL: b"first\nsecond\n", GOLD_URL: b"second\n"}
    for index, (url, data) in enumerate(files.items()):
        local = tmp_path / f"download-{index}"
        local.write_bytes(data)
        file_cache.add(url, local)
    return files


def context_in(folder: Path) -> EvalContext:
    folder.mkdir(exist_ok=True)
    return EvalContext(session=EpisodeFolder(folder), observer=None, ended_by="DONE")


def test_cloud_file_gives_the_cached_file_under_its_dest_name(cached, tmp_path) -> None:
    context = context_in(tmp_path / "episode")
    path = GETTERS["cloud_file"](context, {"type": "cloud_file", "path": GOLD_URL,
                                           "dest": "summary_gold.txt"})
    assert Path(path) == task_cache_dir(context.session) / "summary_gold.txt"
    assert Path(path).read_bytes() == cached[GOLD_URL]
    Path(path).write_text("a metric that scribbles")
    assert file_cache.lookup(GOLD_URL).read_bytes() == cached[GOLD_URL]  # the cache is intact


def test_cloud_file_multi_gives_the_files_gives_picks_in_path_order(cached, tmp_path) -> None:
    context = context_in(tmp_path / "episode")
    both = {"type": "cloud_file", "multi": True, "path": [NOTES_URL, GOLD_URL],
            "dest": ["notes.txt", "gold.txt"]}
    first = GETTERS["cloud_file"](context, both)  # gives defaults to [0]: one path, not a list
    assert Path(first).name == "notes.txt"
    given = GETTERS["cloud_file"](context, both | {"gives": [1, 0]})
    assert [Path(path).name for path in given] == ["notes.txt", "gold.txt"]
    assert [Path(path).read_bytes() for path in given] == [cached[NOTES_URL], cached[GOLD_URL]]
    assert Path(GETTERS["cloud_file"](context, both | {"gives": [1]})).name == "gold.txt"


def test_cloud_file_names_every_url_the_cache_lacks_and_how_to_add_it(cached, tmp_path) -> None:
    context = context_in(tmp_path / "episode")
    absent = ["https://files.example.org/absent-a.xlsx", "https://files.example.org/absent-b.xlsx"]
    config = {"type": "cloud_file", "multi": True, "path": [GOLD_URL, *absent],
              "dest": ["gold.txt", "a.xlsx", "b.xlsx"], "gives": [0]}
    with pytest.raises(MissingDownload, match=r"2 file\(s\).*absent-a.xlsx, .*absent-b.xlsx.*"
                       r"agent-rl desktop cache add"):
        GETTERS["cloud_file"](context, config)
    with pytest.raises(ValueError, match="3 URLs in 'path' but 2 names"):
        GETTERS["cloud_file"](context, config | {"dest": ["gold.txt", "a.xlsx"]})


def test_cache_file_reads_what_the_task_cache_holds_and_nothing_outside_it(tmp_path) -> None:
    context = context_in(tmp_path / "episode")
    (task_cache_dir(context.session) / "ls.out").write_text("a.log\nb.log\n")
    path = GETTERS["cache_file"](context, {"type": "cache_file", "path": "ls.out"})
    assert Path(path).read_text() == "a.log\nb.log\n"
    assert GETTERS["cache_file"](context, {"type": "cache_file", "path": "never.out"}) is None
    with pytest.raises(ValueError, match="leaves the task cache"):
        GETTERS["cache_file"](context, {"type": "cache_file", "path": "../../etc/passwd"})


@pytest.mark.usefixtures("cached")
def test_missing_downloads_lists_cloud_file_urls_before_a_reset_starts_anything() -> None:
    _, task = tasks_by_id()["multi-two-reports"]  # cloud_file URLs only, none cached
    assert file_cache.missing_downloads(task) == [
        "https://drive.google.com/uc?id=fixture-report-a&export=download",
        "https://drive.google.com/uc?id=fixture-report-b&export=download"]
    _, task = tasks_by_id()["multi-notes-from-the-web"]  # a download step and a multi cloud_file
    assert file_cache.missing_downloads(task) == [
        "https://files.example.org/notes.txt", "https://files.example.org/summary.txt"]
    shared = {"id": "t", "config": [{"type": "download", "parameters": {"files": [
        {"url": NOTES_URL, "path": "/home/user/notes.txt"}]}}],
        "evaluator": {"func": "compare_text_file",
                      "result": {"type": "cloud_file", "path": GOLD_URL, "dest": "a.txt"},
                      "expected": {"type": "cloud_file", "path": GOLD_URL, "dest": "b.txt"}}}
    assert file_cache.missing_downloads(shared) == []


def summary_task() -> dict:
    """A task in OSWorld's format whose evaluator compares a desktop file (vm_file) with the
    second of two expected files from the web (cloud_file, multi, gives)."""
    return {
        "id": "summary-from-the-web", "snapshot": "os", "related_apps": ["os"],
        "instruction": "Write the second line of ~/notes.txt into ~/summary.txt.",
        "config": [{"type": "download", "parameters": {"files": [
            {"url": NOTES_URL, "path": "/home/user/notes.txt"}]}},
                   {"type": "launch", "parameters": {"command": ["xfce4-terminal"]}}],
        "evaluator": {"func": "compare_text_file",
                      "result": {"type": "vm_file", "path": "/home/user/summary.txt",
                                 "dest": "summary.txt"},
                      "expected": {"type": "cloud_file", "multi": True,
                                   "path": [NOTES_URL, GOLD_URL],
                                   "dest": ["notes.txt", "summary_gold.txt"], "gives": [1]},
                      "options": {"ignore_blanks": True}},
    }


def test_a_task_using_both_getters_passes_check_task_and_scores_what_they_read(
    cached, tmp_path
) -> None:
    task = {"id": "listing", "instruction": "Move the logs.", "config": [],
            "evaluator": {"func": "compare_text_file",
                          "result": {"type": "cache_file", "path": "ls.out"},
                          "expected": {"type": "cloud_file", "path": GOLD_URL, "dest": "ls.gold"}}}
    check_task(task)
    check_task(summary_task())
    assert task_coverage(task, "os", lambda app: True).runnable
    context = context_in(tmp_path / "episode")
    assert evaluate(task["evaluator"], context) == 0.0  # nothing wrote ls.out
    (task_cache_dir(context.session) / "ls.out").write_bytes(cached[GOLD_URL])
    assert evaluate(task["evaluator"], context) == 1.0
    (task_cache_dir(context.session) / "ls.out").write_text("first\n")
    assert evaluate(task["evaluator"], context) == 0.0


def test_the_fixture_task_with_a_multi_cloud_file_is_now_implemented() -> None:
    notes = coverage_of("multi-notes-from-the-web", "xfce4-terminal", "mousepad")
    assert notes.implemented and notes.runnable


@needs_desktop
@pytest.mark.usefixtures("cached")
def test_a_cloud_file_task_scores_a_scripted_solution_1_and_a_no_op_0() -> None:
    env = DesktopEnv()
    try:
        task = summary_task()
        env.reset(options={"task": task})
        assert env.step(format_tool_call("DONE", {}))[1] == 0.0  # no summary.txt
        env.reset(options={"task": task})
        env.step(format_tool_call("TYPING", {"text": "sed -n 2p ~/notes.txt > ~/summary.txt\n"}))
        env.step(format_tool_call("WAIT", {}))
        assert env.step(format_tool_call("DONE", {}))[1] == 1.0
        absent = "https://files.example.org/absent-gold.txt"
        expected = task["evaluator"]["expected"] | {"path": [NOTES_URL, absent]}
        missing = task | {"evaluator": task["evaluator"] | {"expected": expected}}
        with pytest.raises(MissingDownload, match="absent-gold.txt.*agent-rl desktop cache add"):
            env.reset(options={"task": missing})
        assert env.display is None  # refused before any X server started
    finally:
        env.close()


# --- vm_file with multi, and set-up commands whose output is kept ----------------------------


@needs_desktop
def test_multi_vm_files_and_kept_command_output_reach_the_evaluator() -> None:
    """A task whose postconfig keeps a command's stdout and stderr (OSWorld's `stdout` and
    `stderr` options) for `cache_file`, and whose `vm_file` copies two desktop files, one
    absent, under their `dest` names, as OSWorld's getter does."""
    task = {"id": "kept-output", "instruction": "Export the table to ~/table.csv.",
            "config": [{"type": "create_file", "parameters": {"path": "/home/user/gold.csv",
                                                              "content": "a,b\n1,2\n"}},
                       {"type": "launch", "parameters": {"command": ["xfce4-terminal"]}}],
            "evaluator": {
                "postconfig": [
                    {"type": "execute", "parameters": {"command": ["ls", "/home/user"],
                                                       "stdout": "home.ls"}},
                    {"type": "command", "parameters": {"command": "echo oops >&2", "shell": True,
                                                       "stderr": "err.out"}}],
                "func": ["check_list", "check_list", "compare_csv"],
                "result": [{"type": "cache_file", "path": "home.ls"},
                           {"type": "cache_file", "path": "err.out"},
                           {"type": "vm_file", "multi": True, "gives": [1],
                            "path": ["/home/user/absent.csv", "/home/user/table.csv"],
                            "dest": ["absent.csv", "result.csv"]}],
                "expected": [{"type": "rule", "rules": {"expect": [r"gold\.csv"]}},
                             {"type": "rule", "rules": {"expect": ["oops"]}},
                             {"type": "vm_file", "path": "/home/user/gold.csv",
                              "dest": "gold.csv"}]}}
    assert task_coverage(task, "os", lambda app: True).implemented
    env = DesktopEnv()
    try:
        env.reset(options={"task": task})
        assert env.step(format_tool_call("DONE", {}))[1] == 0.0  # no table.csv yet
        env.reset(options={"task": task})
        env.step(format_tool_call("TYPING", {"text": "cp ~/gold.csv ~/table.csv\n"}))
        env.step(format_tool_call("WAIT", {}))
        assert env.step(format_tool_call("DONE", {}))[1] == 1.0
        context = EvalContext(env._session, env._observer, "DONE")
        both = GETTERS["vm_file"](context, task["evaluator"]["result"][2] | {"gives": [0, 1]})
        assert both[0] is None and Path(both[1]).name == "result.csv"
        assert Path(both[1]).parent == task_cache_dir(env._session)
        assert Path(both[1]).read_text() == "a,b\n1,2\n"
    finally:
        env.close()


@pytest.mark.slow
@needs_desktop
@pytest.mark.skipif(shutil.which("evince") is None,
                    reason="Evince is not installed (`make desktop-apps`)")
def test_open_shows_a_pdf_in_evince_as_xdg_open_does_in_osworlds_vm(tmp_path,
                                                                    monkeypatch) -> None:
    from tests.envs.desktop.test_file_metrics import write_pdf

    monkeypatch.setenv("AGENT_RL_HOME", str(tmp_path / "home"))
    url = "https://drive.google.com/uc?id=fixture-paper&export=download"
    file_cache.add(url, Path(write_pdf(tmp_path / "paper.pdf", "Spectral Graph Theory")))
    task = {"id": "open-a-pdf", "instruction": "Read the paper.",
            "config": [{"type": "download", "parameters": {"files": [
                {"url": url, "path": "/home/user/Desktop/shi17a.pdf"}]}},
                {"type": "open", "parameters": {"path": "/home/user/Desktop/shi17a.pdf"}}],
            "evaluator": {"func": "check_include_exclude", "result": {"type": "window_titles"},
                          "expected": {"type": "rule", "rules": {"include": ["shi17a.pdf"]}}}}
    assert task_coverage(task, "multi_apps", lambda app: True).implemented
    env = DesktopEnv()
    try:
        env.reset(options={"task": task})
        assert env.step(format_tool_call("DONE", {}))[1] == 1.0  # Evince's window names the file
    finally:
        env.close()
