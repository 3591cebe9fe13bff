"""Desktop-v0 on a real Xvfb desktop: scripted solutions score 1, wrong ones 0, bad input is
feedback, episodes are isolated, recordings are written, and OSWorld tasks are checked whole."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401 - registers agent_rl/Desktop-v0
from envs.desktop import DesktopEnv, file_cache, load_desktop_tasks, load_task_file
from envs.desktop.accessibility import accessibility_missing
from envs.desktop.apps import APT_PACKAGES, GTK_APPS
from envs.desktop.coverage import App, installed_here
from envs.desktop.display import REQUIRED_PROGRAMS
from envs.desktop.evaluate import UnsupportedEvaluator
from envs.desktop.file_cache import MissingDownload
from envs.desktop.oracle import Await, Click, TitleButton, command, find_in_tree
from envs.desktop.setup_steps import UnsupportedTaskStep, fill_placeholders
from envs.desktop.tasks import TASKS_DIR, UnsupportedTaskParts, check_task, task_from_row
from envs.tool_calls import format_tool_call

# The shipped tasks run the GTK apps and x11-apps' xlogo, xclock and xeyes; their scripted
# solutions read the AT-SPI tree.
_missing = [program for program in (*REQUIRED_PROGRAMS, *GTK_APPS, "xlogo", "xclock", "xeyes")
            if not shutil.which(program)]
if no_tree := accessibility_missing():
    _missing.append(no_tree)
needs_desktop = pytest.mark.skipif(
    bool(_missing),
    reason=f"desktop programs missing: {', '.join(_missing)} (apt-get install -y "
    f"--no-install-recommends {APT_PACKAGES})",
)

if "agent_rl/Desktop-v0" not in gymnasium.registry:
    gymnasium.register(id="agent_rl/Desktop-v0", entry_point="envs.desktop:DesktopEnv")

# WAITs a scripted step may take for what it needs to show (a loaded machine is slow).
MAX_WAITS = 15
OSWORLD_TASK = TASKS_DIR / "examples" / "os" / "6f56bf42-85b8-4fbb-8e06-6c44960184ba.json"


def call(name: str, **arguments: object) -> str:
    return format_tool_call(name, arguments)


def all_tasks() -> dict[str, dict]:
    rows = [*load_desktop_tasks("train"), *load_desktop_tasks("heldout")]
    return {row["task_id"]: row for row in rows}


def button_center(observation: str, window_title: str, button: str) -> tuple[int, int]:
    """Where the tree says a window's title-bar button is, as a model would read it."""
    block = observation.split(f'"{window_title}"', 1)[1]
    match = re.search(rf'button "{button}" at .*? center \((\d+), (\d+)\)', block)
    assert match, f"no {button} button for {window_title!r} in:\n{observation}"
    return int(match.group(1)), int(match.group(2))


@pytest.fixture(scope="module")
def env() -> Iterator[DesktopEnv]:
    desktop = DesktopEnv(split="train", max_turns=60)  # room for the scripts' Await pauses
    yield desktop
    desktop.close()


@pytest.fixture(scope="module")
def tasks() -> dict[str, dict]:
    return all_tasks()


def play(env: DesktopEnv, task: dict, turns: list[str | Await | Click | TitleButton]
         ) -> tuple[float, bool, dict]:
    """Run scripted turns from a reset, each placed from the last observation's text alone;
    returns the final reward, terminated and info."""
    messages, _ = env.reset(options={"task": task})
    reward, terminated, info = 0.0, False, {}
    for turn in turns:
        screen = messages[-1]["content"]
        if isinstance(turn, Await | Click):
            for _ in range(MAX_WAITS):
                if isinstance(turn, Click):
                    if find_in_tree(screen, turn):
                        break
                elif bool(re.search(turn.pattern, screen, re.MULTILINE)) == turn.present:
                    break
                messages, *_ = env.step(call("WAIT"))
                screen = messages[-1]["content"]
            else:
                raise AssertionError(f"{turn} never held on the screen:\n{screen}")
            if isinstance(turn, Await):
                continue
            x, y = find_in_tree(screen, turn)
            turn = call("DOUBLE_CLICK" if turn.double else "CLICK", x=x, y=y)
        elif isinstance(turn, TitleButton):
            x, y = button_center(screen, turn.window, turn.button)
            turn = call("CLICK", x=x, y=y)
        messages, reward, terminated, truncated, info = env.step(turn)
        if terminated or truncated:
            break
    return reward, terminated, info


