"""Dependencies point one way: the layout is the design (docs/index.md). Read from the source, so
a lazy import inside a function counts as much as one at the top of a file."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# package -> what it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "envs": ("agent_rl",),
    "sandbox": ("agent_rl", "envs", "kernels"),
    "kernels": ("agent_rl", "envs", "sandbox"),
    "agent_rl.learn": ("agent_rl.orchestrate", "agent_rl.diagnostics", "agent_rl.evaluate",
                       "agent_rl.benchmarks", "agent_rl.cli"),
    "agent_rl.rollout": ("agent_rl.learn", "agent_rl.orchestrate", "agent_rl.diagnostics",
                         "agent_rl.evaluate", "agent_rl.benchmarks", "agent_rl.cli"),
    "agent_rl.evaluate": ("agent_rl.orchestrate", "agent_rl.diagnostics", "agent_rl.benchmarks",
                          "agent_rl.cli"),
    "agent_rl.orchestrate": ("agent_rl.diagnostics", "agent_rl.benchmarks", "agent_rl.cli"),
    "agent_rl.diagnostics": ("agent_rl.cli",),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_packages_import_only_downward() -> None:
    wrong = []
    for top in ("envs", "sandbox", "kernels", "agent_rl"):
        for path in sorted((ROOT / top).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            rules = [banned for package, banned in FORBIDDEN.items() if _within(module, package)]
            for line, name in _imports(path):
                if any(_within(name, b) for banned in rules for b in banned):
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_reading_a_config_imports_neither_torch_nor_vllm() -> None:
    """`agent-rl config`, `--set` checks and the docs test read configs: none needs a model."""
    script = (
        "import sys\n"
        "from agent_rl.train_config import load_train_config\n"
        "from agent_rl.learn.sft_config import load_sft_config\n"
        "load_train_config('configs/demo.yaml'); load_sft_config('configs/sft.yaml')\n"
        "heavy = sorted({'torch', 'vllm', 'ray', 'gymnasium'} & set(sys.modules))\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
