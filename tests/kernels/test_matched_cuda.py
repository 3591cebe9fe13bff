"""The matched model and the learner on any device: tensors follow the input's device, packed
batches give each sequence its own bits, and the learner's logprobs equal the paged decode path's
bit for bit, so a lag-0 update sees importance weights of exactly 1.

What runs where:
- On the CPU (always): device placement on a `meta` model, where any tensor made on the CPU by
  default, or any op mixing devices, is caught; and the learner/decode equality through the CPU
  kernels.
- On a CUDA GPU (skipped, saying so, where there is none): the same learner/decode equality and
  a few training steps on the Triton kernels, in fp32 and bf16, packed batches, checkpoints.
  `scripts/gpu_check.sh` runs this file with the Triton properties and the CUDA bench.
"""

from __future__ import annotations

import json
import math
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from kernels import ops, reference
from kernels.llama import LlamaConfig, MatchedLlama

ROOT = Path(__file__).resolve().parents[2]
CONFIG = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=32, max_positions=512)
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="no CUDA GPU here: the learner on CUDA is checked by scripts/gpu_check.sh on a "
               "GPU machine; the CPU case covers the same logic")),
]
# prompt (fed), a model turn, a tool result (fed), a second model turn
SEGMENTS = [(0, 7), (1, 9), (0, 5), (1, 6)]


def _random_model(dtype: torch.dtype = torch.float32, device: str = "cpu") -> MatchedLlama:
    torch.manual_seed(0)
    model = MatchedLlama(CONFIG)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.ones_like(param) if "norm" in name
                        else torch.randn_like(param) * 0.08)
    return model.to(device=device, dtype=dtype)


def _save_hf_checkpoint(model: MatchedLlama, path: Path) -> Path:
    """The model as a Hugging Face Llama checkpoint (what `Learner`'s `model_dir` names)."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    c = model.config
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim, "rope_theta": c.rope_theta, "rms_norm_eps": c.rms_norm_eps,
        "max_position_embeddings": c.max_positions, "tie_word_embeddings": True,
        "torch_dtype": "float32"}))
    state = {f"model.{name}": t.detach().float().cpu().contiguous()
             for name, t in model.state_dict().items()}
    save_file(state, str(path / "model.safetensors"))
    return path


@torch.no_grad()
def paged_decode_logprobs(model: MatchedLlama, sequences: list[list[int]],
                          chunks: list[list[int]], block_size: int = 16,
                          temperature: float = 1.0) -> list[torch.Tensor]:
    """Each sequence's next-token logprobs as the rollout computes them: all sequences stepped
    together, each step a chunk (a prefill) or one token (a decode) of every unfinished
    sequence, keys and values in a paged cache with shuffled blocks. Row t: log p(token t+1)."""
    device = model.embed_tokens.weight.device
    c = model.config
    blocks_per = [math.ceil(len(s) / block_size) for s in sequences]
    order = torch.randperm(sum(blocks_per) + 2, generator=torch.Generator().manual_seed(1))
    cache = torch.zeros(c.num_layers, len(order), 2, c.num_kv_heads, block_size, c.head_dim,
                        dtype=model.embed_tokens.weight.dtype, device=device)
    table = torch.zeros(len(sequences), max(blocks_per), dtype=torch.int32)
    taken = 0
    for index, count in enumerate(blocks_per):
        table[index, :count] = order[taken:taken + count].int()
        taken += count
    table = table.to(device)
    done, pending = [0] * len(sequences), [list(chunk) for chunk in chunks]
    rows: list[list[torch.Tensor]] = [[] for _ in sequences]
    scale = c.head_dim ** -0.5
    while any(pending):
        active = [i for i, chunk in enumerate(pending) if chunk]
        sizes = [pending[i].pop(0) for i in active]
        ids = torch.cat([torch.tensor(sequences[i][done[i]:done[i] + n])
                         for i, n in zip(active, sizes, strict=True)]).to(device)
        positions = torch.cat([torch.arange(done[i], done[i] + n)
                               for i, n in zip(active, sizes, strict=True)]).to(device)
        owner = torch.repeat_interleave(torch.tensor(active), torch.tensor(sizes)).to(device)
        slots = table[owner, positions // block_size].long() * block_size + positions % block_size
        starts = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], dtype=torch.int32)
        seq_lens = torch.tensor([done[i] + n for i, n in zip(active, sizes, strict=True)],
                                dtype=torch.int32)
        plan = ops.plan_paged(starts.to(device), seq_lens.to(device), positions,
                              table[active], block_size)

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   plan=plan, slots=slots) -> torch.Tensor:
            ops.write_paged_kv(cache[layer], k, v, slots)
            return ops.paged_attention(q, cache[layer], plan, scale)

        hidden = model.hidden_states(ids, positions, attend)
        logprobs = ops.lm_head_logprobs(hidden, model.lm_head_weight, None, temperature)
        row = 0
        for i, n in zip(active, sizes, strict=True):
            for p in range(done[i], done[i] + n):
                if p + 1 < len(sequences[i]):
                    rows[i].append(logprobs[row, sequences[i][p + 1]])
                row += 1
            done[i] += n
    return [torch.stack(r) for r in rows]


def _episodes(count: int, seed: int) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
    """Token ids, loss masks and step chunks (prompt and tool results prefilled, model tokens
    decoded one by one) of multi-turn episodes sharing one prompt, as a group's do."""
    rng = random.Random(seed)
    prompt = [rng.randrange(CONFIG.vocab_size) for _ in range(SEGMENTS[0][1])]
    sequences, masks, chunks = [], [], []
    for _ in range(count):
        ids, mask, steps = list(prompt), [0] * len(prompt), [len(prompt)]
        for sampled, length in SEGMENTS[1:]:
            length += rng.randrange(3)
            ids += [rng.randrange(CONFIG.vocab_size) for _ in range(length)]
            mask += [sampled] * length
            steps += [1] * length if sampled else [length]
        sequences.append(ids)
        masks.append(mask)
        chunks.append(steps)
    return sequences, masks, chunks


