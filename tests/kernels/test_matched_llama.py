"""MatchedLlama, the learner's model: agrees with transformers, and is prefix/batch invariant.

What runs where: on the CPU, through whichever backend `kernels.ops` picks there (the compiled
kernels, or pure torch); every bitwise check compares two results of this machine. The CUDA
model (Triton) is checked in `test_matched_cuda.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernels.checkpoint import use_matched_architecture
from kernels.llama import MatchedLlama


@pytest.fixture(scope="module")
def matched(tiny_model: Path) -> MatchedLlama:
    return MatchedLlama.from_pretrained(tiny_model, dtype=torch.float32)


@pytest.fixture(scope="module")
def token_ids() -> torch.Tensor:
    return torch.randint(0, 49152, (90,), generator=torch.Generator().manual_seed(0))


def _hf_token_logprobs(model_dir: Path, ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = hf(ids[None]).logits[0].float()
    return logits.log_softmax(-1)[:-1].gather(-1, ids[1:, None])[:, 0]


def test_matched_logprobs_match_transformers_fp32(matched: MatchedLlama, tiny_model: Path,
                                                   token_ids: torch.Tensor) -> None:
    with torch.no_grad():
        ours = matched.token_logprobs(token_ids)
    assert ours.shape == (token_ids.shape[0] - 1,)
    assert (ours - _hf_token_logprobs(tiny_model, token_ids)).abs().max().item() < 1e-4


def test_token_logprobs_of_a_prefix_are_bitwise_equal(matched: MatchedLlama,
                                                      token_ids: torch.Tensor) -> None:
    with torch.no_grad():
        full = matched.token_logprobs(token_ids)
        for length in (2, 17, 64, 65):
            assert torch.equal(matched.token_logprobs(token_ids[:length]), full[: length - 1])


def test_batched_rows_equal_single_sequences_bitwise(matched: MatchedLlama,
                                                     token_ids: torch.Tensor) -> None:
    batch = torch.stack((token_ids[:40], token_ids[50:90]))
    with torch.no_grad():
        rows = matched.token_logprobs(batch)
        assert torch.equal(rows[1], matched.token_logprobs(token_ids[50:90]))


def test_backward_matches_transformers_gradients(matched: MatchedLlama, tiny_model: Path,
                                                 token_ids: torch.Tensor) -> None:
    from transformers import AutoModelForCausalLM

    ids = token_ids[:30]
    matched.zero_grad()
    matched.token_logprobs(ids).sum().backward()
    hf = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    logits = hf(ids[None]).logits[0].float()
    logits.log_softmax(-1)[:-1].gather(-1, ids[1:, None]).sum().backward()
    ours = matched.layers[0].self_attn.q_proj.weight.grad
    theirs = hf.model.layers[0].self_attn.q_proj.weight.grad
    assert torch.allclose(ours, theirs, rtol=1e-3, atol=1e-5)
    assert torch.allclose(matched.embed_tokens.weight.grad, hf.model.embed_tokens.weight.grad,
                          rtol=1e-3, atol=1e-5)


def test_activation_checkpointing_keeps_the_gradients_bit_for_bit(tiny_model: Path,
                                                                   token_ids: torch.Tensor) -> None:
    grads = []
    for recompute in (False, True):
        model = MatchedLlama.from_pretrained(tiny_model, dtype=torch.float32).train()
        model.activation_checkpointing = recompute
        model.token_logprobs(torch.stack((token_ids[:60], token_ids[30:90]))).sum().backward()
        grads.append({name: p.grad for name, p in model.named_parameters()})
    plain, recomputed = grads
    assert all(plain[name] is not None for name in plain)
    assert [name for name in plain if not torch.equal(plain[name], recomputed[name])] == []


@pytest.mark.parametrize("dtype, temperature", [("float32", 1.0), ("bfloat16", 1.0),
                                                ("float32", 0.7)])
def test_shared_prefix_logprobs_equal_full_sequences_bitwise(
    tiny_model: Path, dtype: str, temperature: float, token_ids: torch.Tensor
) -> None:
    model = MatchedLlama.from_pretrained(tiny_model, dtype=dtype)
    prefix = token_ids[:67]  # crosses a 64-key attention block
    suffixes = [token_ids[70:75], token_ids[40:90], token_ids[10:12]]
    with torch.no_grad():
        shared = model.shared_prefix_logprobs(prefix, suffixes, temperature)
        for suffix, rows in zip(suffixes, shared, strict=True):
            full = model.token_logprobs(torch.cat([prefix, suffix]), temperature)
            assert torch.equal(rows, full[prefix.shape[0]:])


def test_shared_prefix_gradients_equal_separate_passes(tiny_model: Path,
                                                       token_ids: torch.Tensor) -> None:
    prefix, suffixes = token_ids[:30], [token_ids[30:50], token_ids[60:70]]
    grads = []
    for shared in (False, True):
        model = MatchedLlama.from_pretrained(tiny_model, dtype=torch.float32).train()
        if shared:
            loss = sum(rows.sum() for rows in model.shared_prefix_logprobs(prefix, suffixes))
        else:
            loss = sum(model.token_logprobs(torch.cat([prefix, s]))[30:].sum() for s in suffixes)
        loss.backward()
        grads.append({name: p.grad for name, p in model.named_parameters()})
    separate, shared_grads = grads
    for name, grad in separate.items():
        assert torch.allclose(shared_grads[name], grad, rtol=1e-4, atol=1e-6), name


def test_bfloat16_weights_load_and_stay_close(tiny_model: Path, matched: MatchedLlama,
                                              token_ids: torch.Tensor) -> None:
    half = MatchedLlama.from_pretrained(tiny_model, dtype="bfloat16")
    assert half.embed_tokens.weight.dtype == torch.bfloat16
    with torch.no_grad():
        diff = half.token_logprobs(token_ids) - matched.token_logprobs(token_ids)
    assert diff.abs().max().item() < 0.1


def test_use_matched_architecture_links_weights(tiny_model: Path, tmp_path: Path) -> None:
    import json

    out = use_matched_architecture(tiny_model, tmp_path / "matched")
    assert json.loads((out / "config.json").read_text())["architectures"] == [
        "MatchedLlamaForCausalLM"]
    assert (out / "model.safetensors").is_symlink()
    assert not (tiny_model / "config.json").read_text().count("Matched")
