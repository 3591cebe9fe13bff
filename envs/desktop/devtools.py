"""A small Chrome DevTools protocol client over Chromium's `--remote-debugging-pipe`.

OSWorld drives Chrome through its debugging port (`--remote-debugging-port=1337`, relayed by
socat to 9222) from the host. Here the browser runs in the desktop's sandbox, whose network
namespace the host does not share, so the env speaks the same protocol over a pair of pipes
instead: Chromium reads commands from its fd 3 and writes replies and events to its fd 4, each
message JSON ended by a NUL byte. No socket is opened, and the task's own port flag stays as it
is (it listens on the sandbox's loopback, where nothing from the host can reach it).

The client also serves the pages: it attaches to every tab as it opens (paused until the
client has set it up), and answers each http(s) request the tab makes from the offline file
cache (`envs.desktop.file_cache`), failing the others as a machine without network would. So a
tab's URL is always the one the task or the agent asked for, loaded or not.
"""

from __future__ import annotations

import base64
import json
import logging
import mimetypes
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["DevTools", "DevToolsError"]

logger = logging.getLogger(__name__)

# The fds Chromium's `--remote-debugging-pipe` reads commands from and writes messages to.
COMMAND_FD, MESSAGE_FD = 3, 4
_HTTP_PATTERNS = [{"urlPattern": "http://*"}, {"urlPattern": "https://*"}]


class DevToolsError(RuntimeError):
    """The browser answered a command with an error, closed its pipe, or did not answer."""


class _Reply:
    """A command's answer, handed from the reader thread to the caller."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.message: dict[str, Any] = {}


class DevTools:
    """A connection to one browser over its debugging pipe.

    Args:
        command_fd: our end of the pipe the browser reads commands from.
        message_fd: our end of the pipe the browser writes to.
        serve: URL -> host path of the file to answer it with, or None to fail the request.
    """

    def __init__(self, command_fd: int, message_fd: int,
                 serve: Callable[[str], Path | None]) -> None:
        self._command_fd = command_fd
        self._message_fd = message_fd
        self._serve = serve
        self._next_id = 0
        self._replies: dict[int, _Reply] = {}
        self._lock = threading.Lock()
        self.sessions: dict[str, str] = {}  # page target id -> its flat session id
        self.closed = False
        self._reader = threading.Thread(target=self._read_messages, daemon=True,
                                        name="devtools-reader")
        self._reader.start()

    def call(self, method: str, params: dict[str, Any] | None = None,
             session_id: str | None = None, timeout_s: float = 30.0) -> dict[str, Any]:
        """Send a command and wait for its result.

        Raises:
            DevToolsError: the browser answered with an error, went away, or took longer than
                `timeout_s`.
        """
        reply = _Reply()
        message_id = self._send(method, params, session_id, reply)
        if not reply.done.wait(timeout_s):
            self._replies.pop(message_id, None)
            raise DevToolsError(f"the browser did not answer {method} within {timeout_s:g} s")
        if "error" in reply.message:
            raise DevToolsError(f"{method} failed: {reply.message['error'].get('message')}")
        return reply.message.get("result", {})

    def _send(self, method: str, params: dict[str, Any] | None, session_id: str | None,
              reply: _Reply | None = None) -> int:
        """Write one command; a reply, if given, is filled in when its answer comes."""
        with self._lock:
            if self.closed:
                raise DevToolsError(f"cannot send {method}: the browser has closed its pipe "
                                    "(it exited)")
            self._next_id += 1
            message_id = self._next_id
            if reply is not None:
                self._replies[message_id] = reply
            message: dict[str, Any] = {"id": message_id, "method": method,
                                       "params": params or {}}
            if session_id is not None:
                message["sessionId"] = session_id
            data = json.dumps(message).encode() + b"\0"
            try:
                while data:
                    data = data[os.write(self._command_fd, data):]
            except OSError as error:
                self.closed = True
                raise DevToolsError(f"cannot send {method}: {error}") from error
        return message_id

    def _read_messages(self) -> None:
        """The reader thread: hand each answer to its caller and handle the events."""
        buffer = b""
        while True:
            try:
                chunk = os.read(self._message_fd, 1 << 16)
            except OSError:
                logger.exception("the DevTools pipe failed")
                break
            if not chunk:  # the browser's end closed: the descriptor is ours to close
                os.close(self._message_fd)
                break
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                try:
                    self._dispatch(json.loads(raw))
                except Exception:  # one bad message must not stop the reader
                    logger.exception("could not handle a DevTools message")
        with self._lock:
            self.closed = True
            waiting, self._replies = list(self._replies.values()), {}
        for reply in waiting:
            reply.message = {"error": {"message": "the browser closed its pipe"}}
            reply.done.set()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "id" in message:
            reply = self._replies.pop(message["id"], None)
            if reply is not None:
                reply.message = message
                reply.done.set()
            return
        method, params = message.get("method"), message.get("params", {})
        if method == "Target.attachedToTarget":
            self._set_up_target(params)
        elif method == "Target.detachedFromTarget":
            self.sessions = {target: session for target, session in self.sessions.items()
                             if session != params.get("sessionId")}
        elif method == "Fetch.requestPaused":
            self._answer_request(params, message.get("sessionId"))

    def _set_up_target(self, params: dict[str, Any]) -> None:
        """A tab (or a worker) has been attached, paused before it runs: route its requests
        through us, then let it go. Sent without waiting, from the reader thread."""
        session_id, info = params["sessionId"], params["targetInfo"]
        if info.get("type") == "page":
            self.sessions[info["targetId"]] = session_id
            self._send("Fetch.enable", {"patterns": _HTTP_PATTERNS}, session_id)
        self._send("Runtime.runIfWaitingForDebugger", None, session_id)

    def _answer_request(self, params: dict[str, Any], session_id: str | None) -> None:
        """Answer a paused request from the file cache, or fail it as having no network."""
        url, request_id = params["request"]["url"], params["requestId"]
        path = self._serve(url.split("#", 1)[0])
        if path is None:
            self._send("Fetch.failRequest", {"requestId": request_id,
                                             "errorReason": "InternetDisconnected"}, session_id)
            return
        content_type = mimetypes.guess_type(path.name)[0] or mimetypes.guess_type(url)[0]
        headers = [{"name": "Content-Type", "value": content_type or "text/html"}]
        self._send("Fetch.fulfillRequest", {
            "requestId": request_id, "responseCode": 200, "responseHeaders": headers,
            "body": base64.b64encode(path.read_bytes()).decode()}, session_id)

    def attach_to_tabs(self) -> None:
        """Attach to every tab now open and to every one opened later, each paused at its
        start until `_set_up_target` has routed its requests."""
        self.call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True,
                                           "flatten": True})
        for target in self.call("Target.getTargets")["targetInfos"]:
            if target["type"] == "page" and target["targetId"] not in self.sessions:
                self.call("Target.attachToTarget", {"targetId": target["targetId"],
                                                    "flatten": True})

    def close(self) -> None:
        """Stop sending (the browser is left running); safe to call again.

        Only the command pipe is closed here, once. The message pipe belongs to the reader
        thread, which closes it when the browser's end closes: closing a descriptor another
        thread may still read, or closing a number twice, could hit a descriptor the process
        has since reused for something else (a sandbox's request channel, say)."""
        with self._lock:
            self.closed = True
            fd, self._command_fd = self._command_fd, -1
        if fd >= 0:
            os.close(fd)
