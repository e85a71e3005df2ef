"""What every benchmark shares: the engine under test, settings, timing, memory."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xladdin.engine.embedded import EmbeddedEngine
from xladdin.engine.gguf_files import resolve_model
from xladdin.settings import Settings

RESULTS = Path(__file__).parent / "results"
# real public A-share data, read at run time where it exists (../shared/data, never committed)
SHARED_DATA = Path(__file__).parent.parent.parent / "shared" / "data" / "ashare"
TINY_MAX_TOKENS = 1500


@dataclass
class Env:
    engine: EmbeddedEngine
    settings: Settings
    workdir: Path
    model_label: str

    def settings_for(self, name: str, **overrides: Any) -> Settings:
        values = {"cache_dir": self.workdir / f"cache-{name}", **overrides}
        return self.settings.model_copy(update=values)


def make_env(model: str | None, parallel: int) -> Env:
    workdir = Path(tempfile.mkdtemp(prefix="xladdin-bench-"))
    if model is None:
        from xladdin.testing import write_tiny_qwen_gguf

        model_file = resolve_model(str(write_tiny_qwen_gguf(workdir / "tiny-qwen3.gguf")), workdir)
        label = "tiny random-weight Qwen3 (2 layers, width 64, generated)"
        max_tokens = TINY_MAX_TOKENS
    else:
        model_file = resolve_model(model, workdir)
        label = model_file.model_id
        max_tokens = 512
    settings = Settings.load({"cache_dir": workdir / "cache", "max_parallel": parallel, "max_tokens": max_tokens,
                              "timeout": 300}, env={})
    engine = EmbeddedEngine(settings.embedded, model_file)
    engine.load()
    return Env(engine, settings, workdir, label)


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}


def rss_mib() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn, *args, **kwargs) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def median(values: list[float]) -> float:
    return statistics.median(values)


KEPT_RUNS = 5  # the runs a results file keeps, newest last (gpu.json keeps every one: ``bench.gpu``)


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The runs a results file holds, oldest first (``{"bench": NAME, "runs": [...]}``); none when it is
    not there."""
    if not Path(path).is_file():
        return []
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise SystemExit(f"{path} is not a results file of this project ({{\"bench\": NAME, \"runs\": [...]}})")
    return data["runs"]


def latest(path: Path) -> dict[str, Any]:
    """A results file's newest run."""
    runs = read_runs(path)
    if not runs:
        raise SystemExit(f"{path}: no run yet (run its benchmark first)")
    return runs[-1]


def write_runs(path: Path | str, runs: list[dict[str, Any]], bench: str | None = None) -> Path:
    """The results file at ``path`` written with ``runs`` (oldest first), in the one layout (``bench``:
    the benchmark's name, else the file's)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"bench": bench or path.stem, "runs": runs}, ensure_ascii=False, indent=2) + "\n",
                    encoding="utf-8")
    return path


def write_run(path: Path | str, data: dict[str, Any]) -> Path:
    """``data`` appended to the results file at ``path`` as its newest run (dated today unless it says
    when); the file keeps its last ``KEPT_RUNS``."""
    runs = [*read_runs(Path(path)), {"when": dt.date.today().isoformat(), **data}]
    return write_runs(path, runs[-KEPT_RUNS:])


def save(name: str, data: dict[str, Any], directory: Path = RESULTS) -> Path:
    return write_run(directory / f"{name}.json", data)


def rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Distinct synthetic pool rows of similar length (``seed`` names a set; sets never overlap)."""
    return [{"code": 600000 + i % 10_000, "name": f"样本{seed}-{i}", "industry": "测试", "pe_ttm": 5 + i % 80,
             "roe": (i * 7) % 40 - 5, "eps": round(0.1 + i % 30 / 10, 2),
             "report_text": f"2023年营业收入{100 + i}亿元，同比增长{i % 40}%；归母净利润{10 + i % 50}亿元。"}
            for i in range(n)]
