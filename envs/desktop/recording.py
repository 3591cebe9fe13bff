"""Episode recordings: the actions, observations and screenshots of one desktop episode.

A recording folder holds `step_000.png` (the screen after reset), `step_001.png`, ... one per
turn, `episode.json` with every turn's text, and, once the episode ends, `index.html` (open it in
a browser) and `contact_sheet.png` (all screenshots as a labelled grid).
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

__all__ = ["EpisodeRecorder", "RecordedStep", "contact_sheet", "write_html"]

_PNG_COMPRESS_LEVEL = 1  # fast: a step must stay well under 300 ms on 2 cores


@dataclass
class RecordedStep:
    """One turn: what the model wrote, the actions run, what it was told back, the screen."""

    index: int
    assistant_text: str
    actions: list[dict[str, Any]]
    feedback: str
    observation: str
    screenshot: str
    reward: float = 0.0
    seconds: float = 0.0


@dataclass
class EpisodeRecorder:
    """Collects an episode's steps into `folder`; `finish()` writes the HTML and contact sheet."""

    folder: Path
    task: dict[str, Any]
    steps: list[RecordedStep] = field(default_factory=list)
    outcome: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def save_screenshot(self, image: Image.Image, index: int) -> Path:
        path = self.folder / f"step_{index:03d}.png"
        image.save(path, compress_level=_PNG_COMPRESS_LEVEL)
        return path

    def add(self, step: RecordedStep) -> None:
        self.steps.append(step)

    def finish(self, **outcome: Any) -> Path:
        """Write episode.json, index.html and contact_sheet.png; returns the HTML path."""
        self.outcome = outcome
        record = {
            "task": self.task,
            "outcome": outcome,
            "steps": [asdict(step) for step in self.steps],
        }
        (self.folder / "episode.json").write_text(json.dumps(record, indent=1))
        images = [self.folder / step.screenshot for step in self.steps]
        labels = [_label(step) for step in self.steps]
        contact_sheet(images, labels).save(self.folder / "contact_sheet.png")
        page = self.folder / "index.html"
        page.write_text(write_html(self.task, self.steps, outcome))
        return page


def _label(step: RecordedStep) -> str:
    names = ", ".join(action.get("name", "?") for action in step.actions) or "reset"
    return f"{step.index}: {names}"


def contact_sheet(
    images: list[Path], labels: list[str], columns: int = 4, thumb_width: int = 320
) -> Image.Image:
    """The screenshots as a grid of thumbnails, each captioned with its step and actions."""
    if not images:
        return Image.new("RGB", (thumb_width, 40), "white")
    thumbs = []
    for path in images:
        with Image.open(path) as image:
            scale = thumb_width / image.width
            thumbs.append(image.resize((thumb_width, round(image.height * scale))))
    caption, thumb_height = 16, max(thumb.height for thumb in thumbs)
    rows = (len(thumbs) + columns - 1) // columns
    sheet = Image.new("RGB", (columns * thumb_width, rows * (thumb_height + caption)), "white")
    draw = ImageDraw.Draw(sheet)
    for index, (thumb, label) in enumerate(zip(thumbs, labels, strict=True)):
        x = (index % columns) * thumb_width
        y = (index // columns) * (thumb_height + caption)
        draw.text((x + 4, y + 2), label[:48], fill="black")
        sheet.paste(thumb, (x, y + caption))
    return sheet


def write_html(task: dict[str, Any], steps: list[RecordedStep], outcome: dict[str, Any]) -> str:
    """A self-contained page: the instruction, the outcome, then each turn with its screenshot."""
    escape = html.escape
    parts = [
        "<!doctype html><meta charset='utf-8'>",
        f"<title>{escape(str(task.get('id', 'episode')))}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
        "pre{background:#f4f4f4;padding:6px;white-space:pre-wrap}"
        "img{max-width:100%;border:1px solid #999}</style>",
        f"<h1>{escape(str(task.get('id', '')))}</h1>",
        f"<p><b>Instruction:</b> {escape(str(task.get('instruction', '')))}</p>",
        f"<p><b>Outcome:</b> {escape(json.dumps(outcome))}</p>",
    ]
    for step in steps:
        parts += [
            f"<h2>Step {step.index}</h2>",
            f"<p>reward {step.reward:g}, {step.seconds * 1000:.0f} ms</p>",
            f"<details><summary>model output</summary><pre>{escape(step.assistant_text)}</pre></details>",
            f"<pre>{escape(json.dumps(step.actions))}</pre>",
            f"<pre>{escape(step.feedback)}</pre>",
            f"<details><summary>observation</summary><pre>{escape(step.observation)}</pre></details>",
            f"<img src='{escape(step.screenshot)}' loading='lazy'>",
        ]
    return "\n".join(parts)
