"""A pool screened as a Ray Data pipeline (``xladdin screen POOL --ray [ADDRESS]``): the same pool in,
the same report out, for pools that outgrow one box.

The stages, each the single-box path's own code:

1. the driver reads the pool and places every row's report path (``pool.read_pool``,
   ``documents.Reports``, ``screen.date_rows``), exactly as ``pool_screen`` does;
2. Ray tasks read the report files (``documents.locate`` and ``read_file``, code's readings of the
   text ``figures.readings``: what a reader process of ``readers.Reader`` runs), one CPU each;
3. actors answer the rows: each holds a ``Batcher`` built from the settings (the servers of
   ``--engine-url``, the disk cache) and resolves its rows through a ``Resolver``, so a row is
   prepared, asked, validated, audited, cached and finished by the task as on one box; the texts of
   stage 2 are its ``reader`` (``ReadAhead``);
4. the driver writes the report (``report.write_report``) with the run's facts.

The disk cache is the resume ledger: every answer is stored the moment it arrives, so a job killed
half way and started again asks the servers only for the rows still missing. Every actor opens the
same cache directory: on a cluster of several machines it must be a folder all of them see, as must
the report files.

Ray is an optional extra (``pip install 'xladdin[ray]'``); ``ray.data.llm``'s vLLM processor
(``--ray-engine vllm``) needs vLLM and GPUs on the Ray nodes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.util
import logging
import os
import pickle
import threading
import time
import types
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import core
from ..core import Batcher, Cache, Resolver, stamp_of, started
from ..engine import engine_kind
from ..engine.gguf_files import STARTER_NOTE
from ..errors import ConfigError, InputError, InternalError, XladdinError
from ..reading import documents, figures
from ..settings import Settings
from ..tasks.rules import DEFAULT_RULES, Flag, Rules
from ..tasks.screen import ScreenResult, ScreenTask, date_rows, parse_as_of
from . import ray_llm
from .pool_screen import RunSummary, cache_kept, open_pool, run_facts, tally, write_run
from .ray_values import column, dumps, loads

log = logging.getLogger(__name__)
INSTALL = "pip install 'xladdin[ray]'"
VLLM_NEEDS = ("--ray-engine vllm runs ray.data.llm's vLLM processor: it needs vLLM (pip install 'ray[data,llm]' "
              "vllm) and GPUs on the Ray nodes")
ENGINES = ("http", "vllm", "llm-http")


@dataclass(frozen=True)
class RayOptions:
    """How the job runs on Ray. ``address``: ``local`` (a Ray instance of this machine, started for the job
    and shut down after it), else what ``ray.init(address=...)`` takes (``auto``, ``ray://head:10001``);
    ``cpus``: the local instance's CPUs (default: the machine's); ``engine``: ``http`` (the servers of
    ``--engine-url``) or ``vllm`` (``ray.data.llm``); ``actors``: the actors asking the servers, each with
    ``calls`` batches of ``answer_batch`` rows in hand at once; ``read_batch``: files per read task. For
    ``vllm`` (``ray_llm``): the vLLM ``profile`` whose engine settings it runs, the ``model`` (its source:
    a folder or a hub id; default the profile's), ``engine_kwargs`` over the profile's, ``replicas`` vLLM
    engines (one GPU each) and ``llm_batch`` rows per batch given to an engine."""

    address: str = "local"
    cpus: int | None = None
    engine: str = "http"
    actors: int = 1
    calls: int = 2
    answer_batch: int = 16
    read_batch: int = 2
    profile: str = "qwen3-8b-h200"
    model: str | None = None
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    replicas: int = 1
    llm_batch: int = 64


def available() -> bool:
    """Whether Ray Data can be imported here."""
    return importlib.util.find_spec("ray") is not None and importlib.util.find_spec("ray.data") is not None


def check(options: RayOptions, settings: Settings) -> None:
    """Refuse, before any row is read, a job this machine or these settings cannot run; each message
    names what it needs."""
    if not available():
        raise ConfigError(f"--ray needs Ray Data, which is not installed: {INSTALL}")
    if options.engine not in ENGINES:
        raise ConfigError(f"--ray-engine {options.engine!r}: one of {', '.join(ENGINES)}")
    if options.engine == "vllm":
        missing = [name for name in ("ray.data.llm", "vllm") if _missing(name)]
        if missing:
            raise ConfigError(f"{VLLM_NEEDS}; not installed here: {', '.join(missing)}")
    elif engine_kind(settings) != "openai_http":
        raise ConfigError("--ray asks OpenAI-compatible servers: name them with --engine-url URL1,URL2 "
                          "(XLADDIN_ENGINE_URL); the embedded engine does not run in Ray workers")
    if options.engine != "http":
        if importlib.util.find_spec("ray.data.llm") is None:
            raise ConfigError(f"--ray-engine {options.engine} needs ray.data.llm: pip install 'ray[data,llm]'")
        ray_llm.check(options)
    if options.actors < 1 or options.calls < 1 or options.answer_batch < 1 or options.read_batch < 1:
        raise ConfigError("--ray-actors must be at least 1")
    if options.cpus is not None and options.cpus < 1:
        raise ConfigError("--ray-cpus must be at least 1")


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:
        return True


# ------------------------------------------------------------------ stage 2: the report files, in Ray tasks
def read_reports(batch: dict[str, Any], cache_dir: str | None = None, enabled: bool = True) -> dict[str, Any]:
    """A Ray task: each row's report file read as a reader process reads it (``documents.locate`` then
    ``read_file``, and code's readings of the text), or found by its stamp in the cache's store of texts
    (``readers.stored``: a rerun, or a job started again after a kill, parses no file twice), or the
    row's ``InputError``; a row without a file passes as it is. Column ``read``: the pickled ``(stamp,
    text, readings)``, the error, or ``None``; ``stored``: 1 where the text came from the store."""
    out, from_store = [], []
    cache = Cache(cache_dir, enabled=enabled)
    try:
        for blob in batch["record"]:
            _, path = _path_of(loads(blob))
            value, kept = (None, False) if path is None else read_one(path, cache)
            out.append(dumps(value))
            from_store.append(int(kept))
    finally:
        cache.close()
    return {"row": batch["row"], "record": batch["record"], "read": column(out), "stored": column(from_store)}


def _path_of(record: Any) -> tuple[Any, documents.ReportPath | None]:
    try:
        return documents.report_path(record)
    except InputError:  # the answering actor meets the same error again, as the row's value
        return record, None


def read_one(path: documents.ReportPath, cache: Cache | None = None) -> tuple[tuple[Any, str, Any] | InputError, bool]:
    """``path``'s ``(stamp, text, readings)`` or its error, and whether it came from ``cache``'s store (a
    text read here is kept there, as a reader process's is)."""
    try:
        stamp = stamp_of(path)
        found = core.stored(cache, stamp, figures.readings_version()) if cache is not None else None
        if found is not None:
            return (stamp, *found), True
        digest, text = documents.read_file(stamp[0], path.reports.max_bytes)
    except InputError as e:
        return InputError(documents.FIELD, e.message), False
    except Exception as e:  # a reader's failure is the file's error (``reader_process.serve``'s words)
        return InputError(documents.FIELD, f"{os.path.basename(path)}: cannot be read ({e.__class__.__name__}: "
                          f"{e})"), False
    try:
        readings = figures.readings(text)
    except Exception:  # the answering actor reads them then; the text stands
        readings = None
    if cache is not None:
        read = None if readings is None else pickle.dumps(readings, pickle.HIGHEST_PROTOCOL)
        core.store(cache, stamp, digest, zlib.compress(text.encode("utf-8"), 1), read,
                      figures.readings_version())
    return (stamp, text, readings), False


# ------------------------------------------------------------------ stage 3: the answers, in actors
class ReadAhead:
    """A ``Batcher``'s reader whose texts were read before (by stage 2): ``text`` gives a path's stamp and
    text, or raises its read error, as ``readers.Reader.text`` does; nothing is opened here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._texts: dict[str, tuple[Any, int]] = {}  # path → ((stamp, text) or error, rows holding it)

    def hold(self, path: str, read: Any) -> None:
        with self._lock:
            value, rows = self._texts.get(path, (read, 0))
            self._texts[path] = (value, rows + 1)

    def release(self, path: str) -> None:
        with self._lock:
            value, rows = self._texts.pop(path, (None, 1))
            if rows > 1:
                self._texts[path] = (value, rows - 1)

    keeps_results = False  # the job keeps its rows' results in its report; its answers are in the cache

    def _held(self, path: documents.ReportPath) -> tuple[Any, str, Any]:
        with self._lock:
            held = self._texts.get(str(path))
        if held is None:
            raise InputError(documents.FIELD, f"{os.path.basename(path)}: not read (not given to this worker)")
        value = held[0]
        if isinstance(value, InputError):
            raise value
        return value

    def stamp(self, path: documents.ReportPath) -> Any:
        """The stamp stage 2 read the file under (this worker may run where the file is not)."""
        return self._held(path)[0]

    def text(self, path: documents.ReportPath, stamp: Any = None) -> tuple[Any, str]:
        """The text stage 2 read (``stamp``, the caller's, is the one it was read under)."""
        stamp, text, readings = self._held(path)
        return stamp, figures.with_readings(text, readings)  # as a reader process's readings come with its text

    def snapshot(self) -> dict[str, int]:
        return {"files_read": 0, "files_from_store": 0, "files_reading": 0}  # the job counts the files read

    def close(self) -> None:
        with self._lock:
            self._texts.clear()

    def reopen(self) -> None:
        """Nothing to start again: the texts are given by stage 2."""


class Answerer:
    """A Ray actor: the rows of a batch resolved through a ``Resolver`` over this actor's ``Batcher`` (the
    servers of the settings, the disk cache). Column ``result``: each row's pickled result or error;
    ``asked``: engine requests made since the actor last said (so the job sums them once)."""

    def __init__(self, settings: bytes, task: bytes):
        self.task = loads(task)
        self.core = Batcher.from_settings(loads(settings))
        self.core.reader.close()
        self.texts = ReadAhead()
        self.core.reader = self.texts  # type: ignore[assignment]
        self.core.start()
        self.resolver = Resolver(self.core)
        self._lock = threading.Lock()
        self._asked = 0
        self._write_failures = 0

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        records, held, read_ok = [], [], []
        for blob, read_blob, kept in zip(batch["record"], batch["read"], batch["stored"], strict=True):
            record, read = loads(blob), loads(read_blob)
            records.append(record)
            read_ok.append(int(read is not None and not isinstance(read, InputError) and not kept))
            if read is None:
                continue
            _, path = documents.report_path(record)
            assert path is not None
            self.texts.hold(str(path), read)
            held.append(str(path))
        try:
            results = self.resolver.map(self.task, records)
        finally:
            for path in held:
                self.texts.release(path)
        snap = self.core.snapshot()
        with self._lock:
            asked, self._asked = snap["engine_requests"] - self._asked, snap["engine_requests"]
            failures = self.core.cache.write_failures - self._write_failures
            self._write_failures = self.core.cache.write_failures
        counts = [0] * len(records)
        counts[0] = asked
        failed = [0] * len(records)
        failed[0] = failures
        return {"row": batch["row"], "result": column([dumps(r) for r in results]),
                "asked": column(counts), "write_failures": column(failed), "file_read": column(read_ok),
                "file_stored": batch["stored"]}


# ------------------------------------------------------------------ the job
@contextlib.contextmanager
def ray_session(options: RayOptions) -> Iterator[Any]:
    """Ray, connected for one job and shut down after it (a local instance ends with it)."""
    import ray
    import ray.data

    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if ray.is_initialized():  # the caller's own session: used, and left as it was
        yield ray
        return
    if options.address == "local":
        ray.init(num_cpus=options.cpus or os.cpu_count() or 1, include_dashboard=False,
                 logging_level=logging.WARNING, log_to_driver=False)
    else:
        ray.init(address=options.address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def run_rows(records: list[Any], settings: Settings, task: Any, options: RayOptions,
             on_result: Any = None, llm: tuple[ray_llm.Model, Any] | None = None) -> tuple[list[Any], dict[str, Any]]:
    """``records`` (placed by a front door) through the pipeline: results in their order, and the job's
    counts (engine requests, report files read, cache writes that failed). A row lost with a worker that
    failed is that row's ``InternalError``. ``llm``: the model and the ray.data.llm processor config that
    answer the rows (``ray_llm``) instead of actors asking the servers of the settings."""
    t0 = time.perf_counter()
    with ray_session(options) as ray:
        import ray.data

        ray_start = time.perf_counter() - t0

        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.max_errored_blocks = -1  # a worker lost (a report file that crashes its reader) loses its rows only
        items = [{"row": i, "record": dumps(r)} for i, r in enumerate(records)]
        ds = ray.data.from_items(items, override_num_blocks=max(1, -(-len(items) // options.read_batch)))
        # a file that crashes its reader crashes it again: retried once (Ray Data's default is forever), then its
        # rows are lost, each that row's error
        ds = ds.map_batches(read_reports, batch_size=options.read_batch, num_cpus=1, max_retries=1,
                            fn_kwargs={"cache_dir": None if settings.cache_dir is None else str(settings.cache_dir),
                                       "enabled": not settings.no_cache})
        if llm is not None:
            try:
                results, counts = ray_llm.run_rows(ds, len(records), settings, task, options, *llm, on_result)
            except ray.exceptions.RayError as e:
                raise XladdinError(f"the Ray job failed: {_first_line(e)} (rows answered are in the cache: run "
                                   "the same command again)") from e
            counts.update(ray_start_s=round(ray_start, 3))
            return results, counts
        ds = ds.map_batches(Answerer, batch_size=options.answer_batch, num_cpus=0,
                            compute=ray.data.ActorPoolStrategy(size=options.actors,
                                                               max_concurrent_calls_per_actor=options.calls),
                            fn_constructor_kwargs={"settings": dumps(settings), "task": dumps(task)})
        results: list[Any] = [None] * len(records)
        seen = [False] * len(records)
        counts: dict[str, Any] = {"engine_requests": 0, "cache_write_failures": 0, "files_read": 0,
                                  "files_from_store": 0, "ray_start_s": round(ray_start, 3)}
        try:
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                counts["engine_requests"] += int(sum(batch["asked"]))
                counts["cache_write_failures"] += int(sum(batch["write_failures"]))
                counts["files_read"] += int(sum(batch["file_read"]))
                counts["files_from_store"] += int(sum(batch["file_stored"]))
                for i, blob in zip(batch["row"], batch["result"], strict=True):
                    results[int(i)], seen[int(i)] = loads(blob), True
                    if on_result is not None:
                        on_result(int(i), results[int(i)])
        except ray.exceptions.RayError as e:
            raise XladdinError(f"the Ray job failed: {_first_line(e)} (rows answered are in the cache: run the same "
                              "command again)") from e
    for i, done in enumerate(seen):
        if not done:
            results[i] = InternalError("not answered: the Ray worker of this row's read task died twice (a report "
                                       "file of that task that crashes its reader?)")
            if on_result is not None:
                on_result(i, results[i])
    return results, counts


def _first_line(e: BaseException) -> str:
    lines = [line for line in str(e).splitlines() if line.strip()]
    return lines[-1].strip() if lines else e.__class__.__name__


def screen_ray(input_path: str | Path, output_path: str | Path, settings: Settings, options: RayOptions, *,
               rules: Rules = DEFAULT_RULES, progress: bool = True, reports: str | Path | None = None,
               compare: str | Path | None = None, as_of: Any = None) -> RunSummary:
    """``pool_screen.screen_file`` run as a Ray Data pipeline: the same pool in, the same report out."""
    check(options, settings)
    as_of = parse_as_of(as_of)
    task = ScreenTask(rules=rules, max_text_chars=settings.max_text_chars)
    earlier, pool, records = open_pool(input_path, output_path, settings, reports, as_of, compare)
    began = dt.datetime.now().astimezone()
    t0 = time.perf_counter()
    described = ray_llm.described_core(settings, options) if options.engine == "vllm" else None
    # the servers reached (and their model named) before any Ray worker starts; for vllm, the model measured
    with started(settings, described) as core, contextlib.closing(described) if described else contextlib.nullcontext():
        # a file dated only by its text: read by the driver's readers into the cache's store of texts, where the
        # job's read tasks find it
        records, dating = date_rows(pool, records, as_of, core.reader.read_now, settings.undated_reports)
        sent = dating.sent(records)
        llm = ray_llm.answering(core, options, settings) if options.engine != "http" else None
        results, hits, errors, counts = _screen(sent, settings, task, options, progress, llm)
        results, errors = dating.finish(results), errors + len(dating.refused)
        seconds = time.perf_counter() - t0
        alone = sum(isinstance(r, ScreenResult) and Flag.NO_ANSWER in r.flags for r in results)
        note = STARTER_NOTE if core.learned.starter else None
        run_counts = {"errors": errors, "cache_hits": hits, "engine_requests": counts["engine_requests"],
                      "without_answer": alone,
                      "files_read": counts["files_read"],  # report files parsed by the job's Ray tasks
                      "files_from_store": counts["files_from_store"],  # texts found in the cache's store
                      "ray": {"address": options.address, "cpus": options.cpus, "engine": options.engine,
                              "actors": options.actors, "start_s": counts["ray_start_s"],  # Ray connected or started
                              **({"replicas": options.replicas, "profile": options.profile,
                                  "answering_s": counts["llm_seconds"]} if llm else {})}}
        run = run_facts(settings, core, task, input_path, reports, pool, len(records), note=note, counts=run_counts,
                        facts={"rules": rules.model_dump(), **dating.facts()}, began=began, seconds=seconds)
        kept = types.SimpleNamespace(enabled=core.cache.enabled, warning=core.cache.warning,
                                     write_failures=counts["cache_write_failures"])
        out, changes = write_run(output_path, pool, results, ScreenResult, run, cache_kept(kept, results), earlier,
                                 compare)
    return RunSummary(len(records), len(records) - errors, errors, hits, seconds, out, note, alone,
                      pool.unrecognised(), changes)


def _screen(records: list[Any], settings: Settings, task: Any, options: RayOptions,
            progress: bool, llm: Any = None) -> tuple[list[Any], int, int, dict[str, Any]]:
    """Results in input order through the pipeline, with a progress bar; (results, cache hits, errors, the
    job's counts)."""
    with tally(len(records), f"{task.name} (ray)", progress) as (on_result, kept):
        results, counts = run_rows(records, settings, task, options, on_result, llm)
    return results, kept[0], kept[1], counts
