"""`agent-rl config ...`: rewrite a run config of the flat layout as the config tree."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console

from agent_rl.config import ConfigError

app = typer.Typer(help="Check and migrate run configs.", no_args_is_help=True)


@app.command("migrate")
def migrate_command(
    path: Annotated[Path, typer.Argument(help="A run config written before the config tree.")],
    in_place: Annotated[bool, typer.Option(help="Rewrite the file instead of printing it.")] = False,
) -> None:
    """Move every flat key to its section (lr -> learner.lr, ...) and check the result. The
    file's leading comment block is kept; comments between keys are not."""
    from agent_rl.config import validate_config
    from agent_rl.train_config import TrainConfig, migrate_flat_config

    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of keys to values")
    tree = migrate_flat_config(data)
    validate_config(tree, TrainConfig, source=f"{path} (migrated)")
    header = "".join(line + "\n" for line in _leading_comments(text))
    migrated = header + yaml.dump(tree, Dumper=_Dumper, sort_keys=False)
    if in_place:
        path.write_text(migrated)
        Console(stderr=True).print(f"rewrote {path}")
    else:
        typer.echo(migrated, nl=False)


class _Dumper(yaml.SafeDumper):
    """Block style, except lists of scalars on one line (`[a, b]`), as configs are written."""


def _represent_list(dumper: yaml.SafeDumper, items: list) -> yaml.Node:
    flat = all(not isinstance(item, dict | list) for item in items)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=flat)


_Dumper.add_representer(list, _represent_list)


def _leading_comments(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines
