"""The Python kernel that runs inside a sandbox, one per session.

It is started once per session and then serves requests, so a call costs an `exec`, not an
interpreter start. It must run on a bare interpreter (`python -I -S`): standard library only, and
no import of the `sandbox` package, which is not visible inside the sandbox.

Wire format, both directions: one byte of kind, four bytes of big-endian length, then the body.
Requests arrive on the kernel's original stdin (kind `q`, JSON body). Everything it sends goes
to its original stdout: `y` ready (JSON), `o`/`e` raw bytes written to the user's stdout/stderr,
`r` the JSON response to one request. The user's fds 1 and 2 are pipes drained by pump threads,
so output from child processes is captured too and is forwarded while a call still runs (the
host keeps what arrived before a timeout).

The host never trusts what comes out of here: user code runs in this process and can write
anything to the frame fd. Limits the host relies on (wall time, frame size) are enforced there.
"""

import ast
import base64
import errno
import json
import linecache
import os
import resource
import signal
import struct
import sys
import threading
import traceback

HEADER = struct.Struct(">cI")
MEMORY_RESERVE_BYTES = 4 << 20

_kernel_pid = os.getpid()
_reserve = bytearray(MEMORY_RESERVE_BYTES)


class FrameWriter:
    """Serialises frames from the main thread and both pumps onto one fd."""

    def __init__(self, fd):
        self.fd = fd
        self.lock = threading.Lock()

    def send(self, kind, body):
        data = HEADER.pack(kind, len(body)) + body
        with self.lock:
            view = memoryview(data)
            while view:
                written = os.write(self.fd, view)
                view = view[written:]

    def send_json(self, kind, message):
        self.send(kind, json.dumps(message).encode())


class OutputPump(threading.Thread):
    """Forwards one user stream to the host, at most `budget` bytes per call.

    The end of a call is found in-band: the main thread writes a per-call marker into the pipe
    after the user's code returns, so everything written before it has been forwarded once the
    pump reaches the marker.
    """

    def __init__(self, read_fd, kind, frames):
        super().__init__(daemon=True, name=f"pump-{kind.decode()}")
        self.read_fd = read_fd
        self.kind = kind
        self.frames = frames
        self.lock = threading.Lock()
        self.budget = 0
        self.dropped = 0
        self.marker = None
        self.marker_seen = threading.Event()
        self.carry = b""

    def start_call(self, budget, marker):
        with self.lock:
            self.budget = budget
            self.dropped = 0
            self.marker = marker
            self.marker_seen.clear()

    def _forward(self, data):
        with self.lock:
            kept = data[: self.budget]
            self.budget -= len(kept)
            self.dropped += len(data) - len(kept)
        if kept:
            self.frames.send(self.kind, kept)

    def run(self):
        while True:
            try:
                data = os.read(self.read_fd, 1 << 16)
            except OSError:
                return
            if not data:
                return
            pending = self.carry + data
            self.carry = b""
            marker = self.marker
            if marker is not None and marker in pending:
                before, _, after = pending.partition(marker)
                self._forward(before)
                self.marker_seen.set()
                pending = after
            if marker is not None:
                pending, self.carry = _split_marker_prefix(pending, marker)
            self._forward(pending)


def _split_marker_prefix(data, marker):
    """Holds back a tail of `data` that may be the start of a marker cut by the read."""
    for size in range(min(len(marker) - 1, len(data)), 0, -1):
        if data.endswith(marker[:size]):
            return data[:-size], data[-size:]
    return data, b""


