"""`MatchedLlamaForCausalLM`: the matched Llama running inside vLLM as an out-of-tree model.

vLLM schedules requests, owns the paged KV cache and samples; every number on the way to the
sampler comes from the same `kernels.llama.MatchedLlama` module the learner trains. vLLM's
`Attention` layers are created only so that vLLM sizes, allocates and binds a KV cache for each
layer; we never call them. In `forward` we read each layer's cache tensor and the attention
metadata (slot mapping, block table, sequence lengths, query start offsets) from vLLM's forward
context, store the new keys/values ourselves and run our own attention over the cache.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from kernels import ops
from kernels.llama import LlamaConfig, MatchedLlama, hf_name, matched_name


class MatchedLlamaForCausalLM(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        from vllm.model_executor.layers.attention import Attention

        super().__init__()
        self.config = vllm_config.model_config.hf_config
        config = LlamaConfig.from_hf(self.config.to_dict())
        self.model = MatchedLlama(config)
        self.scale = config.head_dim ** -0.5
        self.layer_names = [f"{prefix}model.layers.{i}.self_attn.attn"
                            for i in range(config.num_layers)]
        self.kv_layers = nn.ModuleList(
            Attention(config.num_heads, config.head_dim, self.scale,
                      num_kv_heads=config.num_kv_heads, cache_config=vllm_config.cache_config,
                      prefix=name)
            for name in self.layer_names)
        self._fp32_head: tuple[int, torch.Tensor] | None = None

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                intermediate_tensors=None, inputs_embeds=None, **_: object) -> torch.Tensor:
        from vllm.forward_context import get_forward_context

        metadata = get_forward_context().attn_metadata
        if isinstance(metadata, list):
            metadata = metadata[0]
        if not metadata:
            # Warm-up and profiling runs carry no metadata and their output is discarded.
            def attend(_layer, q, k, v):
                return torch.zeros_like(q)
        else:
            attend = self._paged_attend(metadata, positions)
        return self.model.hidden_states(input_ids, positions, attend)

    def _paged_attend(self, metadata: dict, positions: torch.Tensor):
        first = metadata[self.layer_names[0]]
        tokens = first.num_actual_tokens
        block_size = self.kv_layers[0].kv_cache.shape[2]
        plan = ops.plan_paged(first.query_start_loc, first.seq_lens, positions[:tokens],
                              first.block_table, block_size)

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            cache = _as_our_layout(self.kv_layers[layer].kv_cache, k.shape[-1])
            ops.write_paged_kv(cache, k[:tokens], v[:tokens],
                               metadata[self.layer_names[layer]].slot_mapping[:tokens])
            out = ops.paged_attention(q[:tokens], cache, plan, self.scale)
            if tokens < q.shape[0]:
                out = torch.cat((out, out.new_zeros(q.shape[0] - tokens, *out.shape[1:])))
            return out

        return attend

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The fp32 lm_head: the sampler's logits are the learner's logits, bit for bit."""
        return ops.lm_head_logits(hidden_states, self._lm_head_fp32())

    def _lm_head_fp32(self) -> torch.Tensor:
        weight = self.model.lm_head_weight
        if weight.dtype == torch.float32:
            return weight
        # Keep one fp32 copy; an in-place weight update bumps the version and refreshes it.
        if self._fp32_head is None or self._fp32_head[0] != weight._version:
            self._fp32_head = (weight._version, weight.detach().float())
        return self._fp32_head[1]

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load through each parameter's `weight_loader`, as vLLM's in-place reload requires.

        `reload_weights` swaps parameters for placeholders whose wrapped `weight_loader` records
        the new values and copies them into the live storage when a layer is complete; a plain
        `copy_` into the placeholder would be lost and leave the old weights in place.
        """
        from vllm.model_executor.model_loader.weight_utils import default_weight_loader

        params = dict(self.model.named_parameters())
        loaded = set()
        for name, tensor in weights:
            name = matched_name(name)
            if "rotary_emb.inv_freq" in name or (name == "lm_head.weight" and self.model.lm_head is None):
                continue
            param = params[name]
            getattr(param, "weight_loader", default_weight_loader)(param, tensor)
            loaded.add(hf_name(name))
        self._fp32_head = None
        ops.forget_packed_weights()  # the loaders copy into `.data`: no version counter moves
        return loaded


def _as_our_layout(kv_cache: torch.Tensor, head_dim: int) -> torch.Tensor:
    """vLLM's CPU cache (blocks, kv_heads, block_size, 2*D) viewed as (blocks, 2, kv_heads, bs, D).

    Only our kernels read and write these blocks, so the layout inside one is the backend's
    (`ops.write_paged_kv`); vLLM only hands out whole block ids.
    """
    blocks, kv_heads, block_size, _ = kv_cache.shape
    return kv_cache.view(blocks, 2, kv_heads, block_size, head_dim)
