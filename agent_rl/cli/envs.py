"""`agent-rl env ...`: list the registered environments and run one episode with a policy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import gymnasium
import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from envs.episode import run_episode
from envs.loading import EnvContractError, import_env_module, make_env, registered_env_ids
from envs.policies import OraclePolicy, Policy, load_script
from envs.tasks import CATEGORIES, DATA_DIR, SPLITS, split_sizes

app = typer.Typer(help="List registered envs and run episodes.", no_args_is_help=True)

POLICY_CHOICES = ("oracle", "scripted")
"""Values of `--policy` besides a path to a script file (which means `scripted`)."""

ROLE_STYLES = {"system": "dim", "user": "cyan", "assistant": "green", "tool": "yellow"}


@app.command("list")
def list_envs(
    modules: Annotated[list[str] | None, typer.Option(
        "--import", help="A module that registers envs of your own; repeatable.")] = None,
) -> None:
    """Show the registered environments (ours and those your modules register) and the shipped
    task sets."""
    console = Console()
    for module in modules or []:
        import_env_module(module)
    envs_table = Table(title="Registered environments")
    envs_table.add_column("id")
    envs_table.add_column("entry point")
    for env_id in registered_env_ids():
        envs_table.add_row(env_id, str(gymnasium.spec(env_id).entry_point))
    console.print(envs_table)
    sizes = split_sizes()
    tasks_table = Table(title=f"Task sets ({DATA_DIR})")
    tasks_table.add_column("category")
    for split in SPLITS:
        tasks_table.add_column(split, justify="right")
    for category in CATEGORIES:
        tasks_table.add_row(category, *(str(sizes[(category, split)]) for split in SPLITS))
    console.print(tasks_table)


@app.command("run")
def run(
    env_id: Annotated[str, typer.Argument(
        help="A registered id, e.g. agent_rl/PythonTool-v0, or module:id for an env of your own.")],
    task: Annotated[str | None, typer.Option(help="Task index or task id; default: drawn.")] = None,
    policy: Annotated[
        str, typer.Option(help=f"One of {', '.join(POLICY_CHOICES)}, or a script file path.")
    ] = "oracle",
    script: Annotated[
        Path | None,
        typer.Option(help="Assistant turns for --policy scripted (.jsonl, or text split by ---)."),
    ] = None,
    split: Annotated[str | None, typer.Option(help="Task split for envs that take one.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the task draw.")] = 0,
    max_turns: Annotated[int | None, typer.Option(help="Turn budget of the episode.")] = None,
) -> None:
    """Run one episode and print its transcript."""
    console = Console()
    kwargs: dict[str, Any] = {}
    if split is not None:
        kwargs["split"] = split
    if max_turns is not None:
        kwargs["max_turns"] = max_turns
    try:
        env = make_env(env_id, **kwargs)
    except EnvContractError as error:
        console.print(f"[red]error:[/red] {escape(str(error))}", soft_wrap=True)
        raise typer.Exit(1) from error
    try:
        chosen: Any = int(task) if task is not None and task.isdigit() else task
        if chosen is None:
            env.reset(seed=seed)
            chosen = env.unwrapped.task["task_id"]
        try:
            policy_fn = make_policy(policy, script, env, chosen)
        except (ValueError, FileNotFoundError) as error:
            console.print(f"[red]error:[/red] {escape(str(error))}", soft_wrap=True)
            raise typer.Exit(1) from error
        record = run_episode(env, policy_fn, task=chosen, seed=seed)
    finally:
        env.close()
    for message in record.messages:
        role = message["role"]
        title = f"{role} ({message['name']})" if "name" in message else role
        console.print(Panel(escape(message["content"]), title=title,
                            border_style=ROLE_STYLES.get(role, "white"), title_align="left"))
    if record.stopped:
        console.print(f"[yellow]stopped early:[/yellow] {escape(record.stopped)}")
    verdict = record.step_infos[-1].get("verdict") if record.step_infos else None
    console.print(
        f"reward {record.reward:g}  turns {record.turns}  terminated {record.terminated}  "
        f"truncated {record.truncated}  verdict {escape(json.dumps(verdict))}"
    )


def make_policy(name: str, script: Path | None, env: gymnasium.Env, task: Any) -> Policy:
    """The policy `--policy` names. Raises ValueError naming the valid choices."""
    if name == "oracle":
        env.reset(options={"task": task})
        return OraclePolicy(env.unwrapped.task)
    if name == "scripted":
        if script is None:
            raise ValueError("--policy scripted needs --script FILE with the assistant turns")
        return load_script(script)
    if Path(name).is_file():
        return load_script(name)
    raise ValueError(
        f"unknown policy {name!r}: choose one of {', '.join(POLICY_CHOICES)} or give a script file"
    )
