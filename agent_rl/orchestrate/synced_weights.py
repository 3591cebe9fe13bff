"""The weights the rollout last took, kept so a resumed run samples from them again.

With `pipeline.weight_sync_every: K` the actors sample from the weights of the last multiple of
K, not the learner's. A resumed run that gave its actors the learner's newest weights would
restart the lag from 0 and never reach the lag it was configured for. The learner's checkpoint
holds only its own version, so each sparse sync also writes the published weights here; the
initial weights (version 0) need no copy, the actors start on them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

SYNCED_WEIGHTS = "synced_weights.pt"


def last_sync_version(version: int, weight_sync_every: int) -> int:
    """The version the actors hold after `version` updates: the last one a sync sent out."""
    return version - version % weight_sync_every


def save_synced_weights(run_dir: Path, version: int, weights: dict[str, torch.Tensor]) -> None:
    """Replace the kept copy; written beside it and renamed, so a kill leaves the old one."""
    final = Path(run_dir) / SYNCED_WEIGHTS
    partial = final.with_name(f".partial_{SYNCED_WEIGHTS}")
    torch.save({"version": version, "weights": weights}, partial)
    os.replace(partial, final)


def load_synced_weights(run_dir: Path, version: int) -> dict[str, torch.Tensor] | None:
    """The weights published at `version`, or None when this run kept no copy of them."""
    path = Path(run_dir) / SYNCED_WEIGHTS
    if not path.exists():
        return None
    saved = torch.load(path, map_location="cpu", weights_only=True)
    return saved["weights"] if saved["version"] == version else None
