"""Every sandbox backend, for real, held to one behaviour suite: state, limits, timeouts, output
caps, restarts, isolation and clean-up. bubblewrap runs wherever `bwrap` is installed; Docker
where a daemon answers and has the sandbox image (`.ci/run` starts dockerd and builds it with
`agent-rl sandbox image build`); a backend that cannot run here is skipped, saying why."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox import (
    SandboxClosedError,
    SandboxConfig,
    SandboxConfigError,
    SandboxFileError,
    open_async_session,
    open_session,
)
from sandbox.transport import KernelGoneError, ProcessTransport

LIMITS = {"timeout_s": 2.0, "memory_mb": 256, "max_processes": 32, "max_file_mb": 1,
          "max_output_chars": 1_000}


def backend_unavailable(backend: str) -> str | None:
    """Why `backend` cannot run here, or None."""
    if backend == "bwrap":
        return None if shutil.which("bwrap") else "bubblewrap (bwrap) is not installed here"
    from sandbox import BackendUnavailableError
    from sandbox.backends.docker_backend import docker_client
    from sandbox.docker_image import IMAGE, require_image

    try:
        require_image(docker_client(), IMAGE)
    except BackendUnavailableError as error:
        return f"Docker backend not testable here: {error}"
    return None


def config_for(backend: str) -> SandboxConfig:
    """The test limits on `backend`, or a skip saying why it cannot run here."""
    if reason := backend_unavailable(backend):
        pytest.skip(reason)
    # A container takes longer than a namespace to start on a loaded machine.
    start_timeout_s = 60.0 if backend == "docker" else 10.0
    return SandboxConfig(backend=backend, start_timeout_s=start_timeout_s, **LIMITS)


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def config(request: pytest.FixtureRequest) -> SandboxConfig:
    return config_for(request.param)


_sandbox_uids: set[int] = set()


@pytest.fixture
def session(config: SandboxConfig):
    with open_session(config) as session:
        _sandbox_uids.add(int(session.run("import os\nos.getuid()").value))
        yield session


def _host_processes_with(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline:
                found.append(int(entry.name))
    return found


def test_variables_imports_and_files_persist_across_calls(session):
    assert session.run("import math\nradius = 2").ok
    assert session.run("open('notes.txt', 'w').write('kept')").ok
    result = session.run("print(math.pi * radius ** 2)\nopen('notes.txt').read()")
    assert result.ok, result.error
    assert result.stdout.startswith("12.566")
    assert result.value == "'kept'"


def test_last_expression_value_and_stderr_are_reported(session):
    result = session.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\n[1, 2]")
    assert (result.stdout, result.stderr, result.value) == ("out\n", "err\n", "[1, 2]")
    assert result.ok
    assert session.run("x = None\nx").value is None


def test_output_of_child_processes_is_captured(session):
    result = session.run("import subprocess\nsubprocess.run(['echo', 'from child'])")
    assert "from child" in result.stdout


def test_exception_comes_back_with_a_traceback_and_the_session_survives(session):
    session.run("kept = 41")
    result = session.run("def f():\n    raise ValueError('bad input')\nf()")
    assert not result.ok and result.exit_status == 1 and not result.restarted
    assert result.error_type == "ValueError"
    assert "bad input" in result.error and "line 2, in f" in result.error
    assert "_kernel" not in result.error
    assert session.run("kept + 1").value == "42"


def test_syntax_error_is_reported_and_the_session_survives(session):
    session.run("kept = 1")
    result = session.run("def broken(:\n    pass")
    assert result.error_type == "SyntaxError" and "SyntaxError" in result.error
    assert not result.ok and not result.restarted
    assert session.run("kept").value == "1"


def test_sys_exit_reports_its_status_and_the_session_survives(session):
    session.run("kept = 1")
    result = session.run("import sys\nprint('before')\nsys.exit(3)")
    assert (result.exit_status, result.error_type, result.stdout) == (3, "SystemExit", "before\n")
    assert not result.ok and not result.restarted and not result.crashed
    assert session.run("kept").value == "1"


def test_infinite_loop_times_out_and_the_session_is_restarted(session):
    session.run("kept = 1")
    started = time.monotonic()
    result = session.run("print('started', flush=True)\nwhile True:\n    pass", timeout_s=1.0)
    assert time.monotonic() - started < 3.0
    assert result.timed_out and result.limit == "timeout" and result.restarted
    assert result.stdout == "started\n"
    assert "TimeoutError" in result.error
    after = session.run("'kept' in globals()")
    assert after.ok and after.value == "False"


def test_sleeping_call_times_out(session):
    result = session.run("import time\ntime.sleep(60)", timeout_s=0.5)
    assert result.timed_out and result.limit == "timeout" and result.restarted
    assert 0.5 <= result.wall_s < 20  # stopped at the limit, not after the 60 s sleep
    assert session.run("1 + 1").value == "2"


def test_memory_bomb_is_refused_and_the_session_survives(session):
    session.run("kept = 1")
    result = session.run("hog = bytearray(2 * 1024 ** 3)")
    assert result.limit == "memory" and result.error_type == "MemoryError"
    grow = session.run("hog = []\nwhile True:\n    hog.append(bytearray(10 ** 7))", timeout_s=10)
    assert grow.limit == "memory", grow
    assert session.run("del hog\nkept").value == "1"


def test_fork_bomb_is_bounded_and_the_host_can_still_fork(session, config):
    code = ("import os\nchildren = 0\nwhile True:\n"
            "    if os.fork() == 0:\n        import time; time.sleep(30); os._exit(0)\n"
            "    children += 1")
    result = session.run(code)
    assert result.limit == "processes", result
    assert result.error_type == "BlockingIOError"
    assert session.run("children").value is not None
    assert int(session.run("children").value) < config.max_processes
    assert subprocess.run(["true"], timeout=10).returncode == 0


def test_shell_fork_bomb_is_bounded_by_the_process_limit(session):
    result = session.run("import subprocess\nsubprocess.run(['sh', '-c', ':(){ :|:& };:'])\n"
                         "import time; time.sleep(0.5)")
    assert not result.crashed
    assert subprocess.run(["true"], timeout=10).returncode == 0


def test_output_flood_is_truncated_and_says_so(session, config):
    result = session.run("for i in range(50_000):\n    print('flood', i)\n'x' * 10_000")
    assert result.truncated and result.limit == "output"
    assert len(result.stdout) == config.max_output_chars
    assert len(result.value) == config.max_output_chars
    assert session.run("print('small')").stdout == "small\n"
    result = session.run("print('y' * 10 ** 7)")
    assert result.truncated and len(result.stdout) == config.max_output_chars


def test_file_size_limit_is_reported(session):
    result = session.run("open('big.bin', 'wb').write(b'0' * (4 * 1024 ** 2))")
    assert result.limit == "file_size" and "File too large" in result.error
    assert session.run("1").ok


def test_network_is_unreachable(session):
    result = session.run(
        "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)")
    assert result.error_type == "OSError" and "unreachable" in result.error
    result = session.run("import socket\nsocket.getaddrinfo('pypi.org', 443)")
    assert result.error_type == "gaierror"


@pytest.mark.parametrize("folder", ["/root", "/etc", "/home", "/tmp",
                                    str(Path(__file__).resolve().parents[2])])
def test_host_files_are_not_visible(session, folder):
    marker = Path(folder) / f"agent_rl_host_marker_{os.getpid()}"
    marker.write_text("the host's")
    try:
        result = session.run(f"import os\nos.path.exists({str(marker)!r})")
        assert result.value == "False"
        assert session.run(f"open({str(marker)!r}).read()").error_type in (
            "FileNotFoundError", "PermissionError")
    finally:
        marker.unlink()


@pytest.mark.parametrize("path", ["/root", "/root/.bashrc", "/etc/shadow", "/etc/passwd",
                                  "/home"])
def test_bwrap_shows_no_host_system_files(path):
    """bubblewrap binds only what Python needs; a container has its image's own /etc instead."""
    if reason := backend_unavailable("bwrap"):
        pytest.skip(reason)
    with open_session(SandboxConfig(backend="bwrap", **LIMITS)) as session:
        assert session.run(f"import os\nos.path.exists({path!r})").value == "False"