def saved(title: str) -> Await:
    """Mousepad marks unsaved changes with a * before the title."""
    return Await(f'^\\s*frame "{re.escape(title)} - Mousepad"')


def create_in_file_manager(kind: str, name: str) -> list[str | Await | Click]:
    """File > Create New... > `kind`, then the new name in pcmanfm's dialog and OK."""
    return [Click("menu", "File"), Click("menu", "Create New..."), Click("menu item", kind),
            Click("text", text="New"), call("HOTKEY", keys=["ctrl", "a"]),
            call("TYPING", text=name), Click("push button", "OK"), Click("icon", text=name)]


SOLUTIONS: dict[str, list[str | Await | Click | TitleButton]] = {
    "terminal-make-folder": command("mkdir ~/projects"),
    "terminal-write-hello": command("echo 'hello world' > ~/hello.txt"),
    "terminal-count-lines": command("wc -l < ~/data.csv > ~/count.txt"),
    "terminal-rename-file": command("mv ~/draft.txt ~/final.txt"),
    "terminal-set-title": command("printf '\\033]0;build-server\\007'"),
    "terminal-delete-logs": command("rm ~/logs/*.log"),
    "terminal-make-executable": command("chmod +x ~/run.sh"),
    "terminal-sort-names": command("sort ~/names.txt > ~/sorted.txt"),
    "terminal-copy-folder": command("mkdir -p ~/backup && cp -r ~/photos ~/backup/"),
    "terminal-second-window": [Click("menu", "File"), Click("menu item", "Open Terminal"),
                               Await(r'^\s*\[2\] window "Terminal')],
    "6f56bf42-85b8-4fbb-8e06-6c44960184ba":
        command("echo 'water the plants' >> ~/Desktop/todo.txt"),
    "editor-append-line": [
        Click("text", text="eggs"), call("HOTKEY", keys=["ctrl", "End"]),
        call("TYPING", text="buy milk\n"), Click("menu", "File"), Click("menu item", "Save"),
        saved("~/notes.txt"),
    ],
    "editor-insert-header": [
        Click("text", text="- apples"), call("HOTKEY", keys=["ctrl", "Home"]),
        call("TYPING", text="# Shopping list\n"), call("HOTKEY", keys=["ctrl", "s"]),
        saved("~/list.md"),
    ],
    "editor-replace-first-line": [
        Click("text", text="TODO: fix bug"), call("HOTKEY", keys=["ctrl", "Home"]),
        call("HOTKEY", keys=["shift", "End"]), call("TYPING", text="DONE: fix bug"),
        call("HOTKEY", keys=["ctrl", "s"]), saved("~/todo.txt"),
    ],
    "editor-empty-file": [
        Click("text", text="token=abc"), call("HOTKEY", keys=["ctrl", "a"]),
        call("PRESS", key="delete"), call("HOTKEY", keys=["ctrl", "s"]), saved("~/secrets.txt"),
    ],
    "editor-write-greeting": [
        Click("text"), call("TYPING", text="Dear team,"), call("HOTKEY", keys=["ctrl", "s"]),
        saved("~/greeting.txt"),
    ],
    "files-new-folder": create_in_file_manager("Folder", "archive"),
    "files-new-file": create_in_file_manager("Empty File", "todo.txt"),
    "files-open-folder": [Click("icon", text="reports", double=True), Await(r"\| /home/user/reports$")],
    "window-close-clock": [TitleButton("xclock", "close"), Await('"xclock"', present=False)],
    "window-close-all": [TitleButton("xlogo", "close"), TitleButton("xeyes", "close"),
                         Await("0 window"), call("WAIT")],
    "window-maximize-logo": [TitleButton("xlogo", "maximize")],
    "window-focus-editor": [TitleButton("Terminal - ", "minimize"), Click("text"),
                            Await(r'^\s*frame ".* - Mousepad" .*\[active')],
    "infeasible-photoshop": [call("FAIL")],
}


