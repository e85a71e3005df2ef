"""``xladdin-server verify``: check a model before it is trusted.

1. hashes    — sha256 of each model file against a manifest (``sha256sum`` lines
               ``HASH  FILE``, or JSON ``{"FILE": "HASH"}``), e.g. the published hashes;
2. smoke     — a schema-constrained screen of sample rows comes back valid;
3. agreement — the same rows through a second engine (a vLLM server vs the
               embedded engine, or two quantisations): how often risk level,
               score, reason and each extracted figure agree.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xladdin.core import Resolver, started
from xladdin.errors import ConfigError, XladdinError
from xladdin.reading.documents import Reports
from xladdin.reading.pool import SAMPLE_POOL, read_pool
from xladdin.settings import Settings
from xladdin.tasks import ScreenResult, ScreenTask
from xladdin.tasks.screen import RESULT_FIGURES


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def table(self) -> str:
        width = max([len(c.name) for c in self.checks] + [5])
        lines = [f"{'check':<{width}}  result  detail", f"{'-' * width}  ------  ------"]
        lines += [f"{c.name:<{width}}  {'ok' if c.ok else 'FAIL':<6}  {c.detail}" for c in self.checks]
        lines.append(f"{'':<{width}}  {'PASS' if self.ok else 'FAIL'}")
        return "\n".join(lines)


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_manifest(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"manifest {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"manifest {path} is not text: expected sha256sum lines or JSON") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
            return {str(k): v.lower() for k, v in data.items()}
        except (ValueError, AttributeError) as e:
            raise ConfigError(f"manifest {path} is not a JSON object of file → sha256: {e}") from None
    out = {}
    for line in text.splitlines():
        if line.strip():
            digest, _, name = line.strip().partition(" ")
            out[name.strip().lstrip("*")] = digest.lower()
    if not out:
        raise ConfigError(f"manifest {path} lists no files")
    return out


def check_hashes(model_path: Path, manifest: Path) -> list[Check]:
    base = model_path if model_path.is_dir() else model_path.parent
    checks = []
    for name, expected in read_manifest(manifest).items():
        f = base / name
        if not f.is_file():
            checks.append(Check(f"sha256 {name}", False, "missing"))
            continue
        actual = sha256_file(f)
        detail = "matches" if actual == expected else f"is {actual[:16]}…, expected {expected[:16]}…"
        checks.append(Check(f"sha256 {name}", actual == expected, detail))
    return checks


def screen_rows(settings: Settings, rows: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    with started(settings.model_copy(update={"no_cache": True})) as b:
        results = Resolver(b).map(ScreenTask(), rows)
        return b.engine.describe(), results


def smoke(results: list[Any], label: str, name: str = "smoke") -> Check:
    bad = [r for r in results if not isinstance(r, ScreenResult)]
    detail = f"{len(results) - len(bad)}/{len(results)} rows valid ({label})"
    if bad:
        detail += f"; first error: {bad[0]}"
    return Check(name, not bad, detail)


def agreement(a: list[Any], b: list[Any], min_agreement: float) -> list[Check]:
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if isinstance(x, ScreenResult) and isinstance(y, ScreenResult)]
    if not pairs:
        return [Check("agreement", False, "no row succeeded on both engines")]

    def rate(same) -> tuple[float, str]:
        n = sum(1 for x, y in pairs if same(x, y))
        return n / len(pairs), f"{n}/{len(pairs)}"

    def close(u: float | None, v: float | None) -> bool:
        return (u is None and v is None) or (
            u is not None and v is not None and abs(u - v) <= 0.01 * max(abs(u), abs(v), 1e-9)
        )

    checks = []
    for name, same, gate in (
        ("agree risk level", lambda x, y: x.risk_level == y.risk_level, True),
        ("agree score", lambda x, y: x.score == y.score, True),
        ("agree figures", lambda x, y: all(close(getattr(x, f), getattr(y, f)) for f in RESULT_FIGURES), True),
        ("agree reason", lambda x, y: x.reason == y.reason, False),  # wording may differ: reported only
    ):
        r, frac = rate(same)
        ok = r >= min_agreement if gate else True
        checks.append(Check(name, ok, f"{frac} = {r:.0%}" + ("" if gate else " (informative)")))
    return checks


def verify(settings: Settings, *, against: Settings | None = None, model_path: Path | None = None,
           manifest: Path | None = None, rows: int = 8, min_agreement: float = 0.9,
           pool: Path = SAMPLE_POOL) -> Report:
    report = Report()
    if manifest is not None:
        if model_path is None:
            raise ConfigError("--manifest needs --model PATH (the file or folder to hash)")
        report.checks += check_hashes(model_path, manifest)
    allowed = Reports.of(settings, pool.parent)
    records = [allowed.place(r, pool.parent) for r in read_pool(pool).records()[:rows]]
    try:
        label, first = screen_rows(settings, records)
    except XladdinError as e:
        report.checks.append(Check("smoke", False, str(e)))
        return report
    report.checks.append(smoke(first, label))
    if against is not None:
        try:
            label_b, second = screen_rows(against, records)
        except XladdinError as e:
            report.checks.append(Check("smoke (against)", False, str(e)))
            return report
        report.checks.append(smoke(second, label_b, "smoke (against)"))
        report.checks += agreement(first, second, min_agreement)
    return report
