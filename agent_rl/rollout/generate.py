"""One prompt through the real vLLM engine, with the sampled tokens' logprobs.

This is the smallest end-to-end check of the rollout side: chat template -> token ids -> vLLM ->
tokens and processed logprobs. `teacher_forced_logprobs` recomputes the same tokens with a plain
transformers fp32 forward so the two can be compared.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from agent_rl.model_store import ChatTemplateMissingError


@dataclass
class Generation:
    prompt_ids: list[int]
    token_ids: list[int]
    tokens: list[str]
    logprobs: list[float]
    text: str


def render_prompt_ids(model_dir: Path, prompt: str) -> list[int]:
    """Token ids of a one-turn chat ending in the assistant header, from the model's template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if not tokenizer.chat_template:
        raise ChatTemplateMissingError(
            f"{model_dir} has no chat template; add chat_template.jinja or use a chat model"
        )
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True,
        return_dict=True,
    )
    return list(rendered["input_ids"])


def generate(
    model_dir: Path,
    prompt: str,
    max_tokens: int = 32,
    temperature: float = 0.0,
    seed: int = 0,
    dtype: str = "float32",
) -> Generation:
    """Sample one answer with vLLM in this process, using the parity defaults of the rollout."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    prompt_ids = render_prompt_ids(model_dir, prompt)
    llm = LLM(
        model=str(model_dir),
        dtype=dtype,
        enforce_eager=True,
        max_model_len=2048,
        enable_prefix_caching=False,
        logprobs_mode="processed_logprobs",
        seed=seed,
    )
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, logprobs=0, seed=seed)
    output = llm.generate(TokensPrompt(prompt_token_ids=prompt_ids), params, use_tqdm=False)[0]
    completion = output.outputs[0]
    token_ids = list(completion.token_ids)
    logprobs = [step[token].logprob for step, token in zip(completion.logprobs, token_ids, strict=True)]
    tokenizer = llm.get_tokenizer()
    tokens = [tokenizer.decode([token]) for token in token_ids]
    return Generation(prompt_ids, token_ids, tokens, logprobs, completion.text)


def teacher_forced_logprobs(model_dir: Path, prompt_ids: list[int], token_ids: list[int]) -> list[float]:
    """Logprobs of `token_ids` after `prompt_ids` from a transformers fp32 forward (fp32 lm_head)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = torch.tensor([prompt_ids + token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return logprobs.gather(1, torch.tensor(token_ids)[:, None])[:, 0].tolist()
