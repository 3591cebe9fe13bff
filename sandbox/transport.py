"""Byte channels between the host and one sandboxed kernel, and the frames sent over them.

A backend starts the kernel and hands back a `Transport`; the session only speaks frames over
it. Everything read here comes from untrusted code, so frame sizes are bounded before any
allocation.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import struct
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "HEADER",
    "Frame",
    "FrameReader",
    "KernelGoneError",
    "ProcessTransport",
    "ProtocolViolationError",
    "Transport",
    "encode_request",
]

HEADER = struct.Struct(">cI")


class KernelGoneError(Exception):
    """The kernel's output channel closed: the process died."""


class ProtocolViolationError(Exception):
    """The kernel sent something that is not a valid frame (oversized, unknown kind, bad JSON)."""


class Transport(Protocol):
    """A started sandbox: write requests in, read frame bytes out, kill it."""

    def write(self, data: bytes) -> None:
        """Send bytes to the kernel's request channel."""

    def read(self, deadline: float) -> bytes:
        """Bytes from the kernel's frame channel; b"" once it closed.

        Raises:
            TimeoutError: nothing arrived before `deadline` (a `time.monotonic()` value).
        """

    def kill(self, grace_s: float = 0.0) -> int | None:
        """Kill the sandbox and everything in it, after waiting up to `grace_s` for it to end by
        itself; return the kernel's exit status if known (negative: the signal that killed it)."""

    def diagnostics(self) -> str:
        """What the sandbox wrote outside the frame channel (its own error messages)."""


@dataclass(frozen=True)
class Frame:
    kind: bytes
    body: bytes

    def json(self) -> dict[str, Any]:
        try:
            message = json.loads(self.body)
        except ValueError as error:
            raise ProtocolViolationError(f"frame {self.kind!r} is not JSON: {error}") from error
        if not isinstance(message, dict):
            raise ProtocolViolationError(f"frame {self.kind!r} is not a JSON object")
        return message


def encode_request(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return HEADER.pack(b"q", len(body)) + body


class FrameReader:
    """Cuts the byte stream from a transport into frames."""

    KINDS = (b"y", b"o", b"e", b"r")

    def __init__(self, transport: Transport, max_frame_bytes: int) -> None:
        self._transport = transport
        self._max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    def read(self, deadline: float) -> Frame:
        """The next frame.

        Raises:
            TimeoutError: the frame did not arrive before `deadline`.
            KernelGoneError: the channel closed.
            ProtocolViolationError: the bytes are not a frame.
        """
        while True:
            if len(self._buffer) >= HEADER.size:
                kind, length = HEADER.unpack_from(self._buffer)
                if kind not in self.KINDS:
                    raise ProtocolViolationError(f"unknown frame kind {kind!r}")
                if length > self._max_frame_bytes:
                    raise ProtocolViolationError(
                        f"frame of {length} bytes exceeds the limit of {self._max_frame_bytes}")
                end = HEADER.size + length
                if len(self._buffer) >= end:
                    body = bytes(self._buffer[HEADER.size:end])
                    del self._buffer[:end]
                    return Frame(kind, body)
            chunk = self._transport.read(deadline)
            if not chunk:
                raise KernelGoneError("the sandbox closed its output channel")
            self._buffer += chunk


class ProcessTransport:
    """A sandbox that is a local process tree (bwrap or an unsandboxed interpreter).

    The process leads its own process group, so `kill` reaches every process that did not move
    itself elsewhere; bwrap's PID namespace takes care of those.
    """

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self._process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, start_new_session=True, bufsize=0, close_fds=True)
        assert self._process.stdin and self._process.stdout and self._process.stderr
        self._stdin_fd = self._process.stdin.fileno()
        self._stdout_fd = self._process.stdout.fileno()
        self._stderr_fd = self._process.stderr.fileno()
        os.set_blocking(self._stderr_fd, False)
        self._stderr = bytearray()

    @property
    def pid(self) -> int:
        return self._process.pid

    def write(self, data: bytes) -> None:
        if self._stdin_fd < 0:
            raise KernelGoneError("the sandbox was closed")
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._stdin_fd, view)
            except BrokenPipeError as error:
                raise KernelGoneError("the sandbox closed its request channel") from error
            view = view[written:]

    def read(self, deadline: float) -> bytes:
        if self._stdout_fd < 0:
            raise KernelGoneError("the sandbox was closed")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        readable, _, _ = select.select([self._stdout_fd], [], [], remaining)
        if not readable:
            raise TimeoutError
        return os.read(self._stdout_fd, 1 << 16)

    def kill(self, grace_s: float = 0.0) -> int | None:
        if grace_s > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=grace_s)
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)
        try:
            status = self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            status = None
        self._drain_stderr()
        for stream in (self._process.stdin, self._process.stdout, self._process.stderr):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        # The numbers are free for the next file this process opens (another session's pipe):
        # a late write or read must fail here, not reach that file.
        self._stdin_fd = self._stdout_fd = self._stderr_fd = -1
        return status

    def _drain_stderr(self) -> None:
        while len(self._stderr) < 1 << 16:
            try:
                chunk = os.read(self._stderr_fd, 1 << 16)
            except (BlockingIOError, OSError):
                return
            if not chunk:
                return
            self._stderr += chunk

    def diagnostics(self) -> str:
        self._drain_stderr()
        return self._stderr.decode(errors="replace").strip()
