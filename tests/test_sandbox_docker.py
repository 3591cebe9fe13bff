"""The Docker backend, run for real where a daemon answers; skipped, saying why, elsewhere."""

from __future__ import annotations

import pytest

from sandbox import BackendUnavailableError, SandboxConfig, open_session
from sandbox.backends.docker_backend import docker_client

CONFIG = SandboxConfig(backend="docker", timeout_s=5.0, memory_mb=256, max_processes=32,
                       start_timeout_s=60.0)


@pytest.fixture(scope="module")
def docker_image() -> str:
    try:
        client = docker_client()
    except BackendUnavailableError as error:
        pytest.skip(f"Docker backend not testable here: {error}")
    try:
        client.images.get(CONFIG.docker_image)
    except Exception as error:
        pytest.skip(f"image {CONFIG.docker_image} is not present and this machine cannot pull"
                    f" it: {error}")
    return CONFIG.docker_image


def test_docker_session_keeps_state_and_refuses_network(docker_image):
    with open_session(CONFIG) as session:
        session.run("x = 20")
        assert session.run("x + 1").value == "21"
        result = session.run("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)")
        assert not result.ok


def test_docker_session_restarts_after_timeout(docker_image):
    with open_session(CONFIG) as session:
        result = session.run("while True:\n    pass", timeout_s=1.0)
        assert result.timed_out and result.restarted and result.limit == "timeout"
        assert session.run("1 + 1").value == "2"


def test_docker_root_is_read_only(docker_image):
    with open_session(CONFIG) as session:
        assert not session.run("open('/etc/escape', 'w')").ok
        session.write_file("in.txt", b"ok")
        assert session.read_file("in.txt") == b"ok"
