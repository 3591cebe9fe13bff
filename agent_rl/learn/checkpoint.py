"""Checkpoints a killed run can resume from without training twice on a group or losing one.

A checkpoint is a folder `checkpoints/update_NNNNNN/` holding the learner (model, optimizer,
policy version), the RNG states, and `run_state.json`: what the caller needs to go on (the
pipeline's `RunState`: the ledger, the data position and the groups generated but not yet
trained, kept so none is lost), as plain JSON, so that checkpoints know nothing of the
pipeline. It is
written to a temporary folder and renamed into place, so a kill mid-write leaves the previous
checkpoint intact.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agent_rl.errors import UserError

logger = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"
PREFIX = "update_"


class CheckpointWriteError(UserError, OSError):
    """A checkpoint could not be written (a full disk, no permission); the previous one is kept."""


def save_checkpoint(
    run_dir: Path, learner_state: dict[str, Any], run_state: dict[str, Any], keep: int = 2
) -> Path:
    """Write a checkpoint for the learner's current version; keep only the newest `keep`."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{learner_state['version']:06d}"
    partial = root / f".partial_{final.name}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        partial.mkdir()
        torch.save(learner_state, partial / "learner.pt")
        torch.save(_rng_state(), partial / "rng.pt")
        (partial / "run_state.json").write_text(json.dumps(run_state, default=str))
    except (OSError, RuntimeError) as error:
        # torch.save reports a full disk as a RuntimeError from its zip writer.
        shutil.rmtree(partial, ignore_errors=True)
        free_mb = shutil.disk_usage(root).free / 2**20
        previous = latest_checkpoint(run_dir)
        raise CheckpointWriteError(
            f"could not write checkpoint {final} ({error}); {free_mb:.0f} MB free there; the "
            f"newest complete checkpoint is {previous or 'none'}; free disk space or point "
            "out_dir elsewhere, then run again to resume"
        ) from error
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old)
    logger.info("checkpoint written: %s", final)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.exists():
        return []
    return sorted(path for path in root.iterdir() if path.name.startswith(PREFIX))


def checkpoint_version(path: Path) -> int:
    """The learner version a checkpoint folder holds (its name ends in the version)."""
    return int(Path(path).name.removeprefix(PREFIX))


def latest_checkpoint(run_dir: Path) -> Path | None:
    checkpoints = list_checkpoints(run_dir)
    return checkpoints[-1] if checkpoints else None


def load_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The learner state (for `Learner.load_state_dict`) and the run state as saved; restores
    RNG states."""
    path = Path(path)
    missing = [n for n in ("learner.pt", "rng.pt", "run_state.json") if not (path / n).exists()]
    if missing:
        raise FileNotFoundError(f"checkpoint {path} is incomplete, missing {missing}; delete it")
    # On the CPU whatever device wrote it: the learner copies it onto its own device.
    learner_state = torch.load(path / "learner.pt", map_location="cpu", weights_only=True)
    # Our own file: numpy's RNG state is an ndarray, which weights_only refuses.
    _restore_rng_state(torch.load(path / "rng.pt", weights_only=False))
    return learner_state, json.loads((path / "run_state.json").read_text())


def _rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def _restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])

