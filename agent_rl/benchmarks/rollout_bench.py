"""Rollout throughput: the actor's generated tokens/s against transformers `generate`.

Both sample the same number of tokens per sequence (stop tokens ignored until `max_tokens`) from
the same model and prompt at the same batch size, in one process, one after the other. The actor
runs real episodes (a one-turn env, chat template, per-token logprobs), so its figure includes
everything a training run pays for except the tool's own time.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from agent_rl.model_store import resolve_model
from agent_rl.rollout.actor import RolloutActor
from agent_rl.rollout.chat_tokens import ChatTokens
from agent_rl.rollout.config import RolloutConfig
from agent_rl.rollout.engine import EngineConfig
from agent_rl.rollout.weight_sync import cpu_state_dict

PROMPT = "Write a short story about a robot who learns to count."


class OneTurnEnv:
    """Description: one user prompt, one assistant turn, then the episode ends (reward 0)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return [{"role": "user", "content": PROMPT}], {"task_id": "bench", "category": "bench"}

    def step(self, action: str):
        return [], 0.0, True, False, {}

    def close(self) -> None:
        pass


def run(
    console: Console,
    model_dir: str | Path,
    concurrency: tuple[int, ...] = (8, 32, 64),
    max_tokens: int = 128,
    dtype: str = "float32",
    compiled: bool = False,
) -> list[dict[str, Any]]:
    """Measure actor and `generate` tokens/s at each batch size, and one weight update; with
    `compiled`, the actor again with vLLM's torch.compile, against the same `generate` figures."""
    path = resolve_model(model_dir, dtype)
    rows = asyncio.run(_measure(console, path, concurrency, max_tokens, dtype, compiled))
    table = Table(title=f"rollout tokens/s ({path.name}, {dtype}, {max_tokens} tok/seq)")
    for column in ("case", "engine", "batch", "actor tok/s", "generate tok/s", "actor / generate",
                   "s"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["case"],
            row.get("engine", ""),
            str(row.get("batch", "")),
            _fmt(row.get("actor_tok_s")),
            _fmt(row.get("generate_tok_s")),
            _fmt(row.get("speedup"), 2),
            _fmt(row.get("seconds"), 3),
        )
    console.print(table)
    return rows


async def _measure(
    console: Console, model_dir: Path, concurrency: tuple[int, ...], max_tokens: int, dtype: str,
    compiled: bool,
) -> list[dict[str, Any]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    engine_config = EngineConfig(
        model=str(model_dir),
        dtype=dtype,
        lm_head_fp32=dtype == "float32",
        max_model_len=1024,
        max_num_seqs=max(concurrency),
        kv_cache_gib=2.0,
        cpu_cores="all",  # `generate` gets every core too
    )
    rollout_config = RolloutConfig(
        max_tokens_per_turn=max_tokens, min_tokens_per_turn=max_tokens, seed=0
    )
    # transformers runs first, with no engine alive: vLLM's idle worker keeps polling and would
    # steal one of the two cores from `generate`.
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt_ids = ChatTokens(tokenizer).opening_ids([{"role": "user", "content": PROMPT}])
    generate_tok_s = {}
    for batch in concurrency:
        generate_tok_s[batch] = _generate_tokens_per_s(model, prompt_ids, batch, max_tokens)
        console.log(f"generate batch {batch}: {generate_tok_s[batch]:.1f} tok/s")
    weights = cpu_state_dict(model)
    del model

    rows: list[dict[str, Any]] = []
    for eager in (True, False) if compiled else (True,):
        config = engine_config.model_copy(update={"enforce_eager": eager})
        rows += await _measure_actor(console, config, rollout_config, concurrency,
                                     generate_tok_s, weights)
    return rows


async def _measure_actor(
    console: Console, engine_config: EngineConfig, rollout_config: RolloutConfig,
    concurrency: tuple[int, ...], generate_tok_s: dict[int, float], weights: dict[str, Any],
) -> list[dict[str, Any]]:
    engine = "eager" if engine_config.enforce_eager else "compiled"
    actor = RolloutActor(engine_config, rollout_config, env_factory=OneTurnEnv, name="bench")
    started = time.perf_counter()
    await actor.start()
    console.log(f"{engine} engine started in {time.perf_counter() - started:.1f}s")
    rows: list[dict[str, Any]] = []
    try:
        await actor.generate_group(None, 2)  # warm-up
        for batch in concurrency:
            actor_tok_s = await _actor_tokens_per_s(actor, batch)
            rows.append(
                {
                    "case": "throughput",
                    "engine": engine,
                    "batch": batch,
                    "actor_tok_s": actor_tok_s,
                    "generate_tok_s": generate_tok_s[batch],
                    "speedup": actor_tok_s / generate_tok_s[batch],
                }
            )
            console.log(rows[-1])
        timing = await actor.update_weights(actor.policy_version + 1, weights)
        rows.append({"case": "weight_update", "engine": engine, "seconds": timing.total_s,
                     **vars(timing)})
    finally:
        await actor.shutdown()
    return rows


async def _actor_tokens_per_s(actor: RolloutActor, batch: int) -> float:
    started = time.perf_counter()
    group = await actor.generate_group(None, batch)
    elapsed = time.perf_counter() - started
    return sum(t.num_model_tokens for t in group.trajectories) / elapsed


def _generate_tokens_per_s(model: Any, prompt_ids: list[int], batch: int, max_tokens: int) -> float:
    input_ids = torch.tensor([prompt_ids] * batch)
    with torch.no_grad():
        started = time.perf_counter()
        output = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_tokens,
            min_new_tokens=max_tokens,
            do_sample=True,
            top_k=0,
        )
        elapsed = time.perf_counter() - started
    return (output.shape[1] - input_ids.shape[1]) * batch / elapsed


def _fmt(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    import sys

    run(Console(), sys.argv[1] if len(sys.argv) > 1 else "default")
