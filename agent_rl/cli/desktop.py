"""`agent-rl desktop ...`: the desktop env's offline file cache, how much of an OSWorld task
set it runs, and the install of the apps OSWorld's tasks use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(help="The desktop env's offline file cache, its OSWorld coverage and apps.",
                  no_args_is_help=True)
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


@app.command("install-apps")
def install_apps(
    apt: Annotated[bool, typer.Option(
        help="Install the Debian packages too; --no-apt installs only pyautogui for the "
             "desktop's python3.")] = True,
) -> None:
    """Install from Debian every app OSWorld's task domains use (LibreOffice, Chromium, GIMP,
    VLC, Thunderbird, ...) and pyautogui for the desktop's python3. Needs root."""
    from envs.desktop.apps import PYTHON_SITE
    from envs.desktop.install import InstallError, install_desktop_apps

    try:
        install_desktop_apps(apt=apt)
    except InstallError as error:
        console.print(f"[red]{error}[/red]")
        raise typer.Exit(1) from None
    console.print(f"desktop apps installed; pyautogui for the desktop in {PYTHON_SITE}")


@app.command("coverage")
def coverage(
    folder: Annotated[Path, typer.Argument(
        help="OSWorld's evaluation_examples folder (test_all.json, examples/<domain>/<id>.json), "
             "or an OSWorld checkout that holds it.")],
    index: Annotated[str, typer.Option(
        help="The task index in FOLDER: {domain: [task id, ...]}.")] = "test_all.json",
    json_out: Annotated[Path | None, typer.Option(
        "--json", help="Also write the report, every task included, as JSON to this file.")] = None,
    markdown_out: Annotated[Path | None, typer.Option(
        "--markdown", help="Also write the tables as Markdown (the top 20 missing parts) to this "
                           "file.")] = None,
) -> None:
    """Per domain, the tasks whose format this env implements and those that also run here
    (every app they need installed); then every missing step, getter, metric, option and app
    with the number of tasks that need it, and the tasks that need an online account."""
    import json

    from envs.desktop.coverage import coverage_report, load_osworld_tasks

    report = coverage_report(load_osworld_tasks(folder, index))
    domains = report.domains()
    table = Table("domain", "tasks", "format implemented", "runs here", "online (unsupported)",
                  title=f"What runs of OSWorld ({folder / index})")
    for row in domains:
        table.add_row(row.domain, str(row.tasks), str(row.implemented), str(row.runnable),
                      str(row.online))
    total = report.to_json()["total"]
    table.add_row("total", *(str(total[key]) for key in
                             ("tasks", "implemented", "runnable", "online")), style="bold")
    console.print(table)
    if online := report.online_tasks():
        online_table = Table("domain", "task", "needs",
                             title="Need an online account (Google Drive, a login): unsupported")
        for task in online:
            online_table.add_row(task.domain, task.task_id, escape("; ".join(task.online)))
        console.print(online_table)
    parts = Table("kind", "name", "tasks", title="Missing from the env (tasks that use it)")
    for part, count in report.missing_parts():
        # names such as compare_table.rules[chart] hold brackets that rich would read as markup
        parts.add_row(part.kind, escape(part.name), str(count))
    console.print(parts)
    apps = Table("app", "tasks", title="Missing on this machine (tasks that need it)")
    for name, count in report.missing_apps():
        apps.add_row(escape(name), str(count))
    console.print(apps)
    if json_out is not None:
        json_out.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        console.print(f"wrote {json_out}")
    if markdown_out is not None:
        markdown_out.write_text(report.to_markdown())
        console.print(f"wrote {markdown_out}")
