"""Escapes from the desktop's sandbox, tried the way a policy or a hostile task file would try
them: commands typed at the desktop's terminal through the env's actions, and set-up steps of a
task. Each must fail: the host's files, the network, other episodes' displays and folders, and
host processes stay out of reach, and no sandboxed process is host root."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.desktop import DesktopEnv, file_cache
from envs.desktop.apps import APT_PACKAGES, PYTHON_SITE
from envs.desktop.display import REQUIRED_PROGRAMS, DesktopFileError, DesktopSession
from envs.desktop.setup_steps import SetupError
from envs.desktop.tasks import TASKS_DIR
from envs.tasks import DATA_DIR
from envs.tool_calls import format_tool_call

PROJECT = Path(__file__).resolve().parents[3]
A_TASK_FILE = next(TASKS_DIR.glob("examples/*/*.json"))
HELDOUT_FILE = DATA_DIR / "arithmetic_heldout.jsonl"

_missing = [program for program in (*REQUIRED_PROGRAMS, "xfce4-terminal", "python3")
            if not shutil.which(program)]
pytestmark = pytest.mark.skipif(
    bool(_missing),
    reason=f"desktop programs missing: {', '.join(_missing)} (apt-get install -y "
    f"--no-install-recommends {APT_PACKAGES})",
)

REPORT = "/home/user/report.txt"


def call(name: str, **arguments: object) -> str:
    return format_tool_call(name, arguments)


def a_task(config: list[dict] | None = None, evaluator: dict | None = None) -> dict:
    """A task in OSWorld's format: by default a terminal and an evaluator that reads a file."""
    return {
        "id": "escape-probe", "snapshot": "os", "related_apps": ["os"],
        "instruction": "Do nothing.",
        "config": config if config is not None else [
            {"type": "launch", "parameters": {"command": ["xfce4-terminal"]}}],
        "evaluator": evaluator or {
            "func": "check_include_exclude",
            "result": {"type": "vm_command_line", "command": "cat ~/report.txt", "shell": True},
            "expected": {"type": "rule", "rules": {"include": ["never written"]}}},
    }


@pytest.fixture
def env() -> Iterator[DesktopEnv]:
    desktop = DesktopEnv()
    yield desktop
    desktop.close()


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A TCP server on the host's loopback, which the sandbox must not reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def host_process() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "300"])
    yield process
    process.kill()
    process.wait()


def type_probes(env: DesktopEnv, probes: dict[str, str]) -> dict[str, str]:
    """Type each probe at the terminal as `cmd && echo NAME:escaped || echo NAME:blocked`, then
    read back what each said."""
    lines = [f"( {command} ) >/dev/null 2>&1 && echo {name}:escaped >> {REPORT} "
             f"|| echo {name}:blocked >> {REPORT}" for name, command in probes.items()]
    for line in [*lines, f"echo done >> {REPORT}"]:
        env.step(call("TYPING", text=line + "\n"))
    session = env._session
    assert session is not None
    deadline = time.monotonic() + 60
    while b"done" not in (session.read_file(REPORT) or b""):
        assert time.monotonic() < deadline, "the typed probes never finished"
        time.sleep(0.2)
    report = (session.read_file(REPORT) or b"").decode()
    return dict(line.split(":", 1) for line in report.splitlines() if ":" in line)


def test_commands_typed_at_the_terminal_cannot_read_host_files(env: DesktopEnv) -> None:
    env.reset(options={"task": a_task()})
    probes = {
        "shadow": "cat /etc/shadow",
        "root_home": "ls /root",
        "project": f"ls {PROJECT}",
        "task_evaluators": f"cat {A_TASK_FILE}",
        "heldout_answers": f"cat {HELDOUT_FILE}",
        "virtualenv": f"ls {sys.prefix}",
        "interpreter_prefix": f"ls {sys.base_prefix}/lib",
        "host_tmp": "ls -d /tmp/agent-rl-desktop-*",
        "ssh_keys": "ls /etc/ssh",
        "sysfs": "ls /sys/class",
    }
    report = type_probes(env, probes | {"control": "cat /etc/passwd /usr/bin/python3"})
    assert report.pop("control") == "escaped"  # what the apps need is there
    assert report == dict.fromkeys(probes, "blocked")


