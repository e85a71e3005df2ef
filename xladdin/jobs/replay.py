"""Reruns that reproduce: what a rerun needs, kept on the Run sheet (``record``), and a rerun from it
(``replay``) that lists what differs, if anything.

The record holds the model (its id, its file and the file's sha256 for the embedded engine; the
served name, the server and its context for a server), the sampling (temperature, seed, max tokens),
the task and its version, the rules, the as-of date, the input file and its sha256, the reports
folder. ``xladdin screen --replay REPORT`` reads it back from the report (any format the product
writes), screens the same input the same way into a new report, and compares the two: the facts
of the run that differ (a new model, rules, an input that changed since), then every verdict column
of every row (matched by code). With the cache answers are the same by construction; on an empty
cache the engine is asked again (temperature 0, a fixed seed).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..settings import Settings
from ..tasks.rules import Rules
from ..tasks.screen import ScreenResult
from .changes import CODE, ERROR, Saved, matched, read_saved

# the verdict columns a replay compares: all but whether a row came from the cache
NOT_COMPARED = {"缓存命中 cached"}
# the run's facts a rerun must match
FACTS = ("model", "model_sha256", "served_model", "task", "task_version", "rules", "sampling", "as_of",
         "input_sha256", "max_text_chars")


def file_sha256(path: str | Path, memo_dir: Path | None = None) -> str | None:
    """The sha256 of a file (``None`` when it cannot be read), remembered in ``memo_dir`` by its path, size
    and modification time (a model file of gigabytes is hashed once)."""
    try:
        real = Path(path).resolve()
        st = real.stat()
    except OSError:
        return None
    stamp = f"{real}|{st.st_size}|{st.st_mtime_ns}"
    memo = memo_dir / "file_digests.json" if memo_dir else None
    known: dict[str, str] = {}
    if memo is not None and memo.is_file():
        try:
            known = json.loads(memo.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            known = {}
    if stamp in known:
        return known[stamp]
    try:
        with real.open("rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None
    if memo is not None:
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            memo.write_text(json.dumps({**known, stamp: digest}), encoding="utf-8")
        except OSError:
            pass  # only a memo
    return digest


def record(settings: Settings, engine: Any, task: Any, input_path: str | Path, reports: str | Path | None,
           memo_dir: Path | None) -> dict[str, Any]:
    """What a rerun needs, for the Run sheet."""
    model_file = getattr(getattr(engine, "_model", None), "path", None)
    options = settings.options_for(engine.kind)
    if engine.kind == "embedded":
        engine_options = {"n_ctx": options.n_ctx, "slots": engine.max_parallel, "n_threads": options.n_threads}
    else:
        engine_options = {"max_model_len": getattr(engine, "max_model_len", None),
                          "max_parallel": options.max_parallel}
    return {
        "engine_kind": engine.kind,
        "model_file": str(model_file) if model_file else None,
        "model_sha256": file_sha256(model_file, memo_dir) if model_file else None,
        "served_model": getattr(engine, "served", None),
        "server": getattr(engine, "server_url", None),
        "engine_options": engine_options,  # a server's own flags are not known to its clients
        "sampling": settings.sampling.model_dump(),
        "seed": settings.sampling.seed,
        "max_text_chars": settings.max_text_chars,
        "input_path": str(Path(input_path).resolve()),
        "input_sha256": file_sha256(input_path),
        "reports_dir": str(Path(reports).expanduser().resolve()) if reports else None,
        "replay": "xladdin screen --replay REPORT",
    }


def recorded(report: str | Path) -> Saved:
    """A report whose Run sheet holds a rerun's record."""
    saved = read_saved(report)
    if not saved.run.get("input_path") or saved.run.get("task") != "screen":
        raise InputError("replay", f"{Path(report).name}: no screen run recorded in it (a report of xladdin screen "
                         "from this version holds one)")
    pool = Path(str(saved.run["input_path"]))
    if not pool.is_file():
        raise InputError("replay", f"{Path(report).name} was screened from {pool}, which is not there now (moved or "
                         "deleted): put the pool back there, or screen it again with xladdin screen")
    return saved


def replay_settings(saved: Saved, overrides: dict[str, Any]) -> Settings:
    """The settings of a rerun: the sampling and text limit recorded, over the engine configured now
    (``overrides``: the command line's)."""
    run = saved.run
    sampling = run.get("sampling") or {}
    given = {k: v for k, v in overrides.items() if v is not None}
    return Settings.load({**given, **{k: sampling[k] for k in ("temperature", "seed", "max_tokens") if k in sampling},
                          **({"max_text_chars": run["max_text_chars"]} if run.get("max_text_chars") else {})})


def recorded_rules(saved: Saved) -> Rules:
    """The rules the report was screened under; an ``InputError`` naming the report and the rule when
    they are not rules."""
    from pydantic import ValidationError

    given = saved.run.get("rules") or {}
    if not isinstance(given, dict):
        raise InputError("replay", f"{saved.path.name}: its recorded rules are not a table of rules ({given!r:.60})")
    try:
        return Rules.model_validate(given)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise InputError("replay", f"{saved.path.name}: recorded rule {where}: {err['msg']} "
                         f"(got {err.get('input')!r:.40}); give rules with --rules FILE") from None


# the model's own words: they may vary between reruns of the embedded engine where no verdict does (a
# verdict, its figures and flags are checked by code); a difference in them is reported apart, never a change
TEXT_COLUMNS = {"理由 reason", "说明 notes", "出处 evidence"}


def differences(old: Saved, new: Saved) -> tuple[list[str], list[str]]:
    """What differs between a report and its rerun: the run's facts and each row's verdict columns (level,
    score, flags, figures, errors); and apart, the text columns (``TEXT_COLUMNS``)."""
    found, text = [], []
    for fact in FACTS:
        was, now = old.run.get(fact), new.run.get(fact)
        if was == now:
            continue
        if isinstance(was, dict) and isinstance(now, dict):
            parts = [f"{k} {was.get(k)!r} → {now.get(k)!r}" for k in dict.fromkeys([*was, *now])
                     if was.get(k) != now.get(k)]
            found.append(f"{fact}: " + ", ".join(parts))
        else:
            found.append(f"{fact}: {was!r} → {now!r}")
    columns = [c for c in [*ScreenResult.headers(), ERROR] if c not in NOT_COMPARED]
    before, after, _ = matched(old, new)
    for key in dict.fromkeys([*before, *after]):
        shown = (after.get(key) or before[key])[0]
        code = " ".join(part for part in (shown, key[1]) if part) + (f" (#{key[2]})" if key[2] > 1 else "")
        if key not in after or key not in before:
            found.append(f"{code}: {'only in the original' if key not in after else 'only in the rerun'}")
            continue
        for column in columns:
            was, now = _same(before[key][1].get(column)), _same(after[key][1].get(column))
            if was != now:
                (text if column in TEXT_COLUMNS else found).append(f"{code} {column}: {was!r} → {now!r}")
    return found, text


def _same(value: Any) -> Any:
    """A cell as a .csv, .xlsx and .json give it back alike (a number's text as its number)."""
    if value == "":
        return None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() and "." not in value else number
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


__all__ = ["CODE", "differences", "file_sha256", "record", "recorded", "recorded_rules", "replay_settings"]
