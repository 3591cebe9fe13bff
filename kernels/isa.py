"""Which x86-64 instruction-set level the compiled kernels run at, and what this machine is.

The compiled kernels (`kernels/csrc`) are built for three levels and pick one at load time; all
three must give the same bits. `AGENT_RL_KERNELS_ISA` forces one level (the tests build each level
this CPU supports and compare). `python -m kernels.isa` prints the machine report CI starts with,
so a failure says on which CPU, ISA and BLAS it happened.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

LEVELS = ("x86-64-v4", "x86-64-v3", "x86-64")
# /proc/cpuinfo flags each level needs beyond the one below it (the psABI's x86-64-v3/v4 lists).
_LEVEL_FLAGS = {
    "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
    "x86-64-v3": ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"),
    "x86-64": (),
}
_REPORTED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
FORCE_VARIABLE = "AGENT_RL_KERNELS_ISA"


class IsaError(ValueError):
    """An instruction-set level that does not exist or that this CPU cannot run."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (empty where /proc/cpuinfo is absent)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def supported_levels(flags: set[str] | None = None) -> list[str]:
    """The levels this CPU can run, best first (each level needs the flags of those below it)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    flags = cpu_flags() if flags is None else flags
    levels = []
    for level in reversed(LEVELS):
        if not all(flag in flags for flag in _LEVEL_FLAGS[level]):
            break
        levels.insert(0, level)
    return levels


def forced_level() -> str | None:
    """The level `AGENT_RL_KERNELS_ISA` forces, checked against this CPU; None when unset."""
    level = os.environ.get(FORCE_VARIABLE, "").strip()
    if not level:
        return None
    if level not in LEVELS:
        raise IsaError(f"{FORCE_VARIABLE}={level!r} is not an x86-64 level; use one of {LEVELS}")
    if level not in supported_levels():
        missing = [f for f in _LEVEL_FLAGS[level] if f not in cpu_flags()]
        raise IsaError(f"{FORCE_VARIABLE}={level} needs CPU flags {missing}, which this CPU "
                       f"({cpu_model()}) lacks; it supports {supported_levels()}")
    return level


def dispatched_level() -> str | None:
    """The level the compiled kernels run at here: the forced one, else the best supported."""
    levels = supported_levels()
    return forced_level() or (levels[0] if levels else None)


def report() -> dict[str, str]:
    """What decides the bits and the speed of the CPU kernels on this machine."""
    import numpy as np
    import torch

    flags = cpu_flags()
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    return {
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "flags": " ".join(f for f in _REPORTED_FLAGS if f in flags) or "(none of interest)",
        "compiled kernels level": str(dispatched_level()),
        "levels supported": " ".join(supported_levels()),
        "torch cpu capability": torch.backends.cpu.get_cpu_capability(),
        "numpy blas": f"{blas.get('name', '?')} {blas.get('version', '')}".strip(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
        "torch threads": str(torch.get_num_threads()),
    }


if __name__ == "__main__":
    for key, value in report().items():
        print(f"{key:>24}: {value}")
