"""vLLM launch profiles: data in ``server/profiles/*.toml`` (with the other deployables), one per GPU
class; a wheel carries them as ``xladdin/profiles_data``.

Each profile documents why its numbers are what they are (its ``[why]`` table).
``vllm_command`` turns a profile into the exact ``vllm serve`` argument list,
using only flags that exist in vLLM 0.33 (no ``--rope-theta``, no
``--tokenizer-pool-size``, no ``--guided-decoding-backend``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from xladdin.errors import ConfigError


def profile_dir() -> Path:
    """Where the profiles are: built into the package (a wheel), else the checkout's ``server/profiles``
    (an editable install, or the source tree on the path)."""
    package = Path(__file__).resolve().parent.parent
    packaged, checkout = package / "profiles_data", package.parent / "server" / "profiles"
    return checkout if not packaged.is_dir() and checkout.is_dir() else packaged


PROFILE_DIR = profile_dir()
# Flags our commands may use: all present in `vllm serve --help` of vLLM 0.33.
VLLM_FLAGS = frozenset({
    "--served-model-name", "--host", "--port", "--dtype", "--quantization", "--max-model-len",
    "--gpu-memory-utilization", "--max-num-seqs", "--structured-outputs-config", "--default-chat-template-kwargs",
    "--api-key", "--seed", "--generation-config", "--data-parallel-size", "--compilation-config",
    "--max-num-batched-tokens", "--api-server-count",
})
REMOVED_FLAGS = frozenset({"--rope-theta", "--tokenizer-pool-size", "--guided-decoding-backend", "--rope-scaling",
                           "--disable-log-requests", "--use-v2-block-manager", "--worker-use-ray"})


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    model: str
    served_model_name: str = "qwen"
    dtype: str = "auto"
    quantization: str | None = None
    min_gpu_memory_gib: float = Field(gt=0)
    max_model_len: int = Field(gt=0)
    gpu_memory_utilization: float = Field(gt=0, le=1)
    max_num_seqs: int = Field(gt=0)
    structured_outputs_backend: str = "xgrammar"
    cudagraph_capture_size: int | None = Field(None, gt=0)  # largest batch run as a CUDA graph (else vLLM's)
    max_num_batched_tokens: int | None = Field(None, gt=0)  # tokens one engine step may take (else vLLM's)
    disable_thinking: bool = True
    # HTTP front-end processes (vLLM's --api-server-count; else one): each parses, tokenizes and answers its
    # share of the requests. With more than one, vLLM's /metrics shows no running/waiting gauges until they
    # have served: a client started then keeps a fixed window (xladdin.engine.openai_http)
    api_server_count: int | None = Field(None, gt=0)
    # the same answer whatever else is in the batch (vLLM's VLLM_BATCH_INVARIANT=1, beta): with the cache, a
    # rerun of a nightly screen reproduces its verdicts; it costs throughput (BENCHMARKS, batch-invariant)
    batch_invariant: bool = False
    auto: bool = True  # may --profile auto pick it (a profile that trades accuracy for speed says false)
    why: dict[str, str] = Field(default_factory=dict)


def load_profiles(directory: Path = PROFILE_DIR) -> dict[str, Profile]:
    profiles = {}
    for path in sorted(directory.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        profiles[path.stem] = Profile(name=path.stem, **data)
    return profiles


def get_profile(name: str) -> Profile:
    profiles = load_profiles()
    if not profiles:
        raise ConfigError(f"no vLLM profiles in {PROFILE_DIR} (a broken install?)")
    if name not in profiles:
        raise ConfigError(f"unknown profile {name!r}; known: {', '.join(profiles)} or auto")
    return profiles[name]


API_KEY_ENV = "VLLM_API_KEY"  # vLLM's own variable: the key never appears in argv
BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"


def server_env(profile: Profile, *, batch_invariant: bool = False) -> dict[str, str]:
    """What the ``vllm serve`` process gets in its environment beyond the caller's (not its argv)."""
    return {BATCH_INVARIANT_ENV: "1"} if batch_invariant or profile.batch_invariant else {}