@pytest.mark.parametrize("path", ["/root/agent_rl_escape", "/work/main/agent_rl_escape",
                                  "/etc/agent_rl_escape", "/usr/agent_rl_escape"])
def test_host_dirs_are_not_writable(session, path):
    result = session.run(f"import os\nos.makedirs(os.path.dirname({path!r}), exist_ok=True)\n"
                         f"open({path!r}, 'w').write('x')")
    assert not result.ok
    assert not Path(path).exists()


def test_sandbox_runs_as_an_unprivileged_user(session):
    uid = int(session.run("import os\nos.getuid()").value)
    assert uid != 0
    result = session.run("import os\nos.setuid(0)")
    assert result.error_type == "PermissionError"


def test_sessions_cannot_see_each_other(session, config):
    session.run("open('mine.txt', 'w').write('secret')")
    with open_session(config) as other:
        assert other.run("import os\nos.listdir('.')").value == "[]"
        processes = other.run("import os\nsorted(p for p in os.listdir('/proc') if p.isdigit())")
        assert processes.value is not None and len(eval(processes.value)) <= 3


def test_background_process_is_gone_after_close(config):
    marker = "31337.25"
    session = open_session(config)
    session.run(f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'],"
                " start_new_session=True)\nimport time; time.sleep(0.2)")
    assert _host_processes_with(f"sleep {marker}"), "the background process did not start"
    session.close()
    deadline = time.monotonic() + 5
    while _host_processes_with(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _host_processes_with(f"sleep {marker}")


def test_background_process_is_gone_after_reset(session):
    marker = "31338.25"
    session.run(f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\n"
                "import time; time.sleep(0.2)\nkept = 1")
    session.reset()
    deadline = time.monotonic() + 5
    while _host_processes_with(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _host_processes_with(f"sleep {marker}")
    assert session.run("'kept' in globals()").value == "False"


def test_kernel_crash_is_reported_and_the_session_restarted(session):
    result = session.run("import os\nos._exit(7)")
    assert result.crashed and result.restarted and result.exit_status == 7
    assert session.run("2 * 3").value == "6"


def test_files_round_trip_relative_to_the_work_dir(session):
    session.write_file("data/in.txt", b"hello")
    assert session.run("open('data/in.txt').read().upper()").value == "'HELLO'"
    session.run("open('out.bin', 'wb').write(bytes(range(256)))")
    assert session.read_file("out.bin") == bytes(range(256))
    with pytest.raises(SandboxFileError, match="missing.txt"):
        session.read_file("missing.txt")
    with pytest.raises(SandboxFileError, match="relative"):
        session.write_file("/etc/x", b"")
    with pytest.raises(SandboxFileError, match="relative"):
        session.read_file("../../root/.bashrc")


def test_closed_session_refuses_calls(config):
    session = open_session(config)
    session.close()
    with pytest.raises(SandboxClosedError):
        session.run("1")


def test_several_sessions_step_concurrently_under_asyncio(config):
    """Six sessions' calls overlap in time: all are sleeping at once (an ordering fact, not a
    speed one: session start-up time does not enter it)."""
    ready = asyncio.Event()

    async def episode(index: int, started: list) -> tuple[str | None, float, float]:
        async with await open_async_session(config) as session:
            await session.arun(f"index = {index}")
            started.append(index)
            if len(started) == 6:
                ready.set()
            await ready.wait()
            begin = time.monotonic()
            result = await session.arun("import time\ntime.sleep(0.5)\nindex * 10")
            return result.value, begin, time.monotonic()

    async def main() -> list[tuple[str | None, float, float]]:
        started: list[int] = []
        return await asyncio.gather(*(episode(index, started) for index in range(6)))

    results = asyncio.run(main())
    assert [value for value, _, _ in results] == [str(index * 10) for index in range(6)]
    last_begin, first_end = max(r[1] for r in results), min(r[2] for r in results)
    assert last_begin < first_end, "a call began only after another had ended: not concurrent"


def test_unknown_backend_names_the_nearest_one():
    with pytest.raises(SandboxConfigError, match="did you mean 'bwrap'"):
        SandboxConfig(backend="bwarp")
    with pytest.raises(SandboxConfigError, match="did you mean 'timeout_s'"):
        SandboxConfig.from_dict({"timeout": 3})


def test_host_is_unaffected_by_the_sessions():
    if not _sandbox_uids:
        pytest.skip("checks what the other tests of this module left behind; run the module")
    left = [entry for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and _owner(entry) in _sandbox_uids]
    assert not left, f"processes of closed sandboxes are still alive: {left} {_sandbox_uids}"
    escapes = ("/root/agent_rl_escape", "/etc/agent_rl_escape", "/work/main/agent_rl_escape")
    assert not any(Path(path).exists() for path in escapes)
    assert os.access("/work/main/pyproject.toml", os.R_OK)


def _owner(entry: Path) -> int:
    try:
        return entry.stat().st_uid
    except OSError:
        return -1


def test_a_killed_transport_never_touches_the_file_that_reuses_its_descriptors():
    """After a kill its pipe numbers go to the next file opened; a late call must fail."""
    transport = ProcessTransport([sys.executable, "-c", "import sys; sys.stdin.read()"])
    stdin_fd = transport._stdin_fd
    transport.kill()
    reader, writer = os.pipe()
    try:
        with pytest.raises(KernelGoneError):
            transport.write(b"late")
        with pytest.raises(KernelGoneError):
            transport.read(time.monotonic() + 1)
        os.set_blocking(reader, False)
        with pytest.raises(BlockingIOError):
            os.read(reader, 4)  # nothing reached the pipe that may hold the old number
        assert stdin_fd >= 0
    finally:
        os.close(reader)
        os.close(writer)
