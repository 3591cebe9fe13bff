"""The files OSWorld tasks fetch from the web, served offline from a local cache keyed by URL.

OSWorld's `download` step fetches task files (photos, documents) from the web when a task
starts, and its `cloud_file` getter fetches the expected files when it is scored. Training
machines are often offline, so the env serves each URL from this cache instead; a machine with
internet fills it (`agent-rl desktop cache add URL FILE`), and the cache folder can be copied to
the machines that train. The cache lives in `AGENT_RL_HOME/desktop-files`
(default `~/.cache/agent-rl/desktop-files`): one file per URL, named by the URL's SHA-256, and an
`index.json` from URL to file name and checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from envs.errors import EnvsError

__all__ = [
    "MissingDownload",
    "add",
    "cache_dir",
    "entries",
    "explain_missing",
    "lookup",
    "missing_downloads",
    "task_urls",
]


class MissingDownload(EnvsError):
    """A task downloads a URL that the offline cache does not hold."""


def cache_dir() -> Path:
    """Under agent-rl's cache home, found by the rule of `agent_rl.model_store.agent_rl_home`
    (restated: envs never import agent_rl)."""
    home = os.environ.get("AGENT_RL_HOME")
    root = Path(home).expanduser() if home else Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agent-rl"
    return root / "desktop-files"


def _key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


def _index(folder: Path) -> dict[str, dict[str, str]]:
    path = folder / "index.json"
    return json.loads(path.read_text()) if path.exists() else {}


def add(url: str, file: str | Path, folder: Path | None = None) -> Path:
    """Keep a copy of `file` as what `url` serves; returns the cached copy."""
    folder = folder or cache_dir()
    file = Path(file)
    if not file.is_file():
        raise MissingDownload(f"{file} is not a file; download {url} to a file first")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / _key(url)
    shutil.copyfile(file, target)
    index = _index(folder)
    index[url] = {"file": target.name, "name": file.name,
                  "sha256": hashlib.sha256(target.read_bytes()).hexdigest()}
    (folder / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return target


def lookup(url: str, folder: Path | None = None) -> Path | None:
    """The cached file for `url`, or None."""
    folder = folder or cache_dir()
    entry = _index(folder).get(url)
    path = folder / entry["file"] if entry else None
    return path if path is not None and path.is_file() else None


def entries(folder: Path | None = None) -> dict[str, dict[str, str]]:
    """URL -> {file, name, sha256} for everything cached."""
    return _index(folder or cache_dir())


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def task_urls(task: dict[str, Any]) -> list[Any]:
    """Every URL `task` fetches: those of its download steps (set-up and post-config) and
    those of its `cloud_file` getters (each file of a `multi` one, as OSWorld fetches them all,
    not only those it `gives`). A malformed entry is kept as it is, for the caller to name."""
    evaluator = task.get("evaluator", {})
    steps = [*task.get("config", []), *evaluator.get("postconfig", [])]
    urls = [entry.get("url") for step in steps if step.get("type") == "download"
            for entry in step.get("parameters", {}).get("files", [])]
    getters = [getter for key in ("result", "expected") for getter in
               _as_list(evaluator.get(key)) if isinstance(getter, dict)]
    urls += [url for getter in getters if getter.get("type") == "cloud_file"
             for url in _as_list(getter.get("path"))]
    return urls


def missing_downloads(task: dict[str, Any], folder: Path | None = None) -> list[Any]:
    """The URLs `task` fetches (`task_urls`) that the cache lacks, in order, each once."""
    missing: list[Any] = []
    for url in task_urls(task):
        if (not isinstance(url, str) or lookup(url, folder) is None) and url not in missing:
            missing.append(url)
    return missing


def explain_missing(task_id: str | None, urls: list[Any]) -> str:
    """One message naming every URL the cache lacks and how to add them."""
    who = "the task" if task_id is None else f"task {task_id!r}"
    return (f"{who} fetches {len(urls)} file(s) the offline cache {cache_dir()} lacks: "
            f"{', '.join(map(str, urls))}; on a machine with internet run `curl -L -o FILE "
            "URL && agent-rl desktop cache add URL FILE` for each, then copy the cache folder "
            "here")
