"""The Docker sandbox's image, built with no image registry: Debian's own packages, debootstrapped
into a folder and imported into the local Docker daemon.

The recipe (suite, variant, packages, mirror) is pinned here; its hash is a label on the image,
so a build whose recipe has not changed is skipped, and a changed recipe builds a new image.
Building needs root (debootstrap), a running daemon and the Debian mirror; nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.errors import BackendUnavailableError, SandboxError

IMAGE = "agent-rl/sandbox-python:3.11"
RECIPE = {
    "suite": "bookworm",  # Debian 12: python3 is 3.11, the version the rollout side runs
    "variant": "minbase",
    "packages": ["python3"],  # the interpreter and its full standard library
    "mirror": "http://deb.debian.org/debian",
}
RECIPE_LABEL = "agent-rl.sandbox.recipe"
# Bytes the sandbox never needs: package caches and docs (the image stays ~120 MB).
_PRUNE = ["var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
          "usr/share/locale", "usr/share/info"]


class ImageBuildError(SandboxError, RuntimeError):
    """The image could not be built: a missing tool, no root, no mirror, or a daemon error."""


def recipe_hash(recipe: dict[str, Any] = RECIPE) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def image_is_current(client: Any, image: str = IMAGE) -> bool:
    """Whether `image` exists and was built from this recipe."""
    try:
        labels = client.images.get(image).labels or {}
    except Exception:  # docker.errors.ImageNotFound, or an API error: build it
        return False
    return labels.get(RECIPE_LABEL) == recipe_hash()


def build_image(client: Any, image: str = IMAGE, force: bool = False,
                log: Callable[[str], None] = print) -> list[str]:
    """Build `image` from the recipe unless it is current; returns the image's package list
    ("name version" lines, as dpkg has them), empty when the build was skipped."""
    if not force and image_is_current(client, image):
        log(f"{image} is current (recipe {recipe_hash()}); nothing to build")
        return []
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed: apt-get install debootstrap")
    with tempfile.TemporaryDirectory(prefix="agent-rl-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        log(f"debootstrap {RECIPE['suite']} ({RECIPE['variant']}, + {RECIPE['packages']}) "
            f"from {RECIPE['mirror']}")
        done = subprocess.run(
            ["debootstrap", f"--variant={RECIPE['variant']}",
             f"--include={','.join(RECIPE['packages'])}", RECIPE["suite"], str(root),
             RECIPE["mirror"]], capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageBuildError(f"debootstrap failed ({done.returncode}): "
                                  f"{(done.stderr or done.stdout).strip()[-800:]}")
        packages = _package_list(root)
        for relative in _PRUNE:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(root / relative)
        tarball = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(tarball), "."],
                       check=True)
        repository, _, tag = image.partition(":")
        client.api.import_image(src=str(tarball), repository=repository, tag=tag or "latest",
                                changes=[f"LABEL {RECIPE_LABEL}={recipe_hash()}",
                                         'CMD ["python3"]'])
    log(f"built {image}: {len(packages)} packages, "
        f"{next((p for p in packages if p.startswith('python3.11 ')), 'python3.11 ?')}")
    return packages


def _package_list(root: Path) -> list[str]:
    done = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "-f", "${Package} ${Version}\n"],
                          capture_output=True, text=True)
    return sorted(done.stdout.split("\n")[:-1]) if done.returncode == 0 else []


def require_image(client: Any, image: str) -> None:
    """Raise a one-line error naming `image` and how to get it when the daemon lacks it."""
    try:
        client.images.get(image)
    except Exception as error:
        hint = ("build it with `agent-rl sandbox image build`" if image == IMAGE
                else f"docker pull {image}, or use the default {IMAGE}")
        raise BackendUnavailableError(
            f"Docker image {image} is not on this daemon ({type(error).__name__}); {hint}") from error
