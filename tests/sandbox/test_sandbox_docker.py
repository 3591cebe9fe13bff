"""What matters for containers beyond the shared behaviour suite (`test_sandbox.py` runs that on
Docker too): no capabilities, limits enforced by cgroups, and an image that cannot run the kernel
named in a one-line error. Run for real where a daemon answers and the sandbox image is built
(`.ci/run` does both); skipped, saying why, elsewhere."""

from __future__ import annotations

import io
import tarfile

import pytest
from test_sandbox import LIMITS, backend_unavailable

from sandbox import SandboxConfig, SandboxStartError, open_session

CONFIG = SandboxConfig(backend="docker", start_timeout_s=60.0, **LIMITS)


@pytest.fixture(scope="module")
def client():
    if reason := backend_unavailable("docker"):
        pytest.skip(reason)
    from sandbox.backends.docker_backend import docker_client

    return docker_client()


def test_the_container_has_no_capabilities_and_no_new_privileges(client):
    with open_session(CONFIG) as session:
        status = session.run(
            "fields = dict(line.split(':\\t', 1) for line in open('/proc/self/status')"
            " if ':\\t' in line)\n"
            "{key: fields[key].strip() for key in ('CapEff', 'CapPrm', 'NoNewPrivs', 'Uid')}").value
    fields = eval(status)
    assert int(fields["CapEff"], 16) == 0 and int(fields["CapPrm"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Uid"].split()[0] == "65534"


def test_cgroups_bound_the_containers_processes_and_memory(client):
    with open_session(CONFIG) as session:
        # cgroup v1 (as dockerd runs here) or v2 paths
        pids = session.run("import pathlib\nnext(p.read_text().strip() for p in map(pathlib.Path,"
                           " ['/sys/fs/cgroup/pids/pids.max', '/sys/fs/cgroup/pids.max'])"
                           " if p.exists())").value
        memory = session.run("next(p.read_text().strip() for p in map(pathlib.Path, "
                             "['/sys/fs/cgroup/memory/memory.limit_in_bytes',"
                             " '/sys/fs/cgroup/memory.max']) if p.exists())").value
    assert pids == repr(str(CONFIG.max_processes))
    assert memory == repr(str(CONFIG.memory_mb * 2**20))


def test_an_image_without_python_is_one_error_naming_it(client):
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w"):
        pass  # an empty root file system
    client.api.import_image_from_data(archive.getvalue(), repository="agent-rl/test-no-python",
                                      tag="1")
    config = SandboxConfig(backend="docker", docker_image="agent-rl/test-no-python:1",
                           start_timeout_s=30.0)
    try:
        with pytest.raises(SandboxStartError, match="agent-rl/test-no-python:1 cannot run the "
                                                    "sandbox: it has no python3 on PATH"):
            open_session(config)
    finally:
        client.images.remove("agent-rl/test-no-python:1", force=True)


def test_a_missing_image_says_how_to_build_it(client):
    from sandbox import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match="not on this daemon.*docker pull"):
        open_session(SandboxConfig(backend="docker", docker_image="agent-rl/nowhere:0"))