# --- device placement, checked on the CPU with a meta-device model -------------------------

_FACTORIES = {torch.arange, torch.zeros, torch.ones, torch.full, torch.empty, torch.tensor,
              torch.randn, torch.rand, torch.randint, torch.as_tensor, torch.zeros_like}


class _DeviceRecorder(TorchFunctionMode):
    """Records every torch call whose tensors sit on more than one device, and every tensor our
    code (not torch's own internals) makes on the CPU, while the model lives on the meta device."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        devices = {t.device.type for t in _tensors((args, kwargs)) if t.dim() > 0}
        if len(devices) > 1:
            self.problems.append(f"{getattr(func, '__name__', func)} mixes {sorted(devices)}")
        out = func(*args, **kwargs)
        if (func in _FACTORIES and isinstance(out, torch.Tensor) and out.device.type == "cpu"
                and Path(sys._getframe(1).f_code.co_filename).is_relative_to(ROOT)):
            self.problems.append(f"{func.__name__} made a tensor on the cpu")
        return out


def _tensors(tree: object) -> Iterator[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tensors(item)


@pytest.fixture
def meta_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Meta tensors run the reference math (shapes only), every other device its real kernels."""
    real = ops.backend
    monkeypatch.setattr(ops, "backend",
                        lambda x: reference if x.device.type == "meta" else real(x))


@pytest.mark.parametrize("checkpointing", [False, True])
def test_every_tensor_follows_the_input_device(meta_backend: None, checkpointing: bool) -> None:
    with torch.device("meta"):
        model = MatchedLlama(CONFIG)
    model.activation_checkpointing = checkpointing
    model.train()
    ids = torch.zeros(40, dtype=torch.long, device="meta")
    recorder = _DeviceRecorder()
    with recorder:
        model.token_logprobs(ids, temperature=0.7).sum().backward()
        model.token_logprobs(ids.view(2, 20)).sum().backward()
        packed = model.packed_token_logprobs([ids[:9], ids[9:40]], temperature=0.7)
        sum(p.sum() for p in packed).backward()
        shared = model.shared_prefix_logprobs(ids[:10], [ids[10:25], ids[25:40]], 0.7)
        sum(s.sum() for s in shared).backward()
    assert recorder.problems == []
    assert all(p.grad is not None and p.grad.device.type == "meta" for p in model.parameters())


def test_the_recorder_catches_a_tensor_made_on_the_cpu(meta_backend: None) -> None:
    recorder = _DeviceRecorder()
    with recorder:
        torch.zeros(3, device="meta") + torch.arange(3).to("meta")
    assert recorder.problems == ["arange made a tensor on the cpu"]


# --- packed batches and the learner, on every device present ----------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_sequences_get_their_own_bits(device: str, dtype: torch.dtype) -> None:
    model = _random_model(dtype, device)
    generator = torch.Generator().manual_seed(3)
    sequences = [torch.randint(0, CONFIG.vocab_size, (n,), generator=generator).to(device)
                 for n in (5, 70, 2, 33, 17)]
    with torch.no_grad():
        packed = model.packed_token_logprobs(sequences, temperature=0.7)
        alone = [model.token_logprobs(s, temperature=0.7) for s in sequences]
    assert all(torch.equal(p, a) for p, a in zip(packed, alone, strict=True))