def test_commands_typed_at_the_terminal_cannot_write_outside_home_or_tmp(env: DesktopEnv) -> None:
    env.reset(options={"task": a_task()})
    targets = ["/usr/agent-rl-escape", "/etc/agent-rl-escape", "/agent-rl-escape",
               "/var/agent-rl-escape", f"{PROJECT}/agent-rl-escape"]
    report = type_probes(env, {f"write{index}": f"touch {target}"
                               for index, target in enumerate(targets)}
                         | {"home": "touch ~/fine", "tmp": "touch /tmp/fine"})
    assert report.pop("home") == report.pop("tmp") == "escaped"  # the private folders work
    assert set(report.values()) == {"blocked"}
    assert not any(Path(target).exists() for target in targets)


def test_commands_typed_at_the_terminal_reach_no_network_display_or_host_process(
        env: DesktopEnv, host_listener: int, host_process: subprocess.Popen[bytes]) -> None:
    with DesktopSession() as other:
        env.reset(options={"task": a_task()})
        connect = (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
                   f"{host_listener}), timeout=2)\"")
        ptrace = (f"python3 -c \"import ctypes, sys; sys.exit(ctypes.CDLL(None).ptrace(16, "
                  f"{host_process.pid}, 0, 0) != 0)\"")
        report = type_probes(env, {
            "loopback": connect,
            "internet": "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), "
                        "timeout=2)\"",
            "other_display": f"DISPLAY={other.display} xdotool getmouselocation",
            "other_home": f"ls {other.home}",
            "signal": f"kill -9 {host_process.pid}",
            "trace": ptrace,
            "see_host_pid": f"test -e /proc/{host_process.pid}/status",
            "control": "python3 -c pass && DISPLAY=$DISPLAY xdotool getmouselocation",
        })
    assert report.pop("control") == "escaped"  # python3 and the own display work
    assert report == dict.fromkeys(report, "blocked") and len(report) == 7
    assert host_process.poll() is None