def vllm_command(profile: Profile, *, host: str = "127.0.0.1", port: int = 8000, seed: int = 42,
                 gpus: int = 1) -> list[str]:
    """The ``vllm serve`` argv; ``gpus`` > 1 adds vLLM's data parallelism (one URL, one copy per
    GPU). ``xladdin-server serve --gpus N`` starts N such commands instead, one per GPU
    (``launcher.one_per_gpu``): measured faster for the screen workload."""
    cmd = ["vllm", "serve", profile.model,
           "--served-model-name", profile.served_model_name,
           "--host", host, "--port", str(port),
           "--dtype", profile.dtype]
    if profile.quantization:
        cmd += ["--quantization", profile.quantization]
    cmd += [
        "--max-model-len", str(profile.max_model_len),
        "--gpu-memory-utilization", f"{profile.gpu_memory_utilization:g}",
        "--max-num-seqs", str(profile.max_num_seqs),
        # compact JSON: fewer tokens per answer, and no runs of whitespace from a weak model
        "--structured-outputs-config",
        json.dumps({"backend": profile.structured_outputs_backend, "disable_any_whitespace": True}),
        "--generation-config", "vllm",
        "--seed", str(seed),
    ]
    if profile.cudagraph_capture_size:
        cmd += ["--compilation-config", json.dumps({"max_cudagraph_capture_size": profile.cudagraph_capture_size})]
    if profile.max_num_batched_tokens:
        cmd += ["--max-num-batched-tokens", str(profile.max_num_batched_tokens)]
    if profile.disable_thinking:
        cmd += ["--default-chat-template-kwargs", json.dumps({"enable_thinking": False})]
    if profile.api_server_count:
        cmd += ["--api-server-count", str(profile.api_server_count)]
    if gpus > 1:
        cmd += ["--data-parallel-size", str(gpus)]
    check_flags(cmd)
    return cmd


def engine_kwargs(profile: Profile, *, seed: int = 42) -> dict[str, Any]:
    """The profile as vLLM engine arguments (``AsyncEngineArgs``, what ``ray.data.llm``'s vLLM processor
    takes): the settings ``vllm_command`` passes ``vllm serve``, less the server's own (host, port, name,
    its HTTP front-end processes, chat template defaults: the processor's requests disable thinking
    themselves)."""
    kwargs: dict[str, Any] = {
        "dtype": profile.dtype, "max_model_len": profile.max_model_len,
        "gpu_memory_utilization": profile.gpu_memory_utilization, "max_num_seqs": profile.max_num_seqs,
        "structured_outputs_config": {"backend": profile.structured_outputs_backend, "disable_any_whitespace": True},
        "generation_config": "vllm", "seed": seed,
    }
    if profile.quantization:
        kwargs["quantization"] = profile.quantization
    if profile.cudagraph_capture_size:
        kwargs["compilation_config"] = {"max_cudagraph_capture_size": profile.cudagraph_capture_size}
    if profile.max_num_batched_tokens:
        kwargs["max_num_batched_tokens"] = profile.max_num_batched_tokens
    return kwargs


def check_flags(cmd: list[str]) -> None:
    flags = {a.split("=")[0] for a in cmd if a.startswith("--")}
    removed = flags & REMOVED_FLAGS
    if removed:
        raise ConfigError(f"flags removed from vLLM: {', '.join(sorted(removed))}")
    unknown = flags - VLLM_FLAGS
    if unknown:
        raise ConfigError(f"flags not known to vLLM 0.33: {', '.join(sorted(unknown))}")


def gpu_memory_gib() -> float | None:
    """Total memory of GPU 0 from nvidia-smi, or None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return float(out.strip().splitlines()[0]) / 1024
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def auto_profile(memory_gib: float | None) -> tuple[Profile, str]:
    """The largest profile whose memory need fits, and why."""
    if memory_gib is None:
        raise ConfigError("--profile auto: no NVIDIA GPU found (nvidia-smi); on a CPU-only machine use --engine cpu")
    fitting = [p for p in load_profiles().values() if p.auto and p.min_gpu_memory_gib <= memory_gib]
    if not fitting:
        raise ConfigError(f"--profile auto: {memory_gib:.0f} GiB GPU is below every profile (smallest needs "
                          f"{min(p.min_gpu_memory_gib for p in load_profiles().values()):g} GiB)")
    best = max(fitting, key=lambda p: (p.min_gpu_memory_gib, p.max_num_seqs))
    return (
        best,
        f"GPU has {memory_gib:.0f} GiB; {best.name} needs ≥ {best.min_gpu_memory_gib:g} GiB ({best.description})",
    )
