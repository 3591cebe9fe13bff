"""One episode's private desktop: an Xvfb display, a window manager and sandboxed apps.

Every episode gets a fresh temp folder holding its HOME (seen by apps as `/home/user`, the path
OSWorld tasks use), its `/tmp` and its window manager config. Apps, set-up commands and evaluator
commands run under bubblewrap with no network and a private PID namespace; the only host
resources they see are a read-only root file system and this episode's own X socket, so they
cannot reach other episodes' displays or files.
"""

from __future__ import annotations

import itertools
import logging
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

from envs.desktop.accessibility import (
    BUS_SOCKET,
    SESSION_ENV,
    SYSTEM_PYTHON,
    A11yNode,
    accessibility_missing,
    parse_tree,
    reader_source,
)
from envs.desktop.apps import APT_PACKAGES, app_command

__all__ = [
    "VM_HOME",
    "DesktopSession",
    "DesktopStartError",
    "MissingProgramError",
    "require_programs",
]

logger = logging.getLogger(__name__)

VM_HOME = "/home/user"
VM_UID = 1000
ROOT_MENU_LABELS = ("Terminal", "Text editor", "File manager")  # the right-click menu, in order
REQUIRED_PROGRAMS = ("Xvfb", "jwm", "xdotool", "bwrap")
_X_START_TIMEOUT_S = 30.0  # Xvfb compiles its keymap at start: seconds on a loaded 2-core machine
# Display numbers this process hands out, never twice: an Xvfb that was killed can take a long
# time to finish exiting, and a new server probing that number blocks until it is gone.
_display_numbers = itertools.count(100 + (os.getpid() % 400) * 20)
_WM_START_TIMEOUT_S = 5.0


class DesktopStartError(RuntimeError):
    """The X server or the window manager did not come up."""


class MissingProgramError(RuntimeError):
    """A Debian program the desktop needs is not installed."""


def require_programs(programs: Sequence[str] = REQUIRED_PROGRAMS) -> None:
    """Fail early, naming the apt packages to install, when a desktop program is missing."""
    missing = [program for program in programs if shutil.which(program) is None]
    if missing:
        raise MissingProgramError(
            f"the desktop env needs {', '.join(missing)} on PATH; install them with "
            f"`apt-get install -y --no-install-recommends {APT_PACKAGES}`"
        )


def _jwm_config(menu_commands: dict[str, str]) -> str:
    """A JWM config: decorated windows, a right-click root menu, Alt+F4 / Alt+Tab; no panel.

    No tray keeps the screen deterministic (JWM's tray clock would change every minute).
    """
    programs = "\n".join(
        f'    <Program label="{label}">{command}</Program>' for label, command in menu_commands.items()
    )
    return f"""<?xml version="1.0"?>
<JWM>
  <RootMenu onroot="3">
{programs}
  </RootMenu>
  <FocusModel>click</FocusModel>
  <SnapMode distance="0">none</SnapMode>
  <MoveMode>opaque</MoveMode>
  <ResizeMode>opaque</ResizeMode>
  <Desktops width="1" height="1"/>
  <Key mask="A" key="F4">close</Key>
  <Key mask="A" key="Tab">nextstacked</Key>
  <Key mask="A" key="F10">maximize</Key>
  <Key mask="A" key="F9">minimize</Key>
</JWM>
"""


