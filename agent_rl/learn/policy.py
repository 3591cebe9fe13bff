"""The model the learner trains, behind one small interface whichever kernels compute it: the
matched-kernel Llama (`kernels.llama.MatchedLlama`), whose logprobs at lag 0 equal the rollout's
bit for bit, or plain transformers (in the run's dtype, its log_softmax in fp32) when matched
kernels are off."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Protocol

import torch

from agent_rl.learn.errors import LearnerError


class PolicyModel(Protocol):
    """What the learner needs of a model, whichever kernels compute it."""

    module: torch.nn.Module

    def token_logprobs(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(T,) ids -> (T-1,) logprob of each next token, differentiable."""
        ...

    def rollout_state_dict(self) -> dict[str, torch.Tensor]:
        """Weights under Hugging Face names, as the rollout engine loads them."""
        ...


class TransformersPolicy:
    """Plain transformers, with the vocabulary projection's log_softmax done in fp32."""

    def __init__(self, model_dir: Path, dtype: str, temperature: float, checkpointing: bool):
        from transformers import AutoModelForCausalLM

        self.module = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
        self.module.config.use_cache = False
        if dtype != "float32":
            for layer in self.module.modules():
                if isinstance(layer, torch.nn.Linear):
                    layer.forward = partial(_fp32_accumulated_linear, layer)
        if checkpointing:
            self.module.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        self.temperature = temperature

    def token_logprobs(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = self.module(input_ids=input_ids[None], use_cache=False).logits[0, :-1].float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        logprobs = torch.log_softmax(logits, dim=-1)
        return logprobs.gather(-1, input_ids[1:, None]).squeeze(-1)

    def shared_prefix_logprobs(self, prefix: torch.Tensor, suffixes: list[torch.Tensor]
                               ) -> list[torch.Tensor]:
        """Each `prefix + suffix`'s logprobs from position len(prefix) on (the rows the
        sampled tokens of a group's responses need), the common prompt forwarded once: its
        KV cache is repeated for the suffixes, which run as one right-padded batch. Stock
        kernels are not batch-invariant, so the bits differ from `token_logprobs` (within the
        stock kernels' own noise); it is what a stock learner would do to save the prompt."""
        cached = self.module(input_ids=prefix[None], use_cache=True)
        cache = cached.past_key_values
        cache.batch_repeat_interleave(len(suffixes))
        lengths = [int(s.numel()) for s in suffixes]
        ids = torch.nn.utils.rnn.pad_sequence(suffixes, batch_first=True)
        width = ids.shape[1]
        mask = torch.ones(len(suffixes), prefix.numel() + width, dtype=torch.long,
                          device=ids.device)
        for row, length in enumerate(lengths):
            mask[row, prefix.numel() + length:] = 0
        positions = torch.arange(prefix.numel(), prefix.numel() + width, device=ids.device)
        logits = self.module(input_ids=ids, attention_mask=mask, past_key_values=cache,
                             position_ids=positions.expand(len(suffixes), -1),
                             use_cache=False).logits.float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        rows = []
        for row, (suffix, length) in enumerate(zip(suffixes, lengths, strict=True)):
            logprobs = torch.log_softmax(logits[row, : length - 1], dim=-1)
            rows.append(logprobs.gather(-1, suffix[1:, None]).squeeze(-1))
        return rows

    def rollout_state_dict(self) -> dict[str, torch.Tensor]:
        state = {name: tensor.detach() for name, tensor in self.module.state_dict().items()}
        if getattr(self.module.config, "tie_word_embeddings", False):
            # vLLM ties lm_head to the embedding itself; sending it twice doubles the broadcast.
            state.pop("lm_head.weight", None)
        return state


def _fp32_accumulated_linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """A bf16 linear layer as GPU and AMX GEMMs compute it: fp32 products and sums, the output
    rounded to bf16. On the CPU, torch's own bf16 GEMM runs 10-80x slower than fp32 where the
    CPU has no native bf16 (AVX2: 1.7-17 GFLOP/s against 110-150), backward included."""
    if x.device.type != "cpu" or x.dtype == torch.float32:
        return torch.nn.functional.linear(x, layer.weight, layer.bias)
    bias = None if layer.bias is None else layer.bias.float()
    return torch.nn.functional.linear(x.float(), layer.weight.float(), bias).to(x.dtype)


class MatchedPolicy:
    """The matched-kernel Llama: the same ops, in the same reduction order, as the rollout."""

    def __init__(self, model_dir: Path, dtype: str, temperature: float, checkpointing: bool):
        try:
            from kernels.llama import MatchedLlama
        except ImportError as err:
            raise LearnerError(
                f"matched_kernels=True needs kernels.llama.MatchedLlama, which failed to import "
                f"({err}); set matched_kernels: false to train with plain transformers"
            ) from err
        self.module = MatchedLlama.from_pretrained(model_dir, dtype=getattr(torch, dtype))
        self.module.activation_checkpointing = checkpointing
        self.temperature = temperature

    def token_logprobs(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.module.token_logprobs(input_ids, self.temperature)

    def shared_prefix_logprobs(self, prefix: torch.Tensor, suffixes: list[torch.Tensor]
                               ) -> list[torch.Tensor]:
        return self.module.shared_prefix_logprobs(prefix, suffixes, self.temperature)

    def packed_token_logprobs(self, sequences: list[torch.Tensor]) -> list[torch.Tensor]:
        return self.module.packed_token_logprobs(sequences, self.temperature)

    def rollout_state_dict(self) -> dict[str, torch.Tensor]:
        from kernels.llama import hf_name

        return {hf_name(name): tensor.detach() for name, tensor in self.module.state_dict().items()}