def _sandboxed_processes(display: str) -> list[int]:
    """Host pids of processes with this display in their environment that live in another PID
    namespace than ours: the episode's sandboxed apps."""
    own_namespace = os.readlink("/proc/self/ns/pid")
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and os.readlink(entry / "ns/pid") != own_namespace
                    and f"DISPLAY={display}".encode() in (entry / "environ").read_bytes()):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _descendants(root: int) -> list[int]:
    """Host pids of every process below `root`."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
        except OSError:
            continue
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _host_uid(pid: int) -> int:
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("Uid:"))
    return int(line.split()[1])


def test_no_app_of_the_desktop_is_host_root(env: DesktopEnv) -> None:
    env.reset(options={"task": a_task()})
    session = env._session
    assert session is not None and session.display
    pids = _sandboxed_processes(session.display)
    assert len(pids) >= 2  # the session bus and the terminal at least
    expected = session.host_uid if os.geteuid() == 0 else os.geteuid()
    assert {_host_uid(pid) for pid in pids} == {expected}
    assert expected != 0


@pytest.mark.skipif(shutil.which("soffice") is None,
                    reason="LibreOffice is not installed (`make desktop-apps`)")
def test_libreoffice_runs_as_the_episode_user_and_writes_only_its_home(env: DesktopEnv) -> None:
    escape = ("touch /etc/libreoffice/escape; touch /usr/lib/libreoffice/escape; "
              f"touch {PYTHON_SITE}/escape; cat /etc/libreoffice/sofficerc > ~/config-read")
    env.reset(options={"task": a_task(config=[
        {"type": "launch", "parameters": {"command": ["libreoffice", "--writer"]}},
        {"type": "execute", "parameters": {"command": escape, "shell": True}}])})
    session = env._session
    assert session is not None and session.display
    office = [pid for pid in _sandboxed_processes(session.display)
              if Path(f"/proc/{pid}/comm").read_text().strip() == "soffice.bin"]
    expected = session.host_uid if os.geteuid() == 0 else os.geteuid()
    assert office and {_host_uid(pid) for pid in office} == {expected} and expected != 0
    # Its configuration is read-only to it; its profile lives in the episode's home.
    assert b"[Bootstrap]" in (session.read_file("~/config-read") or b"")
    assert not any(Path(folder, "escape").exists()
                   for folder in ("/etc/libreoffice", "/usr/lib/libreoffice", PYTHON_SITE))
    assert session.is_dir("~/.config/libreoffice/4/user")


@pytest.mark.slow
@pytest.mark.skipif(any(shutil.which(program) is None for program in ("gimp", "vlc", "socat")),
                    reason="GIMP, VLC or socat is not installed (`make desktop-apps`)")
def test_gimp_and_vlc_run_as_the_episode_user_with_their_files_in_its_home(
        env: DesktopEnv) -> None:
    """GIMP sees only /etc/gimp of the host's app configuration, read-only; VLC's web
    interface, on for OSWorld's getter, listens on the sandbox's own loopback, not the host's;
    `pkill vlc` reaches VLC across the sandboxes and nothing of the host."""
    escape = "touch /etc/gimp/escape; cat /etc/gimp/2.0/gimprc > ~/gimprc-read"
    env.reset(options={"task": a_task(config=[
        {"type": "launch", "parameters": {"command": ["gimp"]}},
        {"type": "launch", "parameters": {"command": ["vlc"]}},
        {"type": "execute", "parameters": {"command": escape, "shell": True}}])})
    session = env._session
    assert session is not None and session.display
    apps = {pid: name for pid, name in session.desktop_processes().items()
            if name.startswith("gimp") or name == "vlc"}
    expected = session.host_uid if os.geteuid() == 0 else os.geteuid()
    assert {name[:4] for name in apps.values()} == {"gimp", "vlc"}
    assert {_host_uid(pid) for pid in apps} == {expected} and expected != 0
    assert b"gimprc" in (session.read_file("~/gimprc-read") or b"")
    assert not Path("/etc/gimp/escape").exists()
    assert session.is_dir("~/.config/GIMP/2.10")
    assert not _listener_is_vlc()
    assert session.signal_programs("^vlc$")
    assert "vlc" not in session.desktop_processes().values()


def _listener_is_vlc() -> bool:
    """Whether the host's port 8080 belongs to a VLC (only a leak would put one there)."""
    result = subprocess.run(["ss", "-ltnpH", "sport = :8080"], capture_output=True, text=True)
    return "vlc" in result.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="Chromium is not installed (`make desktop-apps`)")
def test_chromium_runs_as_the_episode_user_and_reaches_no_network_or_host_file(
        env: DesktopEnv) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    env.reset(options={"task": a_task(config=[
        {"type": "launch", "parameters": {"command": ["google-chrome",
                                                      "--remote-debugging-port=1337"]}},
        {"type": "chrome_open_tabs", "parameters": {"urls_to_open": [
            f"http://127.0.0.1:{port}/", f"file://{PROJECT}/pyproject.toml",
            "file:///etc/shadow"]}}])})
    session = env._session
    assert session is not None and session.display and session.browser is not None
    # Chromium writes over its environment (its process titles), so its processes are found
    # as the descendants of the sandbox it was started in.
    browser = [pid for pid in _descendants(session.browser.process.pid)
               if Path(f"/proc/{pid}/comm").read_text().strip() == "chromium"]
    expected = session.host_uid if os.geteuid() == 0 else os.geteuid()
    assert browser and {_host_uid(pid) for pid in browser} == {expected} and expected != 0
    # Each tab keeps its URL, and none of them got through: no connection reached the host's
    # listener, and neither file was there to read.
    tabs = session.browser.tabs()
    assert len(tabs) == 3
    for tab in tabs:
        text = session.browser.evaluate(tab["targetId"], "document.body.innerText") or ""
        assert 'name = "agent-rl"' not in text and "root:" not in text
    with pytest.raises(BlockingIOError):
        server.accept()
    server.close()
    # Its debugging port listens on the sandbox's own loopback, not the host's.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", 1337), timeout=2).close()
    # Its profile is in the episode's home.
    assert session.is_dir("~/.config/google-chrome/Default")


