"""A persistent Python session in a sandbox: run code, move files, reset, close.

The session owns one kernel process (see `_kernel.py`) and restarts it whenever a call leaves it
unusable: past the wall-clock limit, after a crash, or when it broke the wire protocol. Calls
are serialised per session; run many sessions side by side for concurrency (`arun` does not
block the event loop).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import posixpath
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

from sandbox.backends import start_kernel
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxClosedError, SandboxFileError, SandboxStartError
from sandbox.result import ExecResult
from sandbox.transport import (
    FrameReader,
    KernelGoneError,
    ProtocolViolationError,
    Transport,
    encode_request,
)

__all__ = ["Session", "open_async_session", "open_session"]

logger = logging.getLogger(__name__)

# Blocking calls of async users run here rather than in the loop's default executor, which has
# only min(32, cpus + 4) threads: a rollout actor steps more sessions than that at once.
_executor = ThreadPoolExecutor(max_workers=256, thread_name_prefix="sandbox")
_CALL_GRACE_S = 2.0
_FILE_OP_TIMEOUT_S = 30.0


async def _in_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor, functools.partial(function, *args, **kwargs))


class _Output:
    """One stream of one call, cut at the configured length on the host side too."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self._max_bytes - len(self._data)
        self._data += chunk[:room]
        self.dropped += max(0, len(chunk) - room)

    def text(self, max_chars: int) -> tuple[str, bool]:
        text = self._data.decode(errors="replace")
        if len(text) > max_chars:
            return text[:max_chars], True
        return text, self.dropped > 0


