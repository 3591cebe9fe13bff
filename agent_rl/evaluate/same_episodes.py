"""Whether two evaluations played the same episodes, turn for turn.

Two paths that should sample the same tokens (the env loop and an agent over the OpenAI endpoint,
two runs of one seed) are checked on their transcripts: an episode matches when its decoded
segments, model and env, are the same text, with the same token counts, turns, end and reward.
The text is decoded from the recorded ids, so equal text with equal counts is what equal ids
look like from the outside. Tool-call counts are left out: the endpoint counts each well-formed
call, the env loop each call it ran (docs/own-agent.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_rl.evaluate.report import REPORT_FILE, TRANSCRIPTS_FILE

__all__ = ["EpisodeMatch", "same_episodes"]

COMPARED = ("transcript", "num_model_tokens", "num_tokens", "num_turns", "end_reason", "reward")


@dataclass
class EpisodeMatch:
    """How many of the episodes the two evaluations share are identical, and which differ."""

    identical: int
    shared: int
    only_in_one: int
    differing: list[str] = field(default_factory=list)  # "task_id#sample: first differing field"

    def line(self, first: str, second: str) -> str:
        text = (f"episodes identical between {first} and {second}: {self.identical}/{self.shared}"
                f" ({', '.join(COMPARED)})")
        if self.only_in_one:
            text += f"; {self.only_in_one} played by only one of them"
        if self.differing:
            text += "; first differing: " + ", ".join(self.differing[:3])
        return text


def _episodes(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    folder = path.parent if path.name == REPORT_FILE else path
    transcripts = folder / TRANSCRIPTS_FILE
    if not transcripts.is_file():
        raise FileNotFoundError(f"no {TRANSCRIPTS_FILE} in {folder}: `agent-rl eval --out DIR` "
                                "writes one")
    episodes = {}
    with transcripts.open() as handle:
        for line in handle:
            record = json.loads(line)
            episodes[(record["task_id"], int(record["sample_index"]))] = record
    return episodes


def same_episodes(first: Path, second: Path) -> EpisodeMatch:
    """Compare the transcripts of two evaluation folders (or their report.json paths)."""
    a, b = _episodes(Path(first)), _episodes(Path(second))
    shared = sorted(a.keys() & b.keys())
    differing = []
    for key in shared:
        field_name = next((name for name in COMPARED if a[key].get(name) != b[key].get(name)),
                          None)
        if field_name is not None:
            differing.append(f"{key[0]}#{key[1]}: {field_name}")
    return EpisodeMatch(identical=len(shared) - len(differing), shared=len(shared),
                        only_in_one=len(a.keys() ^ b.keys()), differing=differing)