def _redirect_stdio(frames):
    """Points fds 0-2 away from the frame channel so neither user code nor children can
    read requests or write raw bytes into it by accident."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    pumps = []
    for fd, kind in ((1, b"o"), (2, b"e")):
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, fd)
        os.close(write_fd)
        pump = OutputPump(read_fd, kind, frames)
        pump.start()
        pumps.append(pump)
    sys.stdin = open(os.devnull, encoding="utf-8")
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False,
                      buffering=1)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False,
                      buffering=1)
    return pumps


def _drop_privileges(settings):
    """As host root without a user namespace, become an unprivileged host uid: only then does
    the kernel count processes against RLIMIT_NPROC, and a breakout is not root."""
    uid = settings.get("uid")
    if uid is None:
        return
    for path in settings["writable_dirs"]:
        os.chown(path, uid, uid)
        os.chmod(path, 0o700)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _apply_limits(settings):
    for name, value in (("RLIMIT_AS", settings.get("memory_bytes")),
                        ("RLIMIT_NPROC", settings.get("max_processes")),
                        ("RLIMIT_FSIZE", settings.get("max_file_bytes")),
                        ("RLIMIT_CORE", 0)):
        if value is not None:
            resource.setrlimit(getattr(resource, name), (value, value))
    # Without this, writing past RLIMIT_FSIZE kills the kernel instead of raising EFBIG.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _limit_of(error):
    if isinstance(error, MemoryError):
        return "memory"
    if isinstance(error, OSError) and error.errno == errno.EFBIG:
        return "file_size"
    if isinstance(error, BlockingIOError) and error.errno == errno.EAGAIN:
        return "processes"  # fork/clone refused by RLIMIT_NPROC or the pids cgroup
    if isinstance(error, RuntimeError) and "can't start new thread" in str(error):
        return "processes"
    return None


def _format_error(error, skip_frames):
    tb = error.__traceback__
    for _ in range(skip_frames):
        if tb is not None:
            tb = tb.tb_next
    if isinstance(error, SyntaxError):
        return "".join(traceback.format_exception_only(type(error), error))
    return "".join(traceback.format_exception(type(error), error, tb))


def _exit_status_of(exit_request):
    code = exit_request.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run_code(code, namespace, cell_name, max_repr_chars):
    """Exec `code`; if its last statement is an expression, return that value's repr."""
    tree = ast.parse(code, cell_name, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    linecache.cache[cell_name] = (len(code), None, code.splitlines(True), cell_name)
    exec(compile(tree, cell_name, "exec"), namespace)
    if last is None:
        return None
    value = eval(compile(last, cell_name, "eval"), namespace)
    if value is None:
        return None
    text = repr(value)
    # One char past the limit lets the host see that it cut the value.
    return text[: max_repr_chars + 1]


def _exec(request, namespace, pumps, settings, counter):
    global _reserve
    marker = b"\x00\x1eagent-rl-end-" + request["id"].encode() + b"\x1e\x00"
    for pump in pumps:
        pump.start_call(settings["max_output_bytes"], marker)
    cell_name = f"<cell-{counter}>"
    response = {"id": request["id"], "value": None, "error": None, "error_type": None,
                "exit_status": 0, "limit": None}
    try:
        try:
            response["value"] = _run_code(request["code"], namespace, cell_name,
                                          settings["max_output_chars"])
        finally:
            if os.getpid() != _kernel_pid:
                # A child forked by user code must never return into the request loop.
                os._exit(1)
    except SystemExit as exit_request:
        response["exit_status"] = _exit_status_of(exit_request)
        response["error_type"] = "SystemExit"
    except BaseException as error:  # noqa: B036 - the kernel reports everything user code raises
        if isinstance(error, MemoryError):
            _reserve = None  # frees room to format the traceback and answer
        response["error"] = _format_error(error, skip_frames=2)
        response["error_type"] = type(error).__name__
        response["exit_status"] = 1
        response["limit"] = _limit_of(error)
        del error
    finally:
        if _reserve is None:
            try:
                _reserve = bytearray(MEMORY_RESERVE_BYTES)
            except MemoryError:
                pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    for fd in (1, 2):
        os.write(fd, marker)
    for pump in pumps:
        pump.marker_seen.wait(timeout=5.0)
        response[f"{pump.kind.decode()}_dropped"] = pump.dropped
    return response


def _resolve(path):
    if os.path.isabs(path):
        raise ValueError(f"path must be relative to the work dir, got {path!r}")
    return path


def _write_file(request):
    data = base64.b64decode(request["data"])
    path = _resolve(request["path"])
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    return {"id": request["id"], "size": len(data)}


def _read_file(request):
    with open(_resolve(request["path"]), "rb") as handle:
        data = handle.read(request["max_bytes"] + 1)
    if len(data) > request["max_bytes"]:
        raise ValueError(f"file {request['path']!r} is larger than {request['max_bytes']} bytes")
    return {"id": request["id"], "data": base64.b64encode(data).decode()}


def _read_exact(fd, size):
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def main():
    settings = json.loads(sys.argv[1])
    request_fd = os.dup(0)
    frames = FrameWriter(os.dup(1))
    pumps = _redirect_stdio(frames)
    _drop_privileges(settings)
    _apply_limits(settings)
    os.chdir(settings["work_dir"])
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    frames.send_json(b"y", {"pid": os.getpid(), "uid": os.getuid()})
    counter = 0
    while True:
        header = _read_exact(request_fd, HEADER.size)
        if header is None:
            return
        _, length = HEADER.unpack(header)
        request = json.loads(_read_exact(request_fd, length))
        counter += 1
        try:
            if request["op"] == "exec":
                response = _exec(request, namespace, pumps, settings, counter)
            elif request["op"] == "write_file":
                response = _write_file(request)
            elif request["op"] == "read_file":
                response = _read_file(request)
            else:
                raise ValueError(f"unknown op {request['op']!r}")
        except Exception as error:
            response = {"id": request["id"], "error": f"{type(error).__name__}: {error}",
                        "error_type": type(error).__name__}
        frames.send_json(b"r", response)


if __name__ == "__main__":
    main()