@pytest.mark.parametrize("device", DEVICES)
def test_packed_gradients_match_one_sequence_at_a_time(device: str) -> None:
    model = _random_model(torch.float32, device)
    generator = torch.Generator().manual_seed(4)
    sequences = [torch.randint(0, CONFIG.vocab_size, (n,), generator=generator).to(device)
                 for n in (12, 40, 3)]
    sum(p.sum() for p in model.packed_token_logprobs(sequences)).backward()
    packed = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    sum(model.token_logprobs(s).sum() for s in sequences).backward()
    for got, want in zip(packed, (p.grad for p in model.parameters()), strict=True):
        assert ((got - want).norm() / want.norm()).item() < 1e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_learner_trains_with_logprobs_equal_to_paged_decode(device: str, dtype: str,
                                                            tmp_path: Path) -> None:
    """A lag-0 update's importance weights are exactly 1 (learner == rollout bit for bit), and
    stay so after each of three optimizer steps taken on `device`."""
    from agent_rl.learn.config import LearnerConfig
    from agent_rl.learn.learner import Learner
    from agent_rl.trajectory import Group, Trajectory

    model_dir = _save_hf_checkpoint(_random_model(), tmp_path / "model")
    learner = Learner(model_dir, LearnerConfig(lr=3e-3, device=device), dtype=dtype,
                      temperature=0.7)
    model = learner.policy.module
    assert model.embed_tokens.weight.device.type == device
    before = model.embed_tokens.weight.detach().clone()
    for step in range(3):
        groups = []
        for g, rewards in enumerate([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]):
            sequences, masks, chunks = _episodes(len(rewards), seed=10 * step + g)
            decoded = paged_decode_logprobs(model, sequences, chunks, temperature=0.7)
            trajectories = [Trajectory(
                task_id=f"t{g}", group_id=f"g{g}", token_ids=ids, loss_mask=mask,
                behavior_logprobs=[0.0, *(lp if m else 0.0 for lp, m in
                                          zip(rows.double().cpu().tolist(), mask[1:],
                                              strict=True))],
                policy_versions=[learner.version if m else -1 for m in mask],
                reward=reward, num_turns=2, end_reason="terminated")
                for ids, mask, rows, reward in zip(sequences, masks, decoded, rewards,
                                                   strict=True)]
            groups.append(Group(f"g{g}", f"t{g}", trajectories))
            learner_rows = learner.token_logprobs(sequences[0])
            assert torch.equal(learner_rows, decoded[0].cpu()), f"step {step}, group {g}"
        metrics = learner.train_step(groups).metrics
        assert metrics["is/max"] == 1.0 and metrics["is/min"] == 1.0, metrics
        assert math.isfinite(metrics["losses/loss"]) and metrics["losses/grad_norm"] > 0
    assert learner.version == 3
    assert not torch.equal(model.embed_tokens.weight.detach(), before)


@pytest.mark.parametrize("device", DEVICES)
def test_learner_checkpoint_moves_between_devices(device: str, tmp_path: Path) -> None:
    """A checkpoint written on `device` resumes on the CPU with the same weights and optimizer."""
    from agent_rl.learn.config import LearnerConfig
    from agent_rl.learn.learner import Learner

    model_dir = _save_hf_checkpoint(_random_model(), tmp_path / "model")
    learner = Learner(model_dir, LearnerConfig(lr=1e-3, device=device))
    with torch.no_grad():
        for param in learner.parameters:
            param.add_(0.01)
    learner.optimizer.state[learner.parameters[0]]["step"] = torch.tensor(5.0)
    torch.save(learner.state_dict(), tmp_path / "learner.pt")
    resumed = Learner(model_dir, LearnerConfig(lr=1e-3))
    resumed.load_state_dict(torch.load(tmp_path / "learner.pt", map_location="cpu"))
    for mine, theirs in zip(learner.parameters, resumed.parameters, strict=True):
        assert torch.equal(mine.detach().cpu(), theirs.detach())
    state = resumed.rollout_state_dict()
    assert all(t.device.type == "cpu" for t in state.values())


def test_learner_device_without_a_gpu_is_a_clear_error(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_rl.learn.learner import LearnerError, learner_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(LearnerError, match="torch sees none"):
        learner_device("cuda")
    with pytest.raises(LearnerError, match="not a device"):
        learner_device("gpu0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is here: the bench would run")
def test_cuda_bench_without_a_gpu_says_where_to_run_it() -> None:
    from typer.testing import CliRunner

    from agent_rl.cli.main import app

    result = CliRunner().invoke(app, ["bench", "kernels", "--device", "cuda"])
    assert result.exit_code != 0
    assert "needs a CUDA GPU" in result.output and "gpu_check.sh" in result.output
