"""vLLM running MatchedLlamaForCausalLM samples tokens whose logprobs the learner's MatchedLlama
recomputes bit for bit, at any batch size and with mixed prompt lengths."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
import torch

from kernels.checkpoint import use_matched_architecture
from kernels.llama import MatchedLlama

pytestmark = pytest.mark.slow

PROMPTS = [
    "Hello there",
    "What is 2+3? Explain every step of the addition in detail, please.",
    "a",
    "The quick brown fox jumps over the lazy dog. " * 6,
    "x y z",
    "def add(a, b):\n    return",
    "Tell me a story",
    "Once upon a time, in a land far away, there lived",
]


def _engine(model_dir: Path, dtype: str, prefix_caching: bool = False):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM

    from kernels.vllm_plugin import register

    register()
    return LLM(model=str(model_dir), dtype=dtype, enforce_eager=True, max_model_len=512,
               enable_prefix_caching=prefix_caching, logprobs_mode="processed_logprobs", seed=0)


@pytest.fixture(scope="module", params=["float32", "bfloat16", "float32+prefix_caching"])
def engine_and_learner(request, tiny_model: Path, tmp_path_factory):
    dtype, _, caching = request.param.partition("+")
    model_dir = use_matched_architecture(tiny_model, tmp_path_factory.mktemp("matched") / "m")
    llm = _engine(model_dir, dtype, prefix_caching=bool(caching))
    yield llm, MatchedLlama.from_pretrained(tiny_model, dtype=dtype)
    del llm
    gc.collect()


def _max_abs_diff(llm, learner: MatchedLlama, prompts: list[str], max_tokens: int,
                  cached_tokens: list[int] | None = None, temperature: float = 1.0) -> float:
    from vllm import SamplingParams

    params = SamplingParams(logprobs=0, temperature=temperature, max_tokens=max_tokens, seed=3,
                            ignore_eos=True)
    worst = 0.0
    for out in llm.generate(prompts, params, use_tqdm=False):
        if cached_tokens is not None:
            cached_tokens.append(out.num_cached_tokens or 0)
        completion = out.outputs[0]
        ids = torch.tensor([*out.prompt_token_ids, *completion.token_ids])
        behavior = torch.tensor([step[token].logprob for step, token in
                                 zip(completion.logprobs, completion.token_ids, strict=True)])
        with torch.no_grad():
            recomputed = learner.token_logprobs(ids, temperature)[len(out.prompt_token_ids) - 1:]
        assert recomputed.shape == behavior.shape
        worst = max(worst, (recomputed - behavior).abs().max().item())
    return worst


def test_vllm_sampled_logprobs_equal_learner_recompute_at_batch_1(engine_and_learner) -> None:
    llm, learner = engine_and_learner
    assert _max_abs_diff(llm, learner, PROMPTS[1:2], max_tokens=24) == 0.0


def test_vllm_sampled_logprobs_equal_learner_recompute_at_batch_8(engine_and_learner) -> None:
    llm, learner = engine_and_learner
    assert _max_abs_diff(llm, learner, PROMPTS, max_tokens=24) == 0.0


def test_logprobs_at_temperature_0_7_equal_learner_recompute(engine_and_learner) -> None:
    # The sampler divides the logits by the temperature; the learner must divide the same way.
    llm, learner = engine_and_learner
    assert _max_abs_diff(llm, learner, PROMPTS, max_tokens=16, temperature=0.7) == 0.0


def test_a_group_sharing_its_prompt_samples_learner_exact_logprobs(engine_and_learner) -> None:
    # Run twice: with prefix caching on, the second round's prompts come from the cache.
    llm, learner = engine_and_learner
    group = [PROMPTS[3] * 4] * 4
    cached: list[int] = []
    assert _max_abs_diff(llm, learner, group, max_tokens=16) == 0.0
    assert _max_abs_diff(llm, learner, group, max_tokens=16, cached_tokens=cached) == 0.0
    caching = llm.llm_engine.vllm_config.cache_config.enable_prefix_caching
    assert (min(cached) > 0) == caching, cached


def test_vllm_runs_the_matched_model(engine_and_learner) -> None:
    llm, _ = engine_and_learner
    names = llm.apply_model(lambda model: type(model).__name__)
    assert names == ["MatchedLlamaForCausalLM"]


def test_reloaded_weights_give_the_learner_logprobs_of_the_new_weights(
    engine_and_learner, tmp_path: Path
) -> None:
    # The reload the pipeline runs. vLLM's loaders write through `.data`, which moves no version
    # counter, so the GEMM's cached weight packs must be dropped by the model's load_weights.
    # The original weights are reloaded at the end, for the tests after this one.
    from agent_rl.rollout.weight_sync import write_weights

    llm, learner = engine_and_learner
    original = {name: tensor.clone() for name, tensor in learner.state_dict().items()}
    generator = torch.Generator().manual_seed(7)
    perturbed = {name: tensor + (0.05 * torch.randn(tensor.shape, generator=generator)).to(tensor.dtype)
                 for name, tensor in original.items()}
    for name, weights in (("new", perturbed), ("old", original)):
        directory = write_weights(weights, tmp_path / name)
        llm.collective_rpc("reload_weights", kwargs={"weights_path": str(directory)})
        llm.reset_prefix_cache()  # cached KV belongs to the weights before the reload
        learner.load_weights(weights.items())
        assert _max_abs_diff(llm, learner, PROMPTS[:4], max_tokens=16) == 0.0, name
