"""One episode's private desktop: an Xvfb display, a window manager and sandboxed apps.

Every episode gets a fresh temp folder holding its HOME (seen by apps as `/home/user`, the path
OSWorld tasks use), its `/tmp` and its window manager config. Apps, set-up commands and evaluator
commands run under bubblewrap as `user` (uid 1000 in a user namespace) with no network and
private PID, IPC and UTS namespaces. What they see of the host: `/usr` (and the `/bin`, `/lib*`
links), the few `/etc` entries apps read (`ETC_ENTRIES`), the font cache, and this episode's own
X socket, home and `/tmp`. Not the project, the virtualenv, task files or their evaluators,
`/root`, `/etc/shadow`, other episodes' folders or other displays.

Started by root, the sandbox would be host root outside its user namespace, and every file root
may read would be readable inside. So root starts each episode's sandboxes from a host uid of
the episode's own (`sandbox.host_uids`), which owns the episode's home and `/tmp` and nothing
else; an ordinary user's sandboxes run as that user. Files the env itself puts on the desktop or
reads back for an evaluator go through the sandbox too (`write_file`, `read_file`), so a link an
app planted resolves inside the sandbox's view, never on the host.
"""

from __future__ import annotations

import fcntl
import functools
import itertools
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from envs.desktop.accessibility import (
    BUS_SOCKET,
    SESSION_ENV,
    SYSTEM_PYTHON,
    A11yNode,
    accessibility_missing,
    parse_tree,
    reader_source,
)
from envs.desktop.apps import APT_PACKAGES, DESKTOP_PATH, PYTHON_SITE, app_command
from sandbox import host_uids
from sandbox.backends.bwrap import system_mounts

if TYPE_CHECKING:
    from envs.desktop.chrome import Browser

__all__ = [
    "ETC_ENTRIES",
    "VM_HOME",
    "DesktopFileError",
    "DesktopSession",
    "DesktopStartError",
    "MissingProgramError",
    "require_programs",
]

logger = logging.getLogger(__name__)

VM_HOME = "/home/user"
VM_UID = 1000
# OSWorld's VM home has a Desktop folder, and some of its tasks save there without making it.
HOME_FOLDERS = ("Desktop",)
ROOT_MENU_LABELS = ("Terminal", "Text editor", "File manager")  # the right-click menu, in order
REQUIRED_PROGRAMS = ("Xvfb", "jwm", "xdotool", "bwrap", "setpriv")
# The host's /etc as far as the apps read it: linker cache, fonts, GTK, X and D-Bus config,
# terminfo, time zone, the shells' start-up files, Debian's python3 config, LibreOffice's
# configuration schema (Debian keeps it there; LibreOffice aborts at start without it),
# Chromium's default flags and first-run preferences (its start script sources
# /etc/chromium.d/* and exits without them), GIMP's system-wide configuration (its first start
# copies menurc, gimprc and the rest from /etc/gimp into the profile, and fails without them).
# Entries missing on a host are skipped.
ETC_ENTRIES = ("alternatives", "bash.bashrc", "chromium", "chromium.d", "dbus-1", "fonts",
               "gimp", "gtk-2.0", "gtk-3.0", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
               "libreoffice", "locale.alias", "localtime", "mime.types", "nsswitch.conf",
               "os-release", "profile", "python3", "shells", "terminfo", "timezone", "X11", "xdg")
# The font cache: without it every app start rebuilds it, seconds on a loaded machine.
_HOST_CACHES = ("/var/cache/fontconfig",)
_MAX_READ_BYTES = 64 << 20  # a file an evaluator reads back; more is cut
_X_START_TIMEOUT_S = 30.0  # Xvfb compiles its keymap at start: seconds on a loaded 2-core machine
# Display numbers this process hands out, never twice: an Xvfb that was killed can take a long
# time to finish exiting, and a new server probing that number blocks until it is gone.
_display_numbers = itertools.count(100 + (os.getpid() % 400) * 20)
_WM_START_TIMEOUT_S = 5.0


class DesktopStartError(RuntimeError):
    """The X server or the window manager did not come up."""


class MissingProgramError(RuntimeError):
    """A Debian program the desktop needs is not installed."""


