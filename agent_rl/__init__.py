"""agent-rl: asynchronous RL for multi-turn tool-using LLM agents with matched kernels."""

__version__ = "0.1.0"