@needs_desktop
def test_every_shipped_task_has_a_scripted_solution(tasks: dict) -> None:
    assert set(SOLUTIONS) == set(tasks)


@needs_desktop
@pytest.mark.parametrize("task_id", sorted(SOLUTIONS))
def test_scripted_solution_scores_one(env: DesktopEnv, tasks: dict, task_id: str) -> None:
    """Every shipped task, solved by a script that places each click from the observation's
    text (the AT-SPI tree; the X listing for title bars and X-only apps), never a screenshot."""
    reward, terminated, info = play(env, tasks[task_id], [*SOLUTIONS[task_id], call("DONE")])
    assert terminated and info["ended_by"] in ("DONE", "FAIL")
    assert reward == 1.0, info


@needs_desktop
def test_infeasible_task_scores_one_only_for_fail(env: DesktopEnv, tasks: dict) -> None:
    assert play(env, tasks["infeasible-photoshop"], [call("FAIL")])[0] == 1.0
    assert play(env, tasks["infeasible-photoshop"], [call("DONE")])[0] == 0.0


@needs_desktop
@pytest.mark.parametrize(
    ("task_id", "turns"),
    [
        ("terminal-make-folder", [call("DONE")]),
        ("terminal-write-hello", [call("TYPING", text="echo 'hello' > ~/hello.txt\n"), call("DONE")]),
        ("terminal-write-hello", [call("TYPING", text="echo 'hello world' > ~/hello.txt\n"), call("FAIL")]),
        # Alt+F4 closes the focused xlogo: xclock never takes the keyboard focus.
        ("window-close-clock", [call("HOTKEY", keys=["alt", "f4"]), call("DONE")]),
    ],
    ids=["done-at-once", "wrong-text", "fail-on-feasible", "closed-wrong-window"],
)
def test_wrong_solution_scores_zero(env: DesktopEnv, tasks: dict, task_id: str, turns: list[str]) -> None:
    reward, terminated, _ = play(env, tasks[task_id], turns)
    assert terminated and reward == 0.0


@needs_desktop
def test_invalid_actions_get_feedback_and_the_episode_goes_on(env: DesktopEnv, tasks: dict) -> None:
    env.reset(options={"task": tasks["terminal-make-folder"]})
    bad_turns = {
        call("PRESS", key="entr"): "Did you mean 'enter'",
        call("CLICK", x=5000, y=10): "off the screen",
        call("CLICK", x=10): "give both x and y",
        call("SCROLL", dx=0, dy=0): "nothing to scroll",
        call("HOTKEY", keys="ctrl+c"): "must be of type array",
        call("DRAG", x=1, y=1): "Did you mean 'DRAG_TO'",
        '<tool_call>{"name": "CLICK", "arguments": {x: 1}}</tool_call>': "not valid JSON",
    }
    for turn, expected in bad_turns.items():
        messages, reward, terminated, truncated, _ = env.step(turn)
        assert expected in messages[0]["content"], messages
        assert (reward, terminated, truncated) == (0.0, False, False)
    messages, *_ = env.step("I think I should make a folder.")
    assert messages[0]["role"] == "user" and "No tool call" in messages[0]["content"]
    env.step(call("TYPING", text="mkdir ~/projects\n"))
    _, reward, terminated, _, _ = env.step(call("DONE"))
    assert terminated and reward == 1.0


@needs_desktop
def test_turn_budget_truncates_with_zero_reward(tasks: dict) -> None:
    env = DesktopEnv(max_turns=2)
    try:
        env.reset(options={"task": tasks["terminal-make-folder"]})
        assert env.step(call("MOVE_TO", x=10, y=10))[2:4] == (False, False)
        _, reward, terminated, truncated, _ = env.step(call("MOVE_TO", x=20, y=20))
        assert (reward, terminated, truncated) == (0.0, False, True)
    finally:
        env.close()


@pytest.mark.slow  # starts and resets a real desktop many times
@needs_desktop
def test_gymnasium_check_env_passes() -> None:
    env = gymnasium.make("agent_rl/Desktop-v0", split="heldout")
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


