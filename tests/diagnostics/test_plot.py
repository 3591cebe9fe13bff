"""`agent-rl plot`: the reward table weights every response once, and the PNGs get written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_rl.diagnostics.plot import (
    lag_histogram,
    lag_token_shares,
    learning_summary,
    plot_run,
    reward_blocks,
)


def _records() -> list[dict]:
    # Update 1 saw 4 responses (flat groups charted with it), the others 2 each.
    rewards = [(0.0, 4), (1.0, 2), (0.5, 2), (1.0, 2)]
    return [{"step": i + 1, "charts/reward_mean": reward, "charts/responses": responses,
             "charts/groups": responses // 2, "charts/zero_variance_groups": responses // 4,
             "is/max": 1.0 + i / 10, "is/max_over_median": 1.0 + i / 5, "lag/max": i}
            for i, (reward, responses) in enumerate(rewards)]


def test_reward_blocks_weight_each_response_once_and_keep_the_worst_corrections() -> None:
    rows = reward_blocks(_records(), block=2)
    assert [(r["first"], r["last"], r["responses"]) for r in rows] == [(1, 2, 6), (3, 4, 4)]
    assert rows[0]["reward_mean"] == pytest.approx(2 / 6)
    assert rows[1]["reward_mean"] == pytest.approx(0.75)
    assert [(r["groups"], r["flat_groups"], r["lag_max"]) for r in rows] == [(3, 1, 1), (2, 0, 3)]
    assert rows[0]["is_max"] == pytest.approx(1.1)
    assert rows[1]["is_max_over_median"] == pytest.approx(1.6)
    assert [r["task_reward_mean"] for r in rows] == [r["reward_mean"] for r in rows]


def test_task_reward_adds_back_the_format_penalty() -> None:
    records = [{**r, "charts/format_penalty_mean": 0.25} for r in _records()]
    rows = reward_blocks(records, block=2)
    assert rows[0]["task_reward_mean"] == pytest.approx(2 / 6 + 0.25)
    assert learning_summary(records, block=4)["task_reward_per_block"] == [0.75]


def test_plot_run_writes_the_reward_chart_with_a_running_mean(tmp_path: Path) -> None:
    keys = ("charts/reward_mean", "charts/responses")
    records = [{"step": i + 1, **{key: r[key] for key in keys}}
               for i, r in enumerate(_records() * 6)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    written = plot_run(tmp_path)
    assert [p.name for p in written] == ["reward.png"] and written[0].stat().st_size > 0


def test_learning_summary_sets_the_last_fifth_of_updates_against_the_first() -> None:
    records = _records() * 5  # 20 updates: the first fifth is updates 1-4, the last 17-20
    records[-1] = {**records[-1], "is/lag0_max_abs_log": 0.0, "is/lag0_tokens": 9}
    summary = learning_summary(records, block=10)
    assert summary["updates"] == 20 and summary["block"] == 4
    assert summary["reward_first20"] == pytest.approx(5 / 10)
    assert summary["reward_last20"] == pytest.approx(5 / 10) and summary["ratio"] == pytest.approx(1)
    assert summary["is_max_over_median_max"] == pytest.approx(1.6)
    assert summary["updates_is_over_1.5"] == 5 and summary["lag_max"] == 3
    assert summary["lag0_max_abs_log_max"] == 0.0 and summary["updates_with_lag0_tokens"] == 1
    assert summary["tool_use_share_first20"] is None
    assert len(summary["reward_per_block"]) == 2


def test_lag_shares_count_every_trained_token_of_the_run() -> None:
    records = [{"step": 1, "charts/reward_mean": 0.5, "lag/hist": {"0": 6, "20": 2}},
               {"step": 2, "charts/reward_mean": 0.5, "lag/hist": {"40": 1, "50": 1}}]
    assert lag_histogram(records) == {"0": 6, "20": 2, "40": 1, "50": 1}
    assert lag_token_shares(records) == {"16": 0.4, "32": 0.2, "48": 0.1}
    summary = learning_summary(records, block=1)
    assert summary["share_tokens_lag_ge_32"] == pytest.approx(0.2)


def test_plot_run_charts_the_lag_over_the_run(tmp_path: Path) -> None:
    records = [{"step": i + 1, "lag/mean": i / 2, "lag/max": i, "lag/share_ge_16": 0.0,
                "lag/share_ge_32": 0.0, "lag/share_ge_48": 0.0} for i in range(5)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [p.name for p in plot_run(tmp_path)] == ["lag.png", "lag_share.png"]
