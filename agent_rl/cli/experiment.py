"""`agent-rl experiment ...`: the project's experiments, each one command that resumes."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

console = Console()
app = typer.Typer(help="Run the project's experiments (each resumes and skips what is done).",
                  no_args_is_help=True)


@app.command("lag64")
def lag64_command(
    config_path: Annotated[Path, typer.Argument(
        help="The matched arm's run config, e.g. configs/lag64.yaml; the other arms are "
        "overrides of it.")],
    out: Annotated[Path, typer.Option(help="Each arm goes to OUT/<arm>/, the ablation's JSON "
                                      "and PNG to OUT/.")] = Path("runs/lag64"),
    arms: Annotated[str, typer.Option(help="Comma-separated arms to run.")
                    ] = "matched,stock,stock_tis",
    sft: Annotated[Path | None, typer.Option(
        help="The SFT start of every arm (an `agent-rl sft` run dir or a HF folder); default: "
        "the main job's runs/demo/sft once finished, else one made in OUT/sft.")] = None,
    sft_config: Annotated[Path, typer.Option(
        help="The SFT config used when the command makes the start.")] = Path("configs/sft.yaml"),
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config key in every arm: --set pipeline.num_updates=64.")
    ] = None,
    block: Annotated[int, typer.Option(min=1, help="Updates per block of KL and reward.")] = 16,
) -> None:
    """Matched against stock kernels at a lag that reaches 64: three arms from one SFT start,
    the method's measures side by side in OUT/lag64_ablation.json and .png."""
    from agent_rl.config import parse_key_values
    from agent_rl.diagnostics.lag64 import ABLATION_JSON, ABLATION_PNG, run_lag64

    signal.signal(signal.SIGINT, signal.default_int_handler)  # a backgrounded run stops cleanly

    def on_update(arm: str, metrics: dict) -> None:
        console.print(
            f"{arm} update {metrics.get('step')}: reward "
            f"{metrics.get('charts/reward_mean', float('nan')):.3f}  IS max/med "
            f"{metrics.get('is/max_over_median', float('nan')):.3f}  lag max "
            f"{metrics.get('lag/max', 0)}  lag>=32 {metrics.get('lag/share_ge_32', 0):.0%}")

    result = run_lag64(
        config_path, out, tuple(arm.strip() for arm in arms.split(",") if arm.strip()),
        overrides=parse_key_values(overrides or [], "--set"), sft=sft, sft_config=sft_config,
        block=block, on_status=lambda text: console.print(f"[bold]{text}[/bold]"),
        on_update=on_update)
    table = Table("arm", "updates", "lag max", "tokens lag>=32", "IS max/median peak",
                  "KL last/first block", "grad norm max", "held-out pass@1", "vs SFT (95% CI)",
                  title=f"lag-64 ablation (SFT start: {result['sft']['heldout_macro_pass@1']:.1%}"
                  " held-out)")

    def cell(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    for arm, figures in result["arms"].items():
        low, high = figures["heldout_ci95_vs_sft"]
        table.add_row(arm, str(figures["updates"]), str(figures["lag_max"]),
                      cell(figures["share_tokens_lag_ge_32"], ".0%"),
                      cell(figures["is_max_over_median_peak"], ".3g"),
                      cell(figures["kl_last_over_first_block"], ".3g"),
                      cell(figures["grad_norm_preclip_max"], ".3g"),
                      f"{figures['heldout_macro_pass@1']:.1%}",
                      f"{figures['heldout_diff_vs_sft']:+.1f} [{low:+.1f}, {high:+.1f}]")
    console.print(table)
    console.print(f"wrote {out / ABLATION_JSON} and {out / ABLATION_PNG}")