@needs_desktop
def test_osworld_format_task_loads_and_runs(env: DesktopEnv) -> None:
    task = load_task_file(OSWORLD_TASK)
    assert {
        "id",
        "snapshot",
        "instruction",
        "source",
        "config",
        "trajectory",
        "related_apps",
        "evaluator",
        "proxy",
        "fixed_ip",
        "possibility_of_env_change",
    } <= task.keys()
    messages, info = env.reset(options={"task": task})
    assert info["task_id"] == task["id"] and task["instruction"] in messages[-1]["content"]
    assert "app=Xfce4-terminal" in messages[-1]["content"]
    env.step(call("TYPING", text="echo 'water the plants' >> ~/Desktop/todo.txt\n"))
    assert env.step(call("DONE"))[1] == 1.0


def test_unsupported_steps_and_evaluators_are_named_in_the_error() -> None:
    task = json.loads(OSWORLD_TASK.read_text())
    drive = {"type": "googledrive", "parameters": {}}
    with pytest.raises(UnsupportedTaskStep, match="'googledrive'"):
        check_task(task | {"config": [drive]})
    evaluator = task["evaluator"] | {"func": "check_json_settings"}
    with pytest.raises(UnsupportedEvaluator, match="'check_json_settings'"):
        check_task(task | {"evaluator": evaluator})
    getter = task["evaluator"] | {"result": {"type": "vscode_config", "dest": "settings.json"}}
    with pytest.raises(UnsupportedEvaluator, match="'vscode_config'"):
        check_task(task | {"evaluator": getter})


def test_one_check_lists_every_unsupported_piece_of_a_task() -> None:
    task = json.loads(OSWORLD_TASK.read_text())
    broken = task | {
        "config": [{"type": "update_browse_history", "parameters": {}}, *task["config"],
                   {"type": "googledrive", "parameters": {}}],
        "evaluator": task["evaluator"] | {"func": "check_json_settings",
                                          "result": {"type": "vscode_config"}},
    }
    with pytest.raises(UnsupportedTaskParts) as error:
        check_task(broken)
    for piece in ("config[0]", "'update_browse_history'", f"config[{len(task['config']) + 1}]",
                  "'googledrive'", "'check_json_settings'", "'vscode_config'"):
        assert piece in str(error.value)


def test_screen_placeholders_are_filled_in_step_parameters() -> None:
    step = {"command": ["python", "-c", "pyautogui.click({SCREEN_WIDTH_HALF}, {SCREEN_HEIGHT_HALF})"],
            "note": "{SCREEN_WIDTH}x{SCREEN_HEIGHT}", "n": 3}
    assert fill_placeholders(step, 1024, 768) == {
        "command": ["python", "-c", "pyautogui.click(512, 384)"], "note": "1024x768", "n": 3}