class DesktopFileError(RuntimeError):
    """The env could not put a file on the desktop."""


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
        self.home.mkdir(mode=0o700)
        self.tmp.mkdir(mode=0o700)
        for folder in HOME_FOLDERS:
            (self.home / folder).mkdir()
        (self.tmp / ".X11-unix").mkdir()
        # Apps run as `user` (uid 1000 in a user namespace, no capabilities), as in OSWorld's VM;
        # these files give the uid its name, so `whoami` and shell prompts say `user`.
        (self.root / "passwd").write_text(f"root:x:0:0:root:/root:/bin/sh\n"
                                          f"user:x:{VM_UID}:{VM_UID}:user:{VM_HOME}:/bin/sh\n")
        (self.root / "group").write_text(f"root:x:0:\nuser:x:{VM_UID}:\n")
        # D-Bus wants a machine id; the host's would identify the host.
        (self.root / "machine-id").write_text(secrets.token_hex(16) + "\n")
        self.host_uid = host_uids.take(host_uids.DESKTOP_UID_BASE) if os.geteuid() == 0 else None
        if self.host_uid is not None:
            # The episode's uid may pass through its root folder (to the binds) but not list
            # it, and owns only its home and /tmp.
            self.root.chmod(0o711)
            for path in (self.home, *(self.home / folder for folder in HOME_FOLDERS), self.tmp,
                         self.tmp / ".X11-unix"):
                os.chown(path, self.host_uid, self.host_uid)
        self.display = ""
        # The browser a `launch` of Chrome or Chromium started, with its DevTools connection.
        self.browser: Browser | None = None
        self._processes: list[subprocess.Popen[bytes]] = []
        self._copies = itertools.count()
        # Kills Xvfb and the apps even if the owner never calls close() (a crashed rollout).
        self._finalizer = weakref.finalize(self, _kill_and_remove, self._processes, self.root,
                                           self.host_uid)

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
        self._check_sandbox()
        self._start_window_manager()
        if self.accessibility:
            self._start_session_bus()
        return self

    def _check_sandbox(self) -> None:
        """One empty run, so that a host where the sandbox cannot start says why at once."""
        result = self.run(["true"])
        if result.returncode != 0:
            error = result.stderr.strip()[-300:]
            hint = ("; bubblewrap needs unprivileged user namespaces (sysctl "
                    "kernel.unprivileged_userns_clone=1, and "
                    "kernel.apparmor_restrict_unprivileged_userns=0 where AppArmor has it)"
                    if "namespace" in error or "not permitted" in error else "")
            raise DesktopStartError(f"the desktop's sandbox did not start: {error}{hint}")

    def _start_session_bus(self) -> None:
        """The session D-Bus, in a sandbox like the apps' (see `envs.desktop.accessibility`);
        it starts the accessibility bus when the first app asks for it."""
        (self.tmp / ".runtime").mkdir(mode=0o700)
        if self.host_uid is not None:
            os.chown(self.tmp / ".runtime", self.host_uid, self.host_uid)
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
        """`argv` wrapped in bubblewrap as the unprivileged `user`: read-only /usr and the /etc
        entries apps read, private HOME and /tmp, this display's socket, no network; started
        from the episode's own host uid when we are root."""
        socket = f"/tmp/.X11-unix/X{self.display.lstrip(':')}"
        as_episode_uid = [] if self.host_uid is None else [
            "setpriv", f"--reuid={self.host_uid}", f"--regid={self.host_uid}", "--clear-groups",
            "--"]
        own_files = [arg for name, target in (("passwd", "/etc/passwd"), ("group", "/etc/group"),
                                              ("machine-id", "/etc/machine-id"),
                                              ("machine-id", "/var/lib/dbus/machine-id"))
                     for arg in ("--ro-bind", str(self.root / name), target)]
        session_env = SESSION_ENV.items() if self.accessibility else ()
        # PYTHONPATH: the packages OSWorld's `python -c` steps import (pyautogui), read-only.
        environment = {"HOME": VM_HOME, "USER": "user", "DISPLAY": self.display,
                       "PATH": DESKTOP_PATH, "PYTHONPATH": PYTHON_SITE, "LANG": "C.UTF-8",
                       **dict(session_env)}
        return [
            *as_episode_uid,
            "bwrap",
            *_host_binds(),
            *own_files,
            "--dev", "/dev",
            "--proc", "/proc",
            "--tmpfs", "/home",
            "--bind", str(self.home), VM_HOME,
            "--bind", str(self.tmp), "/tmp",
            "--ro-bind", socket, socket,
            # bwrap's own root (where it made /etc, /var and /home) read-only too.
            "--remount-ro", "/",
            "--unshare-user", "--uid", str(VM_UID), "--gid", str(VM_UID),
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname", "desktop",
            "--new-session",
            "--die-with-parent",
            "--clearenv",
            *(arg for key, value in environment.items() for arg in ("--setenv", key, value)),
            "--chdir", VM_HOME,
            "--",
            *argv,
        ]

    def launch(self, argv: Sequence[str],
               child_fds: Mapping[int, int] | None = None) -> subprocess.Popen[bytes]:
        """Start an app in the sandbox in the background; it is killed at `close()`.

        `child_fds` maps an fd number the app expects (Chromium's debugging pipe is its fds 3
        and 4) to our fd that it should be; the sandbox passes them through.
        """
        wanted = dict(child_fds or {})
        process = subprocess.Popen(
            self.sandbox_argv(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=tuple(wanted),
            preexec_fn=functools.partial(_place_fds, wanted) if wanted else None,
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

    def desktop_processes(self) -> dict[int, str]:
        """Host pid -> name (`comm`) of every process running on the desktop: the launched
        sandboxes and all their descendants. Each sandbox has a PID namespace of its own, so
        this is the one place that sees them all."""
        parents: dict[int, int] = {}
        names: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # exited meanwhile
            name_end = stat.rindex(")")  # a name may hold spaces and parentheses
            names[int(entry.name)] = stat[stat.index("(") + 1:name_end]
            parents[int(entry.name)] = int(stat[name_end + 2:].split()[1])
        found = {process.pid for process in self._processes if process.poll() is None}
        frontier = set(found)
        while frontier:
            frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
            found |= frontier
        return {pid: names[pid] for pid in found if pid in names}

    def signal_programs(self, pattern: str, signal_number: int = signal.SIGTERM,
                        timeout_s: float = 10.0) -> list[int]:
        """`pkill PATTERN` across the desktop's sandboxes: send `signal_number` to each desktop
        process whose name matches the regular expression (searched, as pkill does), then wait
        up to `timeout_s` for them to exit (an app saves its settings as it quits). Returns
        their host pids."""
        matched = [pid for pid, name in self.desktop_processes().items()
                   if re.search(pattern, name)]
        for pid in matched:
            try:
                os.kill(pid, signal_number)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout_s
        while any(Path(f"/proc/{pid}").exists() for pid in matched) and time.monotonic() < deadline:
            time.sleep(0.05)
        return matched

    def wait_for_exit(self, pattern: str, timeout_s: float) -> bool:
        """Wait until no desktop process's name matches `pattern` (an app quit by a key press
        writes its files as it exits); False when one still runs after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while any(re.search(pattern, name) for name in self.desktop_processes().values()):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def xdotool(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run xdotool on this display from the host (input goes through XTEST)."""
        return subprocess.run(
            ["xdotool", *args], env=self.host_env(), capture_output=True, text=True, timeout=30
        )

    def _run_script(self, script: str, *args: str, data: bytes | None = None,
                    timeout_s: float = 30.0) -> subprocess.CompletedProcess[bytes]:
        """`sh -c script sh args...` in the sandbox, bytes in and out: paths travel as
        arguments, never spliced into the script."""
        return subprocess.run(
            self.sandbox_argv(["sh", "-c", script, "sh", *args]),
            capture_output=True,
            timeout=timeout_s,
            **({"input": data} if data is not None else {"stdin": subprocess.DEVNULL}),
        )

    def write_file(self, vm_path: str, data: bytes | str) -> None:
        """Put a file on the desktop as its user would write it (parent folders made).

        Raises:
            ValueError: the path is outside the episode's home and /tmp.
            DesktopFileError: the write failed inside the sandbox.
        """
        path = self.vm_path(vm_path)
        content = data.encode() if isinstance(data, str) else data
        result = self._run_script('mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', path,
                                  data=content)
        if result.returncode != 0:
            raise DesktopFileError(f"could not write {vm_path!r} on the desktop: "
                                   f"{result.stderr.decode(errors='replace').strip()}")

    def read_file(self, vm_path: str) -> bytes | None:
        """A desktop file's bytes as the desktop's user reads them (at most 64 MiB), or None
        when it is not a readable regular file."""
        result = self._run_script('test -f "$1" && test -r "$1" || exit 3; head -c "$2" -- "$1"',
                                  self.vm_path(vm_path), str(_MAX_READ_BYTES))
        return result.stdout if result.returncode == 0 else None

    def copy_out(self, vm_path: str) -> Path | None:
        """A private host copy of a desktop file for an evaluator to read (OSWorld copies files
        out of its VM), or None when there is no such file. The copy lives beside the episode's
        folders, where the desktop cannot reach it."""
        data = self.read_file(vm_path)
        if data is None:
            return None
        folder = self.root / "copied-out"
        folder.mkdir(mode=0o700, exist_ok=True)
        copy = folder / f"{next(self._copies)}-{Path(vm_path).name or 'file'}"
        copy.write_bytes(data)
        return copy

    def is_dir(self, vm_path: str) -> bool:
        """Whether the desktop's user sees a folder at `vm_path`."""
        return self._run_script('test -d "$1"', self.vm_path(vm_path)).returncode == 0

    def list_dir(self, vm_path: str) -> list[str] | None:
        """Sorted names in a desktop folder, or None if it is not a folder."""
        result = self._run_script('test -d "$1" || exit 3; find "$1" -mindepth 1 -maxdepth 1 '
                                  "-printf '%f\\0'", self.vm_path(vm_path))
        if result.returncode != 0:
            return None
        return sorted(name.decode(errors="replace") for name in result.stdout.split(b"\0") if name)

    def vm_path(self, path: str) -> str:
        """`path` (`~` for the home) normalised, checked to lie in the episode's home or /tmp.
        A relative path starts from the home, as in OSWorld, whose VM server resolves task
        paths such as `Downloads/a.pptx` from its working folder, the user's home.

        Raises:
            ValueError: the path is outside the episode's writable folders.
        """
        normal = Path(os.path.normpath(Path(VM_HOME) / path.replace("~", VM_HOME, 1)))
        if any(normal == root or root in normal.parents for root in (Path(VM_HOME), Path("/tmp"))):
            return str(normal)
        raise ValueError(
            f"path {path!r} is outside the episode's folders; use a path under {VM_HOME} or /tmp"
        )

    def close(self) -> None:
        """Kill every process this episode started and delete its temp folder."""
        self._finalizer()
        if self.browser is not None:
            self.browser.devtools.close()


@functools.cache
def _host_binds() -> tuple[str, ...]:
    """bwrap's read-only binds of the host (/usr, the /etc entries, the font cache), looked up
    once per process: every app launch and accessibility read builds a sandbox."""
    host_files = [arg for path in (*(f"/etc/{name}" for name in ETC_ENTRIES), *_HOST_CACHES)
                  if os.path.lexists(path) for arg in ("--ro-bind", path, path)]
    return (*system_mounts(), *host_files)


def _place_fds(wanted: dict[int, int]) -> None:
    """In a child before exec: make each wanted fd number a copy of its source fd. The sources
    are first copied above every wanted number, so that placing one cannot overwrite another's
    source."""
    floor = max(wanted) + 1
    lifted = {number: fcntl.fcntl(source, fcntl.F_DUPFD, floor) for number, source in wanted.items()}
    for number, source in lifted.items():
        os.dup2(source, number)


def _kill_and_remove(processes: list[subprocess.Popen[bytes]], root: Path,
                     host_uid: int | None) -> None:
    """Stop an episode's processes, delete its folder and free its host uid; also runs at exit
    if never closed."""
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
    if host_uid is not None:
        host_uids.give_back(host_uid)


def _free_display_number() -> int:
    """The next display number of this process whose socket and lock file are both absent."""
    while True:
        number = next(_display_numbers)
        if number > 30000:
            raise DesktopStartError("ran out of X display numbers for this process")
        if not (Path(f"/tmp/.X11-unix/X{number}").exists() or Path(f"/tmp/.X{number}-lock").exists()):
            return number