class Session:
    """One sandboxed interpreter whose variables, imports and files persist between calls."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config if config is not None else SandboxConfig()
        self._lock = threading.Lock()
        self._closed = False
        self._transport: Transport | None = None
        self._reader: FrameReader | None = None
        self.restarts = 0
        """Times the kernel was replaced, by `reset()` or after a fatal limit."""
        self._start()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Session(backend={self.config.backend!r}, {state}, restarts={self.restarts})"

    @property
    def closed(self) -> bool:
        return self._closed

    def _max_frame_bytes(self) -> int:
        return 2 * (self.config.max_file_mb << 20) + 8 * self.config.max_output_bytes + (1 << 20)

    def _start(self) -> None:
        transport = start_kernel(self.config)
        reader = FrameReader(transport, self._max_frame_bytes())
        deadline = time.monotonic() + self.config.start_timeout_s
        try:
            frame = reader.read(deadline)
            if frame.kind != b"y":
                raise ProtocolViolationError(f"expected the ready frame, got {frame.kind!r}")
        except (TimeoutError, KernelGoneError, ProtocolViolationError) as error:
            status = transport.kill(grace_s=0.5)
            reason = "did not answer in time" if isinstance(error, TimeoutError) else str(error)
            where = (f" (image {self.config.docker_image}: it needs python3 with its standard "
                     "library)" if self.config.backend == "docker" else "")
            raise SandboxStartError(
                f"the {self.config.backend} sandbox failed to start{where} ({reason}; exit status"
                f" {status}); its messages: {transport.diagnostics() or '(none)'}") from error
        self._transport, self._reader = transport, reader

    def _restart(self) -> None:
        self._kill()
        self.restarts += 1
        self._start()

    def _kill(self, grace_s: float = 0.0) -> int | None:
        transport, self._transport, self._reader = self._transport, None, None
        return transport.kill(grace_s) if transport is not None else None

    def _check_open(self) -> tuple[Transport, FrameReader]:
        if self._closed:
            raise SandboxClosedError("this sandbox session is closed; open a new one")
        if self._transport is None or self._reader is None:
            self._start()
        assert self._transport is not None and self._reader is not None
        return self._transport, self._reader

    def run(self, code: str, timeout_s: float | None = None) -> ExecResult:
        """Run `code` in the session; its variables stay for the next call.

        Never raises for what the code does: exceptions, `sys.exit`, limits, timeouts and crashes
        all come back in the result. `timeout_s` overrides the config's limit for this call.
        """
        with self._lock:
            return self._run_locked(code, timeout_s or self.config.timeout_s)

    async def arun(self, code: str, timeout_s: float | None = None) -> ExecResult:
        """`run` without blocking the event loop."""
        return await _in_thread(self.run, code, timeout_s)

    def _run_locked(self, code: str, timeout_s: float) -> ExecResult:
        transport, reader = self._check_open()
        request_id = secrets.token_hex(8)
        stdout = _Output(self.config.max_output_bytes)
        stderr = _Output(self.config.max_output_bytes)
        started = time.monotonic()
        deadline = started + timeout_s
        failure: str | None = None
        try:
            transport.write(encode_request({"op": "exec", "id": request_id, "code": code}))
            while True:
                frame = reader.read(deadline)
                if frame.kind == b"o":
                    stdout.add(frame.body)
                elif frame.kind == b"e":
                    stderr.add(frame.body)
                elif frame.kind == b"r":
                    response = frame.json()
                    if response.get("id") == request_id:
                        break
        except TimeoutError:
            failure = "timeout"
        except (KernelGoneError, ProtocolViolationError) as error:
            failure = f"crash: {error}"
        wall_s = time.monotonic() - started
        if failure is None:
            return self._result_from_response(response, stdout, stderr, wall_s)
        return self._result_after_failure(failure, timeout_s, stdout, stderr, wall_s)

    def _result_from_response(self, response: dict[str, Any], stdout: _Output, stderr: _Output,
                              wall_s: float) -> ExecResult:
        max_chars = self.config.max_output_chars
        stdout_text, stdout_cut = stdout.text(max_chars)
        stderr_text, stderr_cut = stderr.text(max_chars)
        value = response.get("value")
        value = value if isinstance(value, str) else None
        value_cut = value is not None and len(value) > max_chars
        value = value[:max_chars] if value_cut else value
        truncated = (stdout_cut or stderr_cut or value_cut or bool(response.get("o_dropped"))
                     or bool(response.get("e_dropped")))
        limit = response.get("limit")
        if limit is None and truncated:
            limit = "output"
        error = response.get("error")
        exit_status = response.get("exit_status", 1)
        return ExecResult(
            stdout=stdout_text, stderr=stderr_text,
            value=value,
            error=error if isinstance(error, str) else None,
            error_type=response.get("error_type"),
            exit_status=exit_status if isinstance(exit_status, int) else 1,
            wall_s=wall_s, truncated=truncated, limit=limit if isinstance(limit, str) else None)

    def _result_after_failure(self, failure: str, timeout_s: float, stdout: _Output,
                              stderr: _Output, wall_s: float) -> ExecResult:
        timed_out = failure == "timeout"
        status = self._kill(grace_s=0.0 if timed_out else 0.5)
        if timed_out:
            error = (f"TimeoutError: the code ran longer than {timeout_s:g} s and was killed; the"
                     " session was restarted, so earlier variables and files are gone")
        else:
            error = (f"the Python process died ({failure.removeprefix('crash: ')}, exit status"
                     f" {status}); the session was restarted, so earlier variables and files are"
                     " gone")
        logger.info("sandbox call failed (%s); restarting the session", failure)
        self.restarts += 1
        self._start()
        max_chars = self.config.max_output_chars
        stdout_text, stdout_cut = stdout.text(max_chars)
        stderr_text, stderr_cut = stderr.text(max_chars)
        return ExecResult(
            stdout=stdout_text, stderr=stderr_text, value=None, error=error,
            error_type="TimeoutError" if timed_out else "KernelDied",
            exit_status=status if status is not None else -9, wall_s=wall_s,
            timed_out=timed_out, truncated=stdout_cut or stderr_cut, crashed=not timed_out,
            limit="timeout" if timed_out else None, restarted=True)

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        """A file operation: fails loudly instead of coming back as a result."""
        with self._lock:
            transport, reader = self._check_open()
            message = message | {"id": secrets.token_hex(8)}
            deadline = time.monotonic() + _FILE_OP_TIMEOUT_S
            try:
                transport.write(encode_request(message))
                while True:
                    frame = reader.read(deadline)
                    if frame.kind == b"r":
                        response = frame.json()
                        if response.get("id") == message["id"]:
                            break
            except (TimeoutError, KernelGoneError, ProtocolViolationError) as error:
                self._restart()
                raise SandboxFileError(
                    f"{message['op']} {message['path']!r} failed: the sandbox did not answer"
                    f" ({type(error).__name__}: {error}); the session was restarted") from error
        if response.get("error"):
            raise SandboxFileError(f"{message['op']} {message['path']!r} failed inside the"
                                   f" sandbox: {response['error']}")
        return response

    @staticmethod
    def _check_path(path: str) -> str:
        normal = posixpath.normpath(path)
        if posixpath.isabs(normal) or normal == ".." or normal.startswith("../"):
            raise SandboxFileError(
                f"path {path!r} must be relative to the session's work dir and stay inside it")
        return normal

    def write_file(self, path: str, data: bytes | str) -> None:
        """Create or replace `path` (relative to the work dir), making parent dirs as needed."""
        payload = data.encode() if isinstance(data, str) else data
        limit = self.config.max_file_mb << 20
        if len(payload) > limit:
            raise SandboxFileError(f"{len(payload)} bytes for {path!r} exceed max_file_mb="
                                   f"{self.config.max_file_mb}; raise it or write less")
        self._request({"op": "write_file", "path": self._check_path(path),
                       "data": base64.b64encode(payload).decode()})

    def read_file(self, path: str) -> bytes:
        """The bytes of `path` (relative to the work dir)."""
        response = self._request({"op": "read_file", "path": self._check_path(path),
                                  "max_bytes": self.config.max_file_mb << 20})
        try:
            return base64.b64decode(response["data"], validate=True)
        except (KeyError, TypeError, ValueError) as error:
            raise SandboxFileError(f"the sandbox sent an unreadable answer for {path!r}") from error

    async def awrite_file(self, path: str, data: bytes | str) -> None:
        await _in_thread(self.write_file, path, data)

    async def aread_file(self, path: str) -> bytes:
        return await _in_thread(self.read_file, path)

    def reset(self) -> None:
        """Start over with a fresh interpreter and an empty work dir.

        The kernel is replaced rather than cleared: code may have patched builtins or modules,
        and nothing short of a new process undoes that.
        """
        with self._lock:
            if self._closed:
                raise SandboxClosedError("this sandbox session is closed; open a new one")
            self._restart()

    async def areset(self) -> None:
        await _in_thread(self.reset)

    def close(self) -> None:
        """Kill the sandbox and every process started in it. Safe to call twice."""
        with self._lock:
            self._closed = True
            self._kill()

    async def aclose(self) -> None:
        await _in_thread(self.close)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._kill()


def open_session(config: SandboxConfig | None = None) -> Session:
    """Start a session; use it as a context manager so it is always closed.

    Raises:
        BackendUnavailableError: the configured backend cannot run here.
        SandboxStartError: the sandbox started but did not come up.
    """
    return Session(config)


async def open_async_session(config: SandboxConfig | None = None) -> Session:
    """`open_session` without blocking the event loop."""
    return await _in_thread(Session, config)
