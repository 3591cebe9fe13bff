"""Docker backend: one container per session, through the `docker` SDK.

The container has no network, a read-only root, tmpfs work dir and /tmp, all capabilities
dropped, no-new-privileges, and cgroup limits on memory, pids and CPU. It runs as nobody. The
kernel is passed on the command line (`python3 -c`), so it also works with a remote daemon.
"""

from __future__ import annotations

import contextlib
import json
import select
import struct
import time
from typing import Any

from sandbox.backends import KERNEL_PATH, kernel_settings
from sandbox.config import SandboxConfig
from sandbox.docker_image import require_image
from sandbox.errors import BackendUnavailableError, SandboxStartError

__all__ = ["docker_client", "start"]

WORK_DIR = "/workspace"
SANDBOX_UID = 65534  # nobody
_STREAM_HEADER = struct.Struct(">BxxxI")


def docker_client() -> Any:
    """A client whose daemon answered a ping.

    Raises:
        BackendUnavailableError: the SDK is missing or no daemon answers.
    """
    try:
        import docker
    except ImportError as error:
        raise BackendUnavailableError(
            "the `docker` Python package is not installed; pip install docker") from error
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as error:  # the SDK raises several unrelated types for "no daemon"
        raise BackendUnavailableError(
            f"no Docker daemon answers ({type(error).__name__}: {error}); start dockerd, set"
            " DOCKER_HOST, or choose SandboxConfig(backend='bwrap')") from error
    return client


class DockerTransport:
    """The container's attached stdin/stdout; Docker multiplexes stdout and stderr in frames."""

    def __init__(self, container: Any, socket: Any) -> None:
        self._container = container
        self._socket = getattr(socket, "_sock", socket)
        self._buffer = bytearray()
        self._stderr = bytearray()

    def write(self, data: bytes) -> None:
        self._socket.sendall(data)

    def read(self, deadline: float) -> bytes:
        while True:
            if len(self._buffer) >= _STREAM_HEADER.size:
                stream, length = _STREAM_HEADER.unpack_from(self._buffer)
                end = _STREAM_HEADER.size + length
                if len(self._buffer) >= end:
                    payload = bytes(self._buffer[_STREAM_HEADER.size:end])
                    del self._buffer[:end]
                    if stream == 1:
                        return payload
                    if len(self._stderr) < 1 << 16:
                        self._stderr += payload
                    continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            readable, _, _ = select.select([self._socket], [], [], remaining)
            if not readable:
                raise TimeoutError
            chunk = self._socket.recv(1 << 16)
            if not chunk:
                return b""
            self._buffer += chunk

    def kill(self, grace_s: float = 0.0) -> int | None:
        status = None
        with contextlib.suppress(Exception):
            status = self._container.wait(timeout=max(grace_s, 0.1))["StatusCode"]
        with contextlib.suppress(Exception):
            self._container.remove(force=True)
        with contextlib.suppress(OSError):
            self._socket.close()
        return status

    def diagnostics(self) -> str:
        return self._stderr.decode(errors="replace").strip()


def start(config: SandboxConfig) -> DockerTransport:
    """Start one kernel in a fresh container."""
    client = docker_client()
    require_image(client, config.docker_image)
    # The pids cgroup bounds processes; RLIMIT_NPROC would count every uid-65534 process of
    # the host, across containers.
    settings = kernel_settings(config, WORK_DIR, max_processes=None)
    # Owned by the sandbox user: dockerd 20.10 drops a tmpfs `mode=` option (root 0755 then).
    tmpfs_options = f"size={config.work_dir_mb}m,uid={SANDBOX_UID},gid={SANDBOX_UID}"
    container = client.containers.create(
        config.docker_image,
        command=["python3", "-I", "-S", "-B", "-c", KERNEL_PATH.read_text(), json.dumps(settings)],
        stdin_open=True, network_disabled=True, read_only=True,
        user=f"{SANDBOX_UID}:{SANDBOX_UID}",
        working_dir=WORK_DIR, tmpfs={WORK_DIR: tmpfs_options, "/tmp": tmpfs_options},
        mem_limit=f"{config.memory_mb}m", memswap_limit=f"{config.memory_mb}m",
        pids_limit=config.max_processes, nano_cpus=int(config.cpus * 1e9),
        cap_drop=["ALL"], security_opt=["no-new-privileges"], environment={"HOME": WORK_DIR})
    try:
        socket = container.attach_socket(
            params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        container.start()
    except Exception as error:
        with contextlib.suppress(Exception):
            container.remove(force=True)
        lacks = ("it has no python3 on PATH" if "executable file not found" in str(error)
                 else f"{type(error).__name__}: {str(error)[-300:]}")
        raise SandboxStartError(
            f"Docker image {config.docker_image} cannot run the sandbox: {lacks}") from error
    return DockerTransport(container, socket)
