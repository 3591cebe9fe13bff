"""`agent-rl desktop ...`: the desktop env's offline file cache."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="The desktop env's offline file cache.", no_args_is_help=True)
cache_app = typer.Typer(help="Files OSWorld tasks download, served offline.",
                        no_args_is_help=True)
app.add_typer(cache_app, name="cache")
console = Console()


@cache_app.command("add")
def cache_add(
    url: Annotated[str, typer.Argument(help="The URL a task's download step names.")],
    file: Annotated[Path, typer.Argument(help="The file that URL serves (downloaded here).")],
) -> None:
    """Serve FILE whenever a task downloads URL."""
    from envs.desktop import file_cache

    console.print(f"cached {url} as {file_cache.add(url, file)}")


@cache_app.command("list")
def cache_list() -> None:
    """What the cache holds."""
    from envs.desktop import file_cache

    table = Table("url", "name", "sha256", title=str(file_cache.cache_dir()))
    for url, entry in sorted(file_cache.entries().items()):
        table.add_row(url, entry["name"], entry["sha256"][:12])
    console.print(table)