def test_a_hostile_set_up_step_reads_nothing_of_the_host(env: DesktopEnv) -> None:
    steal = ("cat /etc/shadow /root/.bashrc > ~/stolen 2>&1; ls / > ~/listing; "
             "ln -s /etc/shadow ~/shadow-link; ln -s /root ~/root-link")
    task = a_task(
        config=[{"type": "execute", "parameters": {"command": steal, "shell": True}}],
        evaluator={"func": "compare_text_file",
                   "result": {"type": "vm_file", "path": "/home/user/shadow-link"},
                   "expected": {"type": "vm_file", "path": "/home/user/shadow-link"}})
    env.reset(options={"task": task})
    session = env._session
    assert session is not None
    stolen = (session.read_file("~/stolen") or b"").decode()
    assert "No such file" in stolen and "root:" not in stolen
    listing = set((session.read_file("~/listing") or b"").decode().split())
    assert listing <= {"bin", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "proc",
                       "sbin", "tmp", "usr", "var"}
    # The evaluator's getters follow the links inside the sandbox, not on the host.
    assert session.copy_out("~/shadow-link") is None
    assert session.list_dir("~/root-link") is None
    _, reward, terminated, _, _ = env.step(call("DONE"))
    assert terminated and reward == 0.0


def test_a_hostile_task_cannot_write_through_a_planted_link(env: DesktopEnv,
                                                            tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("original\n")
    plant = f"ln -s {victim} ~/plant; ln -s /etc/agent-rl-escape ~/plant2"
    for path in ("/home/user/plant", "/home/user/plant2"):
        task = a_task(config=[
            {"type": "execute", "parameters": {"command": plant, "shell": True}},
            {"type": "create_file", "parameters": {"path": path, "content": "overwritten\n"}}])
        with pytest.raises(DesktopFileError, match="could not write"):
            env.reset(options={"task": task})
    assert victim.read_text() == "original\n"
    assert not Path("/etc/agent-rl-escape").exists()


def test_a_task_may_upload_only_from_the_shipped_files(env: DesktopEnv) -> None:
    task = a_task(config=[{"type": "upload_file", "parameters": {"files": [
        {"local_path": "../../../../../../etc/shadow", "path": "/home/user/shadow"}]}}])
    with pytest.raises(SetupError, match="outside .* the only folder a task may upload from"):
        env.reset(options={"task": task})


def test_files_the_env_puts_on_the_desktop_belong_to_the_desktop_user() -> None:
    with DesktopSession() as session:
        session.write_file("~/Documents/notes.txt", "hello\n")
        assert session.read_file("/home/user/Documents/notes.txt") == b"hello\n"
        assert session.list_dir("~/Documents") == ["notes.txt"]
        result = session.run("echo more >> ~/Documents/notes.txt && cat ~/Documents/notes.txt",
                             shell=True)
        assert result.stdout == "hello\nmore\n"
        with pytest.raises(ValueError, match="outside the episode's folders"):
            session.write_file("/etc/agent-rl-escape", "x")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("thunderbird") is None,
                    reason="Thunderbird is not installed (`make desktop-apps`)")