def test_the_file_cache_serves_a_url_and_names_what_it_lacks(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENT_RL_HOME", str(tmp_path / "home"))
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(b"\xff\xd8 not really a jpeg")
    url = "https://example.org/photos/a.jpg"
    task = {"id": "t", "config": [{"type": "download", "parameters": {"files": [
        {"url": url, "path": "/home/user/photos/a.jpg"},
        {"url": "https://example.org/b.jpg", "path": "/home/user/photos/b.jpg"}]}}],
        "evaluator": {}}
    assert file_cache.missing_downloads(task) == [url, "https://example.org/b.jpg"]
    subprocess.run([sys.executable, "-m", "agent_rl.cli.main", "desktop", "cache", "add", url,
                    str(photo)], check=True, capture_output=True, env=os.environ.copy())
    assert file_cache.lookup(url).read_bytes() == photo.read_bytes()
    assert file_cache.missing_downloads(task) == ["https://example.org/b.jpg"]


@needs_desktop
def test_a_download_step_is_served_from_the_cache_and_a_missing_url_is_named(
    env: DesktopEnv, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("AGENT_RL_HOME", str(tmp_path))
    notes = tmp_path / "notes.txt"
    notes.write_text("from the cache\n")
    file_cache.add("https://example.org/notes.txt", notes)
    task = {"id": "download-notes", "instruction": "Say done.", "config": [
        {"type": "download", "parameters": {"files": [
            {"url": "https://example.org/notes.txt", "path": "/home/user/notes.txt"}]}}],
        "evaluator": {"func": "exact_match",
                      "result": {"type": "vm_command_line", "command": "cat /home/user/notes.txt",
                                 "shell": True},
                      "expected": {"type": "rule", "rules": {"expected": "from the cache\n"}}}}
    env.reset(options={"task": task})
    assert env.step(call("DONE"))[1] == 1.0
    missing = task | {"config": [{"type": "download", "parameters": {"files": [
        {"url": "https://example.org/absent.txt", "path": "/home/user/absent.txt"}]}}]}
    with pytest.raises(MissingDownload, match="absent.txt.*agent-rl desktop cache add"):
        env.reset(options={"task": missing})


def test_task_splits_cover_three_apps_and_do_not_overlap() -> None:
    train, heldout = load_desktop_tasks("train"), load_desktop_tasks("heldout")
    assert len(train) + len(heldout) >= 20
    assert not set(train["task_id"]) & set(heldout["task_id"])
    apps = set(train["category"]) | set(heldout["category"])
    assert {"terminal", "editor", "file_manager"} <= apps
    on_disk = {path.stem for path in (TASKS_DIR / "examples").glob("*/*.json")}
    assert on_disk == set(train["task_id"]) | set(heldout["task_id"])


@needs_desktop
def test_episodes_have_private_displays_homes_and_no_network(tasks: dict) -> None:
    first, second = DesktopEnv(), DesktopEnv()
    try:
        first.reset(options={"task": tasks["terminal-make-folder"]})
        second.reset(options={"task": tasks["terminal-make-folder"]})
        assert first.display is not None and second.display is not None
        assert first.display != second.display
        first.step(call("TYPING", text="echo secret > ~/mine.txt\n"))
        assert second.step(call("DONE"))[1] == 0.0
        session = first._session
        assert session is not None and (session.home / "mine.txt").read_text() == "secret\n"
        other_socket = f"/tmp/.X11-unix/X{second.display.lstrip(':')}"
        probe = session.run(
            f"ls /home; test -e {other_socket} && echo other-display-visible; "
            "cat /proc/net/dev | grep -c ':' ; DISPLAY="
            + second.display
            + " xdotool getmouselocation || echo no-other-display",
            shell=True,
        )
        assert probe.stdout.split()[:2] == ["user", "1"], probe  # only loopback
        assert "other-display-visible" not in probe.stdout and "no-other-display" in probe.stdout
    finally:
        first.close()
        second.close()


@needs_desktop
def test_recording_writes_html_page_and_contact_sheet(tasks: dict, tmp_path: Path) -> None:
    env = DesktopEnv(record_dir=str(tmp_path))
    try:
        reward, _, info = play(
            env,
            tasks["terminal-write-hello"],
            [*SOLUTIONS["terminal-write-hello"], call("DONE")],
        )
    finally:
        env.close()
    page = Path(info["recording"])
    folder = page.parent
    assert reward == 1.0 and page.name == "index.html"
    # The reset, then play's settling WAIT, the typing and DONE.
    assert sorted(path.name for path in folder.glob("step_*.png")) == [
        "step_000.png",
        "step_001.png",
        "step_002.png",
        "step_003.png",
    ]
    html = page.read_text()
    assert "step_003.png" in html and "TYPING" in html and "hello world" in html
    record = json.loads((folder / "episode.json").read_text())
    assert [step["index"] for step in record["steps"]] == [0, 1, 2, 3]
    assert record["outcome"]["reward"] == 1.0
    assert (folder / "contact_sheet.png").stat().st_size > 1000


@needs_desktop
def test_resets_and_clicks_repeat_cleanly(env: DesktopEnv, tasks: dict) -> None:
    """Two resets of the same task with clicks between: each step answers with an observation
    and the episode goes on. (Reset and step times are `agent-rl bench env --env
    agent_rl/Desktop-v0`'s job: a test must not depend on how busy the machine is.)"""
    for _ in range(2):
        env.reset(options={"task": tasks["editor-append-line"]})
        for x in (100, 200, 300, 400, 500):
            observation, _, terminated, truncated, _ = env.step(call("CLICK", x=x, y=300))
            assert observation and not terminated and not truncated


def test_desktop_programs_are_named_when_missing() -> None:
    from envs.desktop.display import MissingProgramError, require_programs

    with pytest.raises(MissingProgramError, match="no-such-program-xyz"):
        require_programs(["no-such-program-xyz"])


@needs_desktop
def test_task_from_osworld_repository_runs_as_is(env: DesktopEnv, caplog: pytest.LogCaptureFixture) -> None:
    """OSWorld's own Quick Start task, unchanged: it loads, its set-up runs (its pyautogui click
    where `make desktop-apps` installed pyautogui for the desktop, else it fails loudly), and
    its evaluator scores the result."""
    task = load_task_file(TASKS_DIR / "osworld" / "94d95f96-9699-4208-98ba-3c3119edf9c2.json")
    with caplog.at_level("WARNING", logger="envs.desktop.setup_steps"):
        messages, info = env.reset(options={"task": task})
    assert info["task_id"] == task["id"] and task["instruction"] in messages[-1]["content"]
    pyautogui_here = installed_here(App("pyautogui", python_module="pyautogui"))
    assert ("pyautogui" in caplog.text) != pyautogui_here
    _, reward, terminated, _, info = env.step(call("DONE"))
    assert terminated and reward == 0.0 and info["ended_by"] == "DONE"


@needs_desktop
def test_after_a_failed_reset_the_next_reset_works_through_gymnasium_make(tasks: dict) -> None:
    """A task whose set-up step is refused makes reset raise; the env made by gymnasium.make
    (wrappers included) then resets to a good task and steps normally."""
    env = gymnasium.make("agent_rl/Desktop-v0")
    good = task_from_row(tasks["editor-append-line"])
    refused = {**good, "id": "refused", "config": [{"type": "no-such-step", "parameters": {}}]}
    try:
        with pytest.raises(Exception, match="no-such-step"):
            env.reset(options={"task": refused})
        env.reset(options={"task": good})
        observation, _, terminated, _, _ = env.step(call("WAIT"))
        assert observation and not terminated
    finally:
        env.close()


@needs_desktop
def test_apps_run_as_an_unprivileged_user_in_their_home() -> None:
    from envs.desktop.display import DesktopSession

    with DesktopSession() as session:
        result = session.run("whoami; id -u; echo $HOME; grep CapEff /proc/self/status",
                             shell=True)
        user, uid, home, caps = result.stdout.splitlines()
        assert (user, uid, home) == ("user", "1000", "/home/user")
        assert caps.split()[1] == "0000000000000000"  # no capabilities
        session.run("touch ~/made-by-user", shell=True)
        assert (session.home / "made-by-user").is_file()


def _copy_jpgs_task(tmp_path: Path) -> dict:
    """OSWorld's os task 23393935 (copy the .jpg files of photos/ into cpjpg/) in its own
    format: download steps (served here from the offline cache), a pyautogui `execute` with
    screen placeholders, `list_directory` + `check_moved_jpgs`. The URLs are made up."""
    steps = []
    for name in ("photos/trip/a.jpg", "photos/trip/deep/b.jpg", "photos/c.jpg", "photos/d.png"):
        url = f"https://files.example.org/{name}"
        local = tmp_path / name.replace("/", "_")
        local.write_bytes(b"image " + name.encode())
        file_cache.add(url, local)
        steps.append({"type": "download", "parameters": {"files": [
            {"url": url, "path": f"/home/user/Desktop/{name}"}]}})
    return {
        "id": "23393935-copy-jpgs", "snapshot": "os", "related_apps": ["os"],
        "instruction": "Recursively go through the folders of the 'photos' directory and copy "
                       "any .jpg files found into another directory named 'cpjpg'.",
        "config": [*steps, {"type": "launch", "parameters": {"command": ["xfce4-terminal"]}},
                   {"type": "execute", "parameters": {"command": [
                       "python", "-c", "import pyautogui; pyautogui.click({SCREEN_WIDTH_HALF}, "
                       "{SCREEN_HEIGHT_HALF})"]}}],
        "evaluator": {"func": "check_moved_jpgs",
                      "result": {"type": "list_directory", "path": "/home/user/Desktop/cpjpg"},
                      "expected": {"type": "rule", "rules": {"expected": ["a.jpg", "b.jpg",
                                                                          "c.jpg"]}}},
    }


@needs_desktop
def test_the_copy_jpgs_task_scores_a_scripted_solution_1_and_a_no_op_0(
    env: DesktopEnv, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("AGENT_RL_HOME", str(tmp_path))
    task = _copy_jpgs_task(tmp_path)
    env.reset(options={"task": task})
    assert env.step(call("DONE"))[1] == 0.0  # no cpjpg folder
    env.reset(options={"task": task})
    env.step(call("TYPING", text="mkdir ~/Desktop/cpjpg && find ~/Desktop/photos -name '*.jpg' "
                                 "-exec cp {} ~/Desktop/cpjpg/ \\;\n"))
    env.step(call("WAIT"))
    assert env.step(call("DONE"))[1] == 1.0


@needs_desktop
def test_every_supported_step_getter_and_metric_does_its_part(env: DesktopEnv) -> None:
    """One task that uses each supported set-up step, getter and metric the shipped tasks do
    not: every step runs, and it scores 1 only if the files, the command, the launched terminal
    and the closed editor are where OSWorld's steps would leave them."""
    shipped = "shipped beside the tasks\n"
    task = {
        "id": "every-piece", "instruction": "Say done.",
        "config": [
            {"type": "create_file", "parameters": {"path": "/home/user/expected.txt",
                                                   "content": shipped}},
            {"type": "upload_file", "parameters": {"files": [
                {"local_path": "hello.txt", "path": "/home/user/copy/hello.txt"}]}},
            {"type": "open", "parameters": {"path": "/home/user/expected.txt"}},
            {"type": "launch", "parameters": {"command": ["xfce4-terminal"]}},
            {"type": "activate_window", "parameters": {"window_name": "Xfce4-terminal",
                                                       "by_class": True}},
            {"type": "close_window", "parameters": {"window_name": "Mousepad", "by_class": True}},
            {"type": "sleep", "parameters": {"seconds": 0.3}},
            {"type": "command", "parameters": {"command": "echo hi > /home/user/cmd.txt",
                                               "shell": True}},
        ],
        "evaluator": {
            "conj": "and",
            "func": ["compare_text_file", "is_in_list", "literal_match",
                     "check_include_exclude"],
            "result": [
                {"type": "vm_file", "path": "/home/user/copy/hello.txt"},
                {"type": "list_directory", "path": "/home/user"},
                {"type": "vm_command_error", "command": "echo oops >&2", "shell": True},
                {"type": "accessibility_tree"},
            ],
            "expected": [
                {"type": "vm_file", "path": "/home/user/expected.txt"},
                {"type": "rule", "rules": {"expected": "cmd.txt"}},
                {"type": "rule", "rules": "oops\n"},
                {"type": "rule", "rules": {"include": ["app=Xfce4-terminal"], "exclude": ["app=Mousepad"]}},
            ],
            "options": [{}, {}, {}, {}],
        },
    }
    env.reset(options={"task": task})
    assert env.step(call("DONE"))[1] == 1.0


@needs_desktop
def test_the_desktop_menu_is_read_from_the_observation_and_opens_a_terminal(
    env: DesktopEnv,
) -> None:
    """A right-click on the desktop lists the root menu and its items with their centres; a
    scripted agent clicks "Terminal" at the centre the observation gives, nothing else, and the
    observation after that click already shows the terminal (the step waits, bounded, for the
    window of an app chosen from a menu)."""
    task = {"id": "open-terminal", "instruction": "Open a terminal.", "config": [],
            "evaluator": {"func": "check_include_exclude",
                          "result": {"type": "accessibility_tree"},
                          "expected": {"type": "rule", "rules": {"include": ["app=Xfce4-terminal"]}}}}
    env.reset(options={"task": task})
    observation = env.step(call("CLICK", x=900, y=700, button="right"))[0][-1]["content"]
    found = re.search(r'menu item "Terminal" at .* center \((\d+), (\d+)\)', observation)
    assert found, observation
    after = env.step(call("CLICK", x=int(found[1]), y=int(found[2])))[0][-1]["content"]
    assert "app=Xfce4-terminal" in after  # the step waited for the chosen app's window
    assert env.step(call("DONE"))[1] == 1.0


@needs_desktop
def test_reset_takes_a_task_by_index_or_id_as_the_env_contract_says(env: DesktopEnv) -> None:
    first = env.dataset[0]
    assert env.reset(options={"task": 0})[1]["task_id"] == first["task_id"]
    assert env.reset(options={"task": first["task_id"]})[1]["task_id"] == first["task_id"]
    with pytest.raises(ValueError, match="no task 'nope'"):
        env.reset(options={"task": "nope"})


def test_a_cut_off_or_failed_reader_line_is_left_out() -> None:
    from envs.desktop.accessibility import parse_tree

    output = ('{"app": "mousepad", "depth": 0, "role": "application", "name": "mousepad"}\n'
              '{"app": "mousepad", "depth": 1, "error": "the app went away"}\n'
              '{"app": "mousepad", "depth": 1, "role": "frame", "name": "notes.txt", "x": 0, '
              '"y": 0, "w": 10, "h": 10}\n{"app": "mouse')
    nodes = parse_tree(output)
    assert [(n.role, n.box) for n in nodes] == [("application", None), ("frame", (0, 0, 10, 10))]
    assert nodes[1].center == (5, 5)


def test_each_role_falls_back_to_the_x_only_app_when_the_gtk_one_is_missing(monkeypatch) -> None:
    from envs.desktop import apps

    installed = {"xterm", "mousepad"}
    monkeypatch.setattr(apps.shutil, "which", lambda name: name if name in installed else None)
    assert apps.app_command("terminal") == ["xterm"]
    assert apps.app_command("editor") == ["mousepad"]
    assert apps.app_command("file_manager") == ["pcmanfm"]  # neither: the launch names it


@needs_desktop
def test_launching_a_program_that_is_not_installed_names_it(env: DesktopEnv) -> None:
    task = {"id": "no-such-app", "instruction": "Say done.", "evaluator": {"func": "infeasible"},
            "config": [{"type": "launch", "parameters": {"command": ["gimp-9000", "a.png"]}}]}
    with pytest.raises(Exception, match="cannot launch 'gimp-9000': it is not installed"):
        env.reset(options={"task": task})


def test_osworld_gnome_apps_stand_in_for_this_desktops_apps(monkeypatch) -> None:
    from envs.desktop import apps

    installed = {"xfce4-terminal", "mousepad", "pcmanfm"}
    monkeypatch.setattr(apps.shutil, "which", lambda name: name if name in installed else None)
    assert apps.stand_in(["gedit", "/home/user/a.txt"]) == ["mousepad", "/home/user/a.txt"]
    assert apps.stand_in(["nautilus", "/home/user"]) == ["pcmanfm", "/home/user"]
    assert apps.stand_in(["gnome-terminal", "--", "bash", "-c", "ls"]) == [
        "xfce4-terminal", "-x", "bash", "-c", "ls"]
    assert apps.stand_in(["mousepad"]) == ["mousepad"]
    installed.add("gedit")  # the real one, where it is installed
    assert apps.stand_in(["gedit"]) == ["gedit"]
    # Google Chrome is played by Chromium, its flags kept, where only Chromium is installed.
    assert apps.stand_in(["google-chrome", "--remote-debugging-port=1337"]) == [
        "google-chrome", "--remote-debugging-port=1337"]
    installed.add("chromium")
    assert apps.stand_in(["google-chrome", "--remote-debugging-port=1337"]) == [
        "chromium", "--remote-debugging-port=1337"]


@needs_desktop
def test_a_task_that_launches_gedit_gets_the_editor_with_its_file(env: DesktopEnv) -> None:
    task = {"id": "osworld-gedit", "instruction": "Say done.",
            "config": [{"type": "create_file", "parameters": {"path": "/home/user/a.txt",
                                                               "content": "from gedit\n"}},
                       {"type": "launch", "parameters": {"command": ["gedit", "/home/user/a.txt"]}}],
            "evaluator": {"func": "check_include_exclude", "result": {"type": "accessibility_tree"},
                          "expected": {"type": "rule", "rules": {"include": ["a.txt - Mousepad"]}}}}
    if shutil.which("gedit"):
        pytest.skip("gedit is installed here, so it runs itself")
    assert play(env, task, [Await(r"\| from gedit$"), call("DONE")])[0] == 1.0