class DesktopSession:
    """A running private desktop. Use `start()` then `close()` (or as a context manager).

    Attributes:
        width, height: the virtual screen size in pixels.
        root: the episode's temp folder on the host.
        home: the host folder apps see as `/home/user`.
        tmp: the host folder apps see as `/tmp`.
        display: the X display name, e.g. ":3", valid once started.
    """

    def __init__(self, width: int = 1024, height: int = 768, parent_dir: str | None = None,
                 accessibility: bool = True):
        require_programs()
        missing = accessibility_missing() if accessibility else "not asked for"
        if accessibility and missing:
            logger.info("no accessibility tree on this desktop: %s", missing)
        self.accessibility = missing is None
        self.width = width
        self.height = height
        self.root = Path(tempfile.mkdtemp(prefix="agent-rl-desktop-", dir=parent_dir))
        self.home = self.root / "home"
        self.tmp = self.root / "tmp"
        self.home.mkdir()
        (self.tmp / ".X11-unix").mkdir(parents=True)
        # Apps run as `user` (uid 1000 in a user namespace, no capabilities), as in OSWorld's VM;
        # these files give the uid its name, so `whoami` and shell prompts say `user`.
        (self.root / "passwd").write_text(f"root:x:0:0:root:/root:/bin/sh\n"
                                          f"user:x:{VM_UID}:{VM_UID}:user:{VM_HOME}:/bin/sh\n")
        (self.root / "group").write_text(f"root:x:0:\nuser:x:{VM_UID}:\n")
        self.display = ""
        self._processes: list[subprocess.Popen[bytes]] = []
        # Kills Xvfb and the apps even if the owner never calls close() (a crashed rollout).
        self._finalizer = weakref.finalize(self, _kill_and_remove, self._processes, self.root)

    def __enter__(self) -> DesktopSession:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> DesktopSession:
        """Start Xvfb on a free display number, then the window manager."""
        read_fd, write_fd = os.pipe()
        try:
            xvfb = subprocess.Popen(
                [
                    "Xvfb",
                    f":{_free_display_number()}",
                    "-displayfd",
                    str(write_fd),
                    "-screen",
                    "0",
                    f"{self.width}x{self.height}x24",
                    "-nolisten",
                    "tcp",
                    "-noreset",
                    # Sandboxed clients live in another IPC namespace: MIT-SHM would fail there.
                    "-extension",
                    "MIT-SHM",
                ],
                pass_fds=(write_fd,),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            os.close(write_fd)
            write_fd = -1
            self._processes.append(xvfb)
            number = self._read_display_number(read_fd, xvfb)
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)
        self.display = f":{number}"
        self._start_window_manager()
        if self.accessibility:
            self._start_session_bus()
        return self

    def _start_session_bus(self) -> None:
        """The session D-Bus, in a sandbox like the apps' (see `envs.desktop.accessibility`);
        it starts the accessibility bus when the first app asks for it."""
        (self.tmp / ".runtime").mkdir(mode=0o700)
        self.launch(["dbus-daemon", "--session", "--nofork", "--nopidfile",
                     f"--address=unix:path=/tmp/{BUS_SOCKET}"])
        deadline = time.monotonic() + _WM_START_TIMEOUT_S
        while not (self.tmp / BUS_SOCKET).exists():
            if time.monotonic() > deadline:
                raise DesktopStartError(f"the session D-Bus did not start on {self.display}")
            time.sleep(0.02)

    def read_accessibility(self, timeout_s: float = 15.0) -> list[A11yNode]:
        """The apps' AT-SPI tree now (empty without accessibility or when the read fails)."""
        if not self.accessibility:
            return []
        try:
            result = self.run([SYSTEM_PYTHON, "-"], timeout_s=timeout_s, input=reader_source())
        except subprocess.TimeoutExpired:
            logger.warning("the accessibility tree took over %.0f s to read", timeout_s)
            return []
        if result.returncode != 0:
            logger.warning("reading the accessibility tree failed: %s", result.stderr[-500:])
        return parse_tree(result.stdout)

    def _read_display_number(self, read_fd: int, xvfb: subprocess.Popen[bytes]) -> int:
        deadline = time.monotonic() + _X_START_TIMEOUT_S
        data = b""
        os.set_blocking(read_fd, False)
        while not data.endswith(b"\n"):
            if xvfb.poll() is not None:
                raise DesktopStartError(f"Xvfb exited with status {xvfb.returncode} at start")
            if time.monotonic() > deadline:
                raise DesktopStartError(f"Xvfb gave no display number in {_X_START_TIMEOUT_S} s")
            try:
                data += os.read(read_fd, 64)
            except BlockingIOError:
                time.sleep(0.005)
        return int(data.strip())

    def _start_window_manager(self) -> None:
        apps = {"Terminal": app_command("terminal"), "Text editor": app_command("editor"),
                "File manager": [*app_command("file_manager"), VM_HOME]}
        menu = {label: shlex.join(self.sandbox_argv(apps[label])) for label in ROOT_MENU_LABELS}
        config = self.root / "jwmrc"
        config.write_text(_jwm_config(menu))
        self._processes.append(
            subprocess.Popen(
                ["jwm", "-f", str(config)],
                env=self.host_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        deadline = time.monotonic() + _WM_START_TIMEOUT_S
        while not self._window_manager_ready():
            if time.monotonic() > deadline:
                raise DesktopStartError(f"jwm did not start on {self.display}")
            time.sleep(0.02)

    def _window_manager_ready(self) -> bool:
        result = subprocess.run(
            ["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"],
            env=self.host_env(),
            capture_output=True,
            text=True,
        )
        return "window id" in result.stdout

    def host_env(self) -> dict[str, str]:
        """Environment for host-side X tools (xdotool, xprop) talking to this display."""
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DISPLAY": self.display}

    def sandbox_argv(self, argv: Sequence[str]) -> list[str]:
        """`argv` wrapped in bubblewrap: read-only root, private HOME and /tmp, no network, run
        as the unprivileged `user`."""
        socket = f"/tmp/.X11-unix/X{self.display.lstrip(':')}"
        return [
            "bwrap",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/home",
            "--bind",
            str(self.home),
            VM_HOME,
            "--bind",
            str(self.tmp),
            "/tmp",
            "--ro-bind",
            socket,
            socket,
            "--ro-bind",
            str(self.root / "passwd"),
            "/etc/passwd",
            "--ro-bind",
            str(self.root / "group"),
            "/etc/group",
            "--unshare-user",
            "--uid",
            str(VM_UID),
            "--gid",
            str(VM_UID),
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--die-with-parent",
            "--clearenv",
            "--setenv",
            "HOME",
            VM_HOME,
            "--setenv",
            "USER",
            "user",
            "--setenv",
            "DISPLAY",
            self.display,
            "--setenv",
            "PATH",
            "/usr/local/bin:/usr/bin:/bin",
            "--setenv",
            "LANG",
            "C.UTF-8",
            *(arg for key, value in (SESSION_ENV.items() if self.accessibility else ())
              for arg in ("--setenv", key, value)),
            "--chdir",
            VM_HOME,
            "--",
            *argv,
        ]

    def launch(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start an app in the sandbox in the background; it is killed at `close()`."""
        process = subprocess.Popen(
            self.sandbox_argv(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._processes.append(process)
        return process

    def run(
        self, command: str | Sequence[str], shell: bool = False, timeout_s: float = 10.0,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command to completion in the sandbox (a string runs through `sh -c`), with
        `input` on its standard input."""
        if isinstance(command, str):
            argv = ["sh", "-c", command] if shell else shlex.split(command)
        else:
            argv = ["sh", "-c", shlex.join(command)] if shell else list(command)
        return subprocess.run(
            self.sandbox_argv(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            **({"input": input} if input is not None else {"stdin": subprocess.DEVNULL}),
        )

    def xdotool(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run xdotool on this display from the host (input goes through XTEST)."""
        return subprocess.run(
            ["xdotool", *args], env=self.host_env(), capture_output=True, text=True, timeout=30
        )

    def host_path(self, vm_path: str) -> Path:
        """The host path of a path inside the desktop (`/home/user/...` or `/tmp/...`).

        Raises:
            ValueError: the path is outside the episode's writable folders.
        """
        path = Path(os.path.normpath(vm_path.replace("~", VM_HOME, 1)))
        for vm_root, host_root in ((Path(VM_HOME), self.home), (Path("/tmp"), self.tmp)):
            if path == vm_root or vm_root in path.parents:
                return host_root / path.relative_to(vm_root)
        raise ValueError(
            f"path {vm_path!r} is outside the episode's folders; use a path under {VM_HOME} or /tmp"
        )

    def close(self) -> None:
        """Kill every process this episode started and delete its temp folder."""
        self._finalizer()


def _kill_and_remove(processes: list[subprocess.Popen[bytes]], root: Path) -> None:
    """Stop an episode's processes and delete its folder; also runs at exit if never closed."""
    for process in reversed(processes):
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for process in processes:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            logger.warning("process %s did not exit after SIGKILL", process.args[0])
    processes.clear()
    shutil.rmtree(root, ignore_errors=True)


def _free_display_number() -> int:
    """The next display number of this process whose socket and lock file are both absent."""
    while True:
        number = next(_display_numbers)
        if number > 30000:
            raise DesktopStartError("ran out of X display numbers for this process")
        if not (Path(f"/tmp/.X11-unix/X{number}").exists() or Path(f"/tmp/.X{number}-lock").exists()):
            return number
