"""``python -m bench schema [--model PATH.gguf] [--rows N]``: what leaving the figures code has
already read out of the model's schema saves, side by side in one run on the same rows.

Both arms send the same prompts to the same embedded engine (the starter model unless ``--model``),
all rows at once through its slots; one arm with the full schema (every figure asked), the other
with each row's own schema (``ScreenTask.schema_for``). Measured: seconds and characters of
answer. Results: ``bench/results/schema.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from xladdin.engine.base import SamplingParams
from xladdin.engine.embedded import EmbeddedEngine
from xladdin.engine.gguf_files import resolve_model
from xladdin.settings import Settings
from xladdin.tasks import ScreenTask

from .common import RESULTS, machine, rows, write_run

HEADLINE = ('speedup', 'answer_chars_ratio')  # the numbers docs/BENCHMARKS.md gives for each earlier run

TASK = ScreenTask()


async def _arm(engine: EmbeddedEngine, reqs: list[tuple[Any, dict[str, Any]]], params: SamplingParams) -> dict:
    async def one(inp: Any, schema: dict[str, Any]) -> tuple[int, bool]:
        try:
            text = await engine.complete(TASK.messages(inp), schema, params)
            TASK.validate_output(text, inp)
            return len(text), True
        except Exception:
            return 0, False

    t0 = time.perf_counter()
    done = await asyncio.gather(*(one(inp, schema) for inp, schema in reqs))
    seconds = time.perf_counter() - t0
    return {"rows": len(reqs), "seconds": round(seconds, 2), "rows_per_s": round(len(reqs) / seconds, 3),
            "answer_chars": sum(c for c, _ in done), "errors": sum(not ok for _, ok in done)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench schema")
    p.add_argument("--model", help="GGUF (default: the starter model)")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--out", default=str(RESULTS / "schema.json"))
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="xladdin-bench-schema-"))
    model = resolve_model(args.model, workdir)
    settings = Settings.load({"cache_dir": workdir / "cache", "max_parallel": args.parallel, "timeout": 600}, env={})
    engine = EmbeddedEngine(settings.embedded, model)
    engine.load()
    params = settings.sampling
    try:
        # two sets of distinct rows (no arm answers from the other's prompt cache), same shape
        full_rows = [TASK.parse(r) for r in rows(args.rows, seed=201)]
        own_rows = [TASK.parse(r) for r in rows(args.rows, seed=202)]
        full = asyncio.run(_arm(engine, [(inp, TASK.schema) for inp in full_rows], params))
        own = asyncio.run(_arm(engine, [(inp, TASK.schema_for(inp)) for inp in own_rows], params))
    finally:
        engine.close()
    asked = sum(len(TASK.schema_for(inp)["properties"]) for inp in own_rows) / len(own_rows)
    data = {"model": model.model_id, "task_version": TASK.version, "slots": args.parallel, "machine": machine(),
            "full_schema": full,
            "per_row_schema": own, "keys_asked_per_row": {"full": len(TASK.schema["properties"]),
                                                            "per_row": round(asked, 2)},
            "speedup": round(full["seconds"] / own["seconds"], 2),
            "answer_chars_ratio": round(own["answer_chars"] / max(1, full["answer_chars"]), 3)}
    write_run(args.out, data)
    print(json.dumps(data, ensure_ascii=False, indent=2))
    return 0


def render(d: dict[str, Any]) -> list[str]:
    """Section 7 of docs/BENCHMARKS.md."""
    full, own = d["full_schema"], d["per_row_schema"]
    return [
        "## 7. What code reads is not asked of the model (`python -m bench schema`)",
        "",
        f"Model `{d['model']}`, {d['slots']} slots, {d['machine']['cpus']} CPUs, task `{d.get('task_version')}`; the "
        "same kind of rows (distinct sets), all at once, one arm after the other in one run.",
        "",
        "| schema sent | keys asked per row | rows | seconds | rows/s | answer characters | errors |",
        "|---|---|---|---|---|---|---|",
        f"| every figure | {d['keys_asked_per_row']['full']} | {full['rows']} | {full['seconds']} | "
        f"{full['rows_per_s']} | {full['answer_chars']} | {full['errors']} |",
        f"| without the figures code read | {d['keys_asked_per_row']['per_row']} | {own['rows']} | "
        f"{own['seconds']} | {own['rows_per_s']} | {own['answer_chars']} | {own['errors']} |",
        "",
        f"- **{d['speedup']}×** faster; answers {d['answer_chars_ratio']} as long.",
        "",
    ]
