"""The documentation cannot rot silently: the MkDocs site builds in strict mode (a broken link or
anchor, a page missing from the nav, a snippet that no longer exists all fail the build), every
relative link in the README points at a file that exists (and at a heading that exists, where it
names one), and every run-config knob has a row in docs/training.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from markdown.extensions.toc import slugify
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]

# [text](target); the target stops at whitespace or ")".
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _without_fences(markdown: str) -> str:
    """A Markdown text with its fenced code blocks removed (a `# comment` there is no heading)."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)


def _heading_anchors(markdown_file: Path) -> set[str]:
    """The ids MkDocs gives the headings of a Markdown file (Python-Markdown's toc slugs)."""
    headings = re.findall(r"^#+\s+(.*?)\s*$", _without_fences(markdown_file.read_text()), re.M)
    return {slugify(heading.replace("`", ""), "-") for heading in headings}


def test_the_docs_build_in_strict_mode(tmp_path: Path) -> None:
    # Run from the repository root: the snippets (the README's recipe, the changelog) are read
    # relative to it.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, (
        "mkdocs build --strict failed (a broken link or anchor, or a page missing from the nav "
        "in mkdocs.yml):\n" + done.stdout + done.stderr
    )
    assert (tmp_path / "site" / "results" / "index.html").exists()


def test_every_relative_link_in_the_readme_points_at_an_existing_file() -> None:
    prose = re.sub(r"`[^`\n]*`", "", _without_fences((ROOT / "README.md").read_text()))
    links = MARKDOWN_LINK.findall(prose)
    relative = [link for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert relative, "the README links to no docs page"
    broken = []
    for link in relative:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.exists():
            broken.append(f"{link}: no file {path}")
        elif anchor and target.suffix == ".md" and anchor not in _heading_anchors(target):
            broken.append(f"{link}: {path} has no heading with the anchor #{anchor}")
    assert not broken, "broken links in README.md:\n" + "\n".join(broken)


def _dotted_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys += _dotted_keys(field.annotation, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def test_every_run_config_and_sft_config_key_is_documented_in_training_md() -> None:
    from agent_rl.learn.sft_config import SFTConfig
    from agent_rl.train_config import TrainConfig

    page = (ROOT / "docs" / "training.md").read_text()
    keys = sorted(set(_dotted_keys(TrainConfig)) | set(_dotted_keys(SFTConfig)))
    missing = [key for key in keys if f"`{key}`" not in page]
    assert not missing, (
        "docs/training.md does not document these config keys; add a row to their section's "
        "table: " + ", ".join(missing)
    )
