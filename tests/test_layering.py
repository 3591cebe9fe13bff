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
    """Every absolute import of the file, lazy ones included; `from pkg import name` also
    yields `pkg.name` (a submodule, if it is one). Imports for type checkers only are left out:
    they never run."""
    tree = ast.parse(path.read_text(), str(path))
    type_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                 and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                 for node in ast.walk(block)}
    found = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _modules() -> dict[str, Path]:
    modules = {}
    for top in ("envs", "sandbox", "kernels", "agent_rl"):
        for path in sorted((ROOT / top).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_packages_import_only_downward() -> None:
    wrong = []
    for module, path in _modules().items():
        rules = [banned for package, banned in FORBIDDEN.items() if _within(module, package)]
        for line, name in _imports(path):
            if any(_within(name, b) for banned in rules for b in banned):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not wrong, "imports against the layering:\n" + "\n".join(sorted(set(wrong)))


def test_no_import_cycle_hides_behind_a_lazy_import() -> None:
    """Module A imports B and B imports A (at the top or inside a function): a cycle that only
    a lazy import keeps from failing at start-up, and that makes both hard to read alone.
    A package's own `__init__` re-exporting its modules is not one."""
    modules = _modules()
    graph = {module: {name for _, name in _imports(path) if name in modules and name != module
                      and not _within(module, name)}
             for module, path in modules.items()}
    cycles = []
    for module, targets in graph.items():
        for target in targets:
            if module in _reachable(graph, target):
                cycles.append(f"{module} -> {target} -> ... -> {module}")
    assert not cycles, "import cycles:\n" + "\n".join(sorted(cycles))


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


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