def test_thunderbird_runs_as_the_episode_user_with_its_profile_in_the_home(
        env: DesktopEnv) -> None:
    escape = ("touch /usr/lib/thunderbird/escape; touch /etc/thunderbird/escape; "
              "cat /etc/shadow > ~/shadow-read")
    env.reset(options={"task": a_task(config=[
        {"type": "launch", "parameters": {"command": ["/usr/bin/thunderbird"]}},
        {"type": "execute", "parameters": {"command": escape, "shell": True}}])})
    session = env._session
    assert session is not None and session.display
    mail = [pid for pid in _sandboxed_processes(session.display)
            if Path(f"/proc/{pid}/comm").read_text().strip() == "thunderbird"]
    expected = session.host_uid if os.geteuid() == 0 else os.geteuid()
    assert mail and {_host_uid(pid) for pid in mail} == {expected} and expected != 0
    assert not any(Path(folder, "escape").exists()
                   for folder in ("/usr/lib/thunderbird", "/etc/thunderbird"))
    assert not session.read_file("~/shadow-read")
    # The profile it made (OSWorld's tasks unpack theirs there) is in the episode's home.
    assert b"[Profile0]" in (session.read_file("~/.thunderbird/profiles.ini") or b"")


def _mount_options(pid: int, path: str) -> list[str]:
    """The options of the mount that holds `path` in process `pid`'s mount namespace (the
    last-mounted one with the longest mount point above it)."""
    options: list[str] = []
    longest = -1
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        mount_point = fields[4]
        if (path == mount_point or path.startswith(mount_point.rstrip("/") + "/")) and len(
                mount_point) >= longest:
            longest, options = len(mount_point), fields[5].split(",")
    return options


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("evince") is None,
                    reason="Evince is not installed (`make desktop-apps`)")
def test_evince_runs_as_the_episode_user_and_sees_only_its_document_of_the_host(
        env: DesktopEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Evince's own namespaces are read through /proc, so what is checked is what Evince
    itself could reach, not what another sandbox of the episode could."""
    from tests.envs.desktop.test_file_metrics import write_pdf

    monkeypatch.setenv("AGENT_RL_HOME", str(tmp_path / "agent-rl-home"))
    url = "https://drive.google.com/uc?id=isolation-paper&export=download"
    file_cache.add(url, Path(write_pdf(tmp_path / "paper.pdf", "Isolation")))
    escape = "touch /usr/share/evince/escape; touch /etc/escape"
    env.reset(options={"task": a_task(config=[
        {"type": "download", "parameters": {"files": [
            {"url": url, "path": "/home/user/Desktop/paper.pdf"}]}},
        {"type": "open", "parameters": {"path": "/home/user/Desktop/paper.pdf"}},
        {"type": "execute", "parameters": {"command": escape, "shell": True}}])})
    session = env._session
    assert session is not None and session.display
    viewer = [pid for pid, name in session.desktop_processes().items() if name == "evince"]
    expected = session.host_uid if os.geteuid() == 0 else os.geteuid()
    assert viewer and {_host_uid(pid) for pid in viewer} == {expected} and expected != 0
    for pid in viewer:
        root = Path(f"/proc/{pid}/root")
        # What it needs is there: its program and the document it shows.
        assert (root / "usr/bin/evince").exists()
        assert (root / "home/user/Desktop/paper.pdf").read_bytes().startswith(b"%PDF")
        assert not (root / "etc/shadow").exists()
        assert not (root / PROJECT.relative_to("/") / "pyproject.toml").exists()
        assert not (root / "root").exists() or not any((root / "root").iterdir())
        assert "ro" in _mount_options(pid, "/usr/share/evince")
        assert "ro" in _mount_options(pid, "/etc/escape")
        # A network namespace of its own, with nothing in it but loopback.
        assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
        interfaces = {line.split(":")[0].strip()
                      for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]}
        assert interfaces == {"lo"}
    assert not any(Path(path).exists() for path in ("/usr/share/evince/escape", "/etc/escape"))
