"""vLLM plugin: registers the matched Llama architecture (entry point `vllm.general_plugins`).

vLLM calls `register()` in every process that builds a model, so an engine in its own process
finds the architecture too. A checkpoint opts in by naming `MatchedLlamaForCausalLM` in its
config.json (see `kernels.checkpoint.use_matched_architecture`).
"""

from __future__ import annotations

ARCHITECTURE = "MatchedLlamaForCausalLM"


def register() -> None:
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, "kernels.vllm_model:MatchedLlamaForCausalLM")
