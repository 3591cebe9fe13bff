"""OSWorld task `config` steps (and evaluator `postconfig` steps), run on an episode's desktop.

Supported step types: `launch`, `execute`, `command`, `sleep`, `open`, `activate_window`,
`close_window`, `download` (served offline from `file_cache`), `upload_file` (from files shipped
beside the tasks), `chrome_open_tabs` and `chrome_close_tabs` (through the browser's DevTools
pipe, `envs.desktop.chrome`) and `create_file`, our way to put a file with given text on the
desktop. GIMP and VLC start as `envs.desktop.gimp` and `envs.desktop.vlc` say, and a plain
`pkill NAME` (launched or executed) signals the matching apps of every sandbox of the desktop.
OSWorld's screen placeholders (`{SCREEN_WIDTH_HALF}`, ...) are filled in every parameter.
Anything else (`googledrive`, ...) is rejected up front, every one by name.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from Xlib import error

from envs.desktop import chrome, file_cache, gimp, office, vlc
from envs.desktop.apps import (
    FILE_VIEWERS,
    OSWORLD_APPS,
    app_command,
    missing_program_hint,
    stand_in,
)
from envs.desktop.display import DesktopSession
from envs.desktop.observe import Observer
from envs.desktop.task_cache import cache_file_name, task_cache_dir

__all__ = [
    "START_TIMEOUTS_S",
    "SUPPORTED_STEPS",
    "SetupError",
    "UnsupportedTaskStep",
    "check_steps",
    "fill_placeholders",
    "run_steps",
    "unsupported_steps",
]

logger = logging.getLogger(__name__)

FILES_DIR = Path(__file__).parent / "tasks" / "files"
_LAUNCH_TIMEOUT_S = 5.0
# Programs OSWorld's tasks launch that open no window (socat relays Chrome's debugging port),
# so nothing is waited for.
WINDOWLESS_PROGRAMS = frozenset({"socat"})
# Seconds to wait for the first window of apps that take longer than a GTK app to show one:
# Thunderbird sets up its profile first (about 10 s on two busy cores), Evince its document.
START_TIMEOUTS_S = {"thunderbird": 60.0, "evince": 30.0}


class UnsupportedTaskStep(ValueError):
    """A task asks for a set-up step type this env does not implement."""


class SetupError(RuntimeError):
    """A supported set-up step could not be carried out (bad parameters, app did not start)."""


StepContext = tuple[DesktopSession, Observer]


def _command_argv(parameters: dict[str, Any]) -> tuple[str | list[str], bool]:
    command = parameters.get("command")
    if not isinstance(command, str | list) or not command:
        raise SetupError(f"step needs a non-empty 'command' (string or list), got {command!r}")
    return command, bool(parameters.get("shell", False))


def _windows(observer: Observer) -> list[tuple[str, str]]:
    """(WM_CLASS class, title) of each managed window, leaving out those closed meanwhile."""
    named = []
    for window in observer.client_windows():
        try:
            wm_class = window.get_wm_class()
            named.append((wm_class[1] if wm_class else "", observer.title(window)))
        except error.BadWindow:
            continue
    return named


def _wait_until(ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Block until `ready()` (the app's window is up), then let the app draw its first frame
    before anyone looks."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise SetupError(f"{what} appeared within {timeout_s:g} s of the launch")
        time.sleep(0.02)
    time.sleep(0.15)


def _start(context: StepContext, argv: list[str], title: str | None = None) -> None:
    """Start `argv` on the desktop and wait for its window: one whose title holds `title` where
    given (OSWorld's `open` waits for the file's name), else a new one. LibreOffice's profile is
    seeded first (`office.seed_profile`), its splash screen does not count as its window, and
    its window must be laid out (`office.wait_until_laid_out`)."""
    session, observer = context
    if shutil.which(argv[0]) is None:
        raise SetupError(f"cannot launch {argv[0]!r}: it is not installed here; "
                         f"{missing_program_hint(argv[0])}")
    if PurePosixPath(argv[0]).name in WINDOWLESS_PROGRAMS:
        session.launch(argv)
        return
    if chrome.is_chrome(argv):
        before = len(observer.client_windows())
        chrome.start_browser(session, argv)
        _wait_until(lambda: len(observer.client_windows()) > before, chrome.START_TIMEOUT_S,
                    f"no window of {argv[0]!r}")
        return
    if gimp.is_gimp(argv):
        session.launch(argv)
        _wait_until(lambda: any(gimp.is_main_window(app, name) for app, name in _windows(observer)),
                    gimp.START_TIMEOUT_S, "no main window of GIMP")
        return
    media_player = vlc.is_vlc(argv)
    if media_player:
        argv = vlc.command(argv)
    libreoffice = office.is_libreoffice(argv)
    if libreoffice:
        office.seed_profile(session)

    def app_windows() -> int:
        if not libreoffice:
            return len(observer.client_windows())
        return sum(1 for app, _ in _windows(observer) if app.startswith("libreoffice-"))

    before = app_windows()
    session.launch(argv)
    timeout_s = (office.START_TIMEOUT_S if libreoffice else
                 vlc.START_TIMEOUT_S if media_player else
                 START_TIMEOUTS_S.get(PurePosixPath(argv[0]).name, _LAUNCH_TIMEOUT_S))
    if title is None:
        _wait_until(lambda: app_windows() > before, timeout_s, f"no new window of {argv[0]!r}")
    else:
        _wait_until(lambda: any(title in name for _, name in _windows(observer)), timeout_s,
                    f"no window whose title holds {title!r}")
    if libreoffice:
        office.wait_until_laid_out(observer)


def _pkill(context: StepContext, command: str | list[str]) -> bool:
    """Play a plain `pkill NAME` (OSWorld's tasks restart apps so) across the desktop's
    sandboxes, which a `pkill` inside one sandbox could not see (`signal_programs`); False
    for any other command."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if len(argv) != 2 or argv[0] != "pkill" or argv[1].startswith("-"):
        return False
    context[0].signal_programs(argv[1])
    return True


def _launch(context: StepContext, parameters: dict[str, Any]) -> None:
    command, shell = _command_argv(parameters)
    if _pkill(context, command):
        return
    if isinstance(command, str):
        argv = ["sh", "-c", command] if shell else shlex.split(command)
    else:
        argv = ["sh", "-c", shlex.join(command)] if shell else command
    if (swapped := stand_in(argv)) != argv:
        logger.info("launching %s in place of %s, which is not installed", swapped[0], argv[0])
        argv = swapped
    _start(context, argv)


def _app_start(command: str | list[str], shell: bool) -> list[str] | None:
    """The argv of the command's one program when a shell command does nothing but export
    variables and then start an OSWorld GNOME app that this desktop lacks (`gnome-terminal`,
    ...) or `xdg-open` one path; else None.

    OSWorld opens its terminal, or a folder, from an `execute` step (`export
    DBUS_SESSION_BUS_ADDRESS=...`, then `gnome-terminal --maximize --working-directory=DIR` or
    `xdg-open DIR`), which returns once the window is up: gnome-terminal hands the window to
    its server and exits, and GNOME's xdg-open asks the session to open the folder. The
    stand-ins here keep running, so they are started as `launch` and `open` start them; the
    VM's session-bus address means nothing here.
    """
    if not shell or not isinstance(command, str):
        return None
    lines = [line.strip() for line in command.splitlines() if line.strip()]
    if not lines or any(not line.startswith("export ") for line in lines[:-1]):
        return None
    argv = shlex.split(lines[-1])
    if argv and argv[0] in OSWORLD_APPS and shutil.which(argv[0]) is None:
        return argv
    if len(argv) == 2 and argv[0] == "xdg-open":
        return argv
    return None


def _execute(context: StepContext, parameters: dict[str, Any]) -> None:
    """OSWorld's `execute` and `command`: run a command to completion. With `stdout` or
    `stderr` (a file name), that stream is kept in the episode's task cache under the name,
    where the evaluator's `cache_file` getter reads it, as OSWorld keeps it in its cache_dir.
    A command that only starts a GNOME app or xdg-opens a path starts it as `launch` or
    `open` would, waiting for its window (`_app_start`)."""
    session, _ = context
    command, shell = _command_argv(parameters)
    if _pkill(context, command):
        return
    if (app := _app_start(command, shell)) is not None:
        if app[0] == "xdg-open":
            _open(context, {"path": app[1]})
        else:
            _start(context, stand_in(app))
        return
    if isinstance(command, list) and command[0] == "python":  # OSWorld's VM names it so
        command = ["python3", *command[1:]]
    result = session.run(command, shell=shell, timeout_s=float(parameters.get("timeout", 10)))
    for stream in ("stdout", "stderr"):
        if name := parameters.get(stream):
            target = task_cache_dir(session) / cache_file_name(name)
            target.write_text(result.stdout if stream == "stdout" else result.stderr)
    if result.returncode != 0:
        # OSWorld does not stop a task when a set-up command fails; we log it loudly.
        hint = (" (`make desktop-apps` installs pyautogui for the desktop)"
                if "No module named 'pyautogui'" in result.stderr else "")
        logger.warning("set-up command %r exited %d: %s%s", command, result.returncode,
                       result.stderr.strip(), hint)


def _sleep(context: StepContext, parameters: dict[str, Any]) -> None:
    time.sleep(min(float(parameters.get("seconds", 1)), 10.0))


def _open(context: StepContext, parameters: dict[str, Any]) -> None:
    """OSWorld's `open` (xdg-open): folders go to the file manager, office documents to
    LibreOffice (`envs.desktop.office`), PDFs to Evince (`apps.FILE_VIEWERS`), other files to
    the text editor."""
    session, _ = context
    path = parameters.get("path")
    if not isinstance(path, str):
        raise SetupError(f"'open' needs a 'path' string, got {path!r}")
    if session.is_dir(path):
        _start(context, [*app_command("file_manager"), path])
    elif office.module_of(path) is not None:
        _start(context, office.open_command(path), title=PurePosixPath(path).name)
    elif viewer := FILE_VIEWERS.get(PurePosixPath(path).suffix.lower()):
        _start(context, [viewer, path])
    else:
        _start(context, [*app_command("editor"), path])


def _window_ids(session: DesktopSession, parameters: dict[str, Any]) -> list[str]:
    name = parameters.get("window_name")
    if not isinstance(name, str):
        raise SetupError(f"step needs a 'window_name' string, got {name!r}")
    if name == "Google Chrome" and shutil.which("google-chrome") is None:
        name = "Chromium"  # its stand-in's windows are titled "<page> - Chromium"
    by = "--class" if parameters.get("by_class") else "--name"
    pattern = f"^{name}$" if parameters.get("strict") else name
    result = session.xdotool(["search", "--onlyvisible", by, pattern])
    return result.stdout.split()


def _activate_window(context: StepContext, parameters: dict[str, Any]) -> None:
    session, _ = context
    for window_id in _window_ids(session, parameters)[:1]:
        session.xdotool(["windowactivate", "--sync", window_id])


def _close_window(context: StepContext, parameters: dict[str, Any]) -> None:
    session, _ = context
    for window_id in _window_ids(session, parameters):
        session.xdotool(["windowclose", window_id])


def _upload_file(context: StepContext, parameters: dict[str, Any]) -> None:
    session, _ = context
    for entry in parameters.get("files", []):
        source = (FILES_DIR / entry["local_path"]).resolve()
        if not source.is_relative_to(FILES_DIR.resolve()):
            raise SetupError(f"upload_file: {entry['local_path']!r} is outside {FILES_DIR}, the "
                             "only folder a task may upload from")
        if not source.is_file():
            raise SetupError(f"upload_file: {source} does not exist; ship it in {FILES_DIR}")
        session.write_file(entry["path"], source.read_bytes())


def _create_file(context: StepContext, parameters: dict[str, Any]) -> None:
    session, _ = context
    path, content = parameters.get("path"), parameters.get("content", "")
    if not isinstance(path, str) or not isinstance(content, str):
        raise SetupError("create_file needs a 'path' string and a 'content' string")
    session.write_file(path, content)


def _download(context: StepContext, parameters: dict[str, Any]) -> None:
    """OSWorld's `download`, served from the offline file cache (`envs.desktop.file_cache`)."""
    session, _ = context
    for entry in parameters.get("files", []):
        url, path = entry.get("url"), entry.get("path")
        if not isinstance(url, str) or not isinstance(path, str):
            raise SetupError(f"download needs a 'url' and a 'path' per file, got {entry!r}")
        source = file_cache.lookup(url)
        if source is None:
            raise file_cache.MissingDownload(file_cache.explain_missing("?", [url]))
        session.write_file(path, source.read_bytes())


def _chrome_open_tabs(context: StepContext, parameters: dict[str, Any]) -> None:
    chrome.open_tabs(context[0], list(parameters.get("urls_to_open", [])))


def _chrome_close_tabs(context: StepContext, parameters: dict[str, Any]) -> None:
    chrome.close_tabs(context[0], list(parameters.get("urls_to_close", [])))


SUPPORTED_STEPS: dict[str, Callable[[StepContext, dict[str, Any]], None]] = {
    "download": _download,
    "launch": _launch,
    "execute": _execute,
    "command": _execute,
    "sleep": _sleep,
    "open": _open,
    "activate_window": _activate_window,
    "close_window": _close_window,
    "upload_file": _upload_file,
    "create_file": _create_file,
    "chrome_open_tabs": _chrome_open_tabs,
    "chrome_close_tabs": _chrome_close_tabs,
}


def unsupported_steps(steps: Sequence[dict[str, Any]], where: str = "config") -> list[str]:
    """One line per step this env cannot run, e.g. "config[0] has unsupported step type
    'googledrive'"; empty when all are supported."""
    problems = []
    for index, step in enumerate(steps):
        step_type = step.get("type") if isinstance(step, dict) else None
        if step_type not in SUPPORTED_STEPS:
            problems.append(f"{where}[{index}] has unsupported step type {step_type!r}")
    return problems


def check_steps(steps: Sequence[dict[str, Any]], task_id: str, where: str = "config") -> None:
    """Raise `UnsupportedTaskStep` naming every step type this env cannot run."""
    if problems := unsupported_steps(steps, where):
        raise UnsupportedTaskStep(f"task {task_id!r}: {'; '.join(problems)}; supported types "
                                  f"are: {', '.join(SUPPORTED_STEPS)}")


def fill_placeholders(value: Any, width: int, height: int) -> Any:
    """OSWorld's screen placeholders (`{SCREEN_WIDTH}`, `{SCREEN_HEIGHT}`, `{SCREEN_WIDTH_HALF}`,
    `{SCREEN_HEIGHT_HALF}`) replaced in every string of a step's parameters."""
    if isinstance(value, str):
        for name, number in (("SCREEN_WIDTH_HALF", width // 2), ("SCREEN_HEIGHT_HALF", height // 2),
                             ("SCREEN_WIDTH", width), ("SCREEN_HEIGHT", height)):
            value = value.replace("{" + name + "}", str(number))
        return value
    if isinstance(value, list):
        return [fill_placeholders(item, width, height) for item in value]
    if isinstance(value, dict):
        return {key: fill_placeholders(item, width, height) for key, item in value.items()}
    return value


def run_steps(context: StepContext, steps: Sequence[dict[str, Any]]) -> None:
    """Run set-up steps in order (call `check_steps` first)."""
    session, _ = context
    for step in steps:
        parameters = fill_placeholders(dict(step.get("parameters", {})), session.width,
                                       session.height)
        SUPPORTED_STEPS[step["type"]](context, parameters)
