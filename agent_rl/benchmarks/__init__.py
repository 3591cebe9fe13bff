"""Benchmarks of agent-rl components, each a `run(console, ...) -> list[dict]` function."""
