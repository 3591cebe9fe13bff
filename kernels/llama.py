"""A Llama-family model built only from the matched ops (nanoGPT style).

The same module runs in the learner (with autograd) and inside vLLM (`kernels.vllm_model`), so a
token's log-probability comes out bit for bit the same on both sides. The model works on a flat
stream of tokens with their absolute positions; how attention finds its keys (a contiguous
sequence here, vLLM's paged KV cache in the rollout) is passed in as `attend`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from kernels import cpu_ops, ops
from kernels.errors import KernelsError

# attend(layer_index, q (T, heads, D), k (T, kv_heads, D), v (T, kv_heads, D)) -> (T, heads, D)
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class UnsupportedCheckpointError(KernelsError, ValueError):
    """A checkpoint this model definition cannot represent exactly."""


def matched_name(hf_name: str) -> str:
    """A Hugging Face Llama tensor name as `MatchedLlama` names it (the inner LlamaModel's
    names, without "model."). The one place the two namings meet, with `hf_name`."""
    return hf_name.removeprefix("model.")


def hf_name(name: str) -> str:
    """A `MatchedLlama` parameter name as a Hugging Face Llama checkpoint names it; HF names
    pass through unchanged."""
    return name if name.startswith(("model.", "lm_head.")) else f"model.{name}"


@dataclass
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_positions: int = 2048
    tie_word_embeddings: bool = True

    @classmethod
    def from_hf(cls, hf: dict) -> LlamaConfig:
        """Read a Hugging Face Llama config.json; refuse features we would silently get wrong."""
        rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise UnsupportedCheckpointError(
                f"rope type {rope_type!r} is not implemented by the matched Llama; only plain "
                "rotary embeddings are (use a checkpoint without rope_scaling)")
        if hf.get("attention_bias") or hf.get("mlp_bias"):
            raise UnsupportedCheckpointError("attention/mlp biases are not supported")
        heads = hf["num_attention_heads"]
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads") or heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 10000.0))),
            rms_norm_eps=hf.get("rms_norm_eps", 1e-5),
            max_positions=hf.get("max_position_embeddings", 2048),
            tie_word_embeddings=hf.get("tie_word_embeddings", True),
        )


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.rms_norm(x, self.weight, self.eps)


class Linear(nn.Module):
    """A bias-free projection whose matmul is the matched `ops.linear`."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.linear(x, self.weight)


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig, layer_index: int):
        super().__init__()
        self.layer_index = layer_index
        self.num_heads, self.num_kv_heads = config.num_heads, config.num_kv_heads
        self.head_dim = config.head_dim
        self.q_proj = Linear(config.hidden_size, config.num_heads * config.head_dim)
        self.k_proj = Linear(config.hidden_size, config.num_kv_heads * config.head_dim)
        self.v_proj = Linear(config.hidden_size, config.num_kv_heads * config.head_dim)
        self.o_proj = Linear(config.num_heads * config.head_dim, config.hidden_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attend: Attend) -> torch.Tensor:
        tokens = x.shape[0]
        q = self.q_proj(x).view(tokens, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(tokens, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(tokens, self.num_kv_heads, self.head_dim)
        q, k = ops.rotary(q, cos, sin), ops.rotary(k, cos, sin)
        y = attend(self.layer_index, q, k, v)  # (T, heads, D)
        return self.o_proj(y.reshape(tokens, self.num_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(ops.silu_and_mul(self.gate_proj(x), self.up_proj(x)))


class Block(nn.Module):
    def __init__(self, config: LlamaConfig, layer_index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_index)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attend: Attend) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attend)
        return x + self.mlp(self.post_attention_layernorm(x))


class MatchedLlama(nn.Module):
    """The learner's Llama: HF-compatible weights, matched forward, autograd backward."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = None if config.tie_word_embeddings else Linear(
            config.hidden_size, config.vocab_size)
        # Plain attributes, not buffers: `.to(bfloat16)` must not round the rotary tables, or
        # the learner would rotate with other values than the rollout.
        self.rope_tables = cpu_ops.rotary_tables(
            config.head_dim, config.max_positions, config.rope_theta)
        self._rope_by_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        # Recompute each block's activations in the backward instead of keeping them: long
        # (16K) sequences fit in memory, and the ops are deterministic, so the gradients keep
        # their bits.
        self.activation_checkpointing = False

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype | str = torch.float32
                        ) -> MatchedLlama:
        """Load a Hugging Face Llama checkpoint (safetensors, tied or untied embeddings)."""
        from safetensors.torch import load_file

        path = Path(path)
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        config = LlamaConfig.from_hf(json.loads((path / "config.json").read_text()))
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{path} holds no *.safetensors weights")
        with torch.device("meta"):
            model = cls(config)
        model.to_empty(device="cpu")
        state = {}
        for file in files:
            state.update(load_file(file))
        model.load_weights(state.items())
        return model.to(dtype)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy HF-named tensors in; rotary caches and a tied lm_head are skipped."""
        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            name = matched_name(name)
            if "rotary_emb.inv_freq" in name or (name == "lm_head.weight" and self.lm_head is None):
                continue
            if name not in params:
                raise UnsupportedCheckpointError(f"checkpoint tensor {name!r} has no place here")
            with torch.no_grad():
                params[name].copy_(tensor)
            loaded.add(name)
        missing = set(params) - loaded
        if missing:
            raise UnsupportedCheckpointError(f"checkpoint lacks {sorted(missing)[:5]}")
        return loaded

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor,
                      attend: Attend) -> torch.Tensor:
        """Final-norm hidden states of a flat token stream (T,) at the given positions."""
        x = self.embed_tokens(input_ids)
        if positions.device != input_ids.device:
            raise ValueError(f"positions on {positions.device} but token ids on "
                             f"{input_ids.device}; make both on the model's device")
        cos, sin = self._rope_on(positions.device)
        cos, sin = cos[positions], sin[positions]
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.layers:
            if recompute:
                x = checkpoint(block, x, cos, sin, attend, use_reentrant=False)
            else:
                x = block(x, cos, sin, attend)
        return self.norm(x)

    def _rope_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The fp32 rotary tables on `device`, copied there once (a copy keeps every bit)."""
        tables = self._rope_by_device.get(device)
        if tables is None:
            tables = tuple(t.to(device) for t in self.rope_tables)
            self._rope_by_device[device] = tables
        return tables

    def _sequence_hidden(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Teacher-forced pass over one or more sequences: (T,) -> (T, C), (B, T) -> (B, T, C)."""
        if input_ids.dim() == 2:
            return torch.stack([self._sequence_hidden(row) for row in input_ids])
        length = input_ids.shape[0]
        if length > self.config.max_positions:
            raise ValueError(f"sequence of {length} tokens exceeds the model's "
                             f"{self.config.max_positions} positions")
        scale = self.config.head_dim ** -0.5

        def attend(_layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return ops.attention(q, k, v, scale)

        return self.hidden_states(input_ids, torch.arange(length, device=input_ids.device), attend)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """fp32 logits for every position: (T,) -> (T, V) or (B, T) -> (B, T, V)."""
        return ops.lm_head_logits(self._sequence_hidden(input_ids), self.lm_head_weight)

    def token_logprobs(self, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """Log-prob of each next token, fp32: (T,) -> (T-1,), (B, T) -> (B, T-1).

        Row t is log p(input_ids[t+1] | input_ids[:t+1]) at the sampling temperature, computed
        with the fp32 lm_head and fp32 log-softmax the rollout's sampler uses.
        """
        hidden = self._sequence_hidden(input_ids)[..., :-1, :]
        return ops.lm_head_logprobs(hidden, self.lm_head_weight, input_ids[..., 1:], temperature)

    def packed_token_logprobs(self, sequences: Sequence[torch.Tensor], temperature: float = 1.0
                              ) -> list[torch.Tensor]:
        """`token_logprobs(sequence)` for each sequence, bit for bit, in one forward: the
        sequences run back to back as one flat stream, their boundaries given to attention, so
        the GEMMs see every token at once and nothing loops over sequences in Python (on a GPU;
        the CPU kernels attend one sequence at a time inside the op)."""
        if not sequences:
            return []
        lengths = [sequence.shape[0] for sequence in sequences]
        if min(lengths) < 2:
            raise ValueError("each packed sequence needs at least two tokens")
        if max(lengths) > self.config.max_positions:
            raise ValueError(f"sequence of {max(lengths)} tokens exceeds the model's "
                             f"{self.config.max_positions} positions")
        device = sequences[0].device
        ids = torch.cat(list(sequences))
        total, count = ids.shape[0], len(lengths)
        lengths_t = torch.tensor(lengths, device=device)
        starts = torch.cumsum(lengths_t, 0) - lengths_t
        positions = (torch.arange(total, device=device)
                     - torch.repeat_interleave(starts, lengths_t, output_size=total))
        scale = self.config.head_dim ** -0.5

        def attend(_layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return ops.packed_attention(q, k, v, lengths, scale)

        hidden = self.hidden_states(ids, positions, attend)
        # Row t of a sequence predicts its token t+1, so each sequence's last row has no target:
        # kept row j (of total - count) is stream row j + (the index of j's sequence).
        owner = torch.repeat_interleave(torch.arange(count, device=device), lengths_t - 1,
                                        output_size=total - count)
        rows = torch.arange(total - count, device=device) + owner
        logprobs = ops.lm_head_logprobs(hidden[rows], self.lm_head_weight, ids[rows + 1],
                                        temperature)
        return list(logprobs.split([length - 1 for length in lengths]))

    def shared_prefix_logprobs(self, prefix: torch.Tensor, suffixes: Sequence[torch.Tensor],
                               temperature: float = 1.0) -> list[torch.Tensor]:
        """`token_logprobs(cat(prefix, suffix))[len(prefix):]` for each suffix, bit for bit, with
        the prefix run once: G responses to one prompt cost one prompt, not G.

        The prefix's queries, keys and values of every layer are kept and put in front of each
        suffix's own, so every suffix row attends over the same keys, in the same blocks, as in
        the full pass; the other ops are row-wise and see the same rows. Only the attention over
        the prefix rows is computed again per suffix (cheap next to the linear layers).
        """
        length = prefix.shape[0]
        if length < 1 or any(suffix.shape[0] < 2 for suffix in suffixes):
            raise ValueError("a shared prefix needs at least one token and each suffix two")
        longest = length + max(suffix.shape[0] for suffix in suffixes)
        if longest > self.config.max_positions:
            raise ValueError(f"sequence of {longest} tokens exceeds the model's "
                             f"{self.config.max_positions} positions")
        scale = self.config.head_dim ** -0.5
        prefix_qkv: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

        def attend_prefix(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                          ) -> torch.Tensor:
            prefix_qkv[layer] = (q, k, v)
            return ops.attention(q, k, v, scale)

        self.hidden_states(prefix, torch.arange(length, device=prefix.device), attend_prefix)
        lengths = [suffix.shape[0] for suffix in suffixes]

        def attend_suffixes(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                            ) -> torch.Tensor:
            pq, pk, pv = prefix_qkv[layer]
            return torch.cat([
                ops.attention(torch.cat([pq, sq]), torch.cat([pk, sk]), torch.cat([pv, sv]),
                              scale)[length:]
                for sq, sk, sv in zip(q.split(lengths), k.split(lengths), v.split(lengths),
                                      strict=True)
            ])

        positions = torch.cat([torch.arange(length, length + n, device=prefix.device)
                               for n in lengths])
        hidden = self.hidden_states(torch.cat(list(suffixes)), positions, attend_suffixes)
        rows = torch.cat([h[:-1] for h in hidden.split(lengths)])
        targets = torch.cat([suffix[1:] for suffix in suffixes])
        logprobs = ops.lm_head_logprobs(rows, self.lm_head_weight, targets, temperature)
        return list(logprobs.split([n - 1 for n in lengths]))

