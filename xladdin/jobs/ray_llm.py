"""The rows of a Ray job answered through a ``ray.data.llm`` processor (``xladdin screen --ray
--ray-engine vllm``): vLLM replicas on the cluster's GPUs, run by Ray Data itself, instead of servers
the job reaches over HTTP.

After the report files are read (``ray_job.read_reports``), three stages, each the single-box code:

1. ``Rows(stage="prepare")`` actors make each row's request as the batcher does (its report text
   attached, ``task.parse``, ``request.Requests``: messages, schema and key under the model the
   driver named); a row the disk cache answers, or a bad row, is its result here and asks nothing;
2. the processor answers the others: ``vLLMEngineProcessorConfig`` built from a vLLM profile
   (``server/profiles``: the same engine settings ``xladdin-server serve`` passes ``vllm serve``), or
   any ray.data.llm processor config given to ``run_rows`` (its HTTP processor against an
   OpenAI-compatible server is what the tests run on a machine without a GPU);
3. ``Rows(stage="finish")`` actors validate each answer with the request's validator, store it in
   the cache the moment it is valid and finish the row with the task (rules, audit). An answer that
   does not validate is asked once more with its fault in the messages (``request.ask_again``, as
   ``structured_call`` does), in a second pass of the processor; still wrong, it is the row's
   ``OutputError`` and the row gets what code alone gives.

The driver measures the model once (its context and characters per token, ``request.ContextFit``), so
every actor sizes the report text as one box would, and the key of an answer is the key the server
path gives the same model (the model's source, as vLLM's ``/v1/models`` names it as ``root``): a pool
answered one way is a cache hit the other way.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..core import Cache, ContextFit, Prepared, Requests, ask_again
from ..engine import Engine, SamplingParams, Started
from ..errors import ConfigError, EngineError, InputError, InternalError, OutputError, XladdinError, first_error
from ..reading import documents, figures
from ..settings import Settings
from .ray_values import column, dumps, loads

STAGES = ("prepare", "finish")


@dataclass(frozen=True)
class Model:
    """What the driver learned of the model, for every actor: its id (in every key), context tokens,
    characters per token, and the name an HTTP processor's requests give it."""

    model_id: str
    context_tokens: int | None
    tokens_per_char: float | None
    served: str = ""


class Described(Engine):
    """The model a ray.data.llm processor runs, as the request makers see it: its id, its context and
    its tokenizer (from the model's source, when transformers can load it there). It answers nothing:
    the processor of the pipeline does."""

    kind = "ray_vllm"

    def __init__(self, model_id: str, context_tokens: int | None, tokenizer: str | None = None):
        self._id, self.context_tokens, self._tokenizer_source = model_id, context_tokens, tokenizer
        self._tokenizer: Any = None

    async def start(self) -> Started:
        self.model_id = self._id
        return self.started()

    async def count_tokens(self, text: str) -> int | None:
        if self._tokenizer is None and self._tokenizer_source:
            try:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(self._tokenizer_source)
            except Exception:  # no tokenizer there: the text is sized by the default characters per token
                self._tokenizer_source = None
                return None
        return len(self._tokenizer.encode(text)) if self._tokenizer is not None else None

    async def complete(self, messages: list[dict[str, str]], schema: dict[str, Any], params: SamplingParams) -> str:
        raise InternalError("a ray.data.llm model is asked by the pipeline's processor, not one request at a time")

    def describe(self) -> str:
        return f"{self.model_id} (ray.data.llm)"


class Rows:
    """A Ray actor of stage ``prepare`` or ``finish`` (module docstring). Rows in: ``row``, ``record``
    and ``read`` (``ray_job.read_reports``'s pickles); ``answer`` and ``round`` for ``finish``.
    Rows out: ``row``, ``record``, ``read``, ``result`` (the pickled result or error; empty while the row
    still needs the model) and ``messages`` / ``schema`` (JSON) of what the model is asked."""

    def __init__(self, settings: bytes, task: bytes, model: Model, stage: str, rounds: int = 2,
                 collector: Any = None):
        import ray

        self._ray, self.collector = ray, collector
        settings_ = loads(settings)
        self.task, self.stage, self.rounds = loads(task), stage, rounds
        engine = Described(model.model_id, model.context_tokens)
        engine.model_id = model.model_id
        self.params = settings_.sampling
        self.cache = Cache(settings_.cache_dir, enabled=not settings_.no_cache)
        learned = engine.started()  # what the driver learned of the model: every actor keys under it
        context = ContextFit(engine, self.cache, self.params.max_tokens, settings_.text_tokens,
                             learned=lambda: learned)
        context.tokens_per_char = model.tokens_per_char
        self.requests = Requests(lambda: learned, self.params, context)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        settled: dict[str, list[Any]] = {"row": [], "result": []}  # rows with their result
        asking: dict[str, list[Any]] = {"row": [], "record": [], "read": [], "messages": [], "schema": []}
        answers, errors = batch.get("answer"), batch.get("__inference_error__")
        failures, files, from_store = self.cache.write_failures, 0, 0
        kept = batch["stored"] if "stored" in batch else [0] * len(batch["row"])
        for i, (row, blob, read_blob) in enumerate(zip(batch["row"], batch["record"], batch["read"], strict=True)):
            read = loads(read_blob)
            files += isinstance(read, tuple) and not kept[i]
            from_store += bool(kept[i])
            request, again = self._request(loads(blob), read), None
            if not isinstance(request, Prepared):
                result = request
            elif self.stage == "prepare":
                result = self._cached(request)
                again = request.messages if result is None else None
            else:
                raw = answers[i] if answers is not None else None
                # a row the engine failed skips the postprocess: it carries the engine's error alone
                answer = json.loads(raw) if raw else {"error": "no answer" if errors is None else str(errors[i])}
                result, again = self._finish(request, answer, int(batch["round"][i]))
            if again is None:
                settled["row"].append(row)
                settled["result"].append(dumps(result))
            else:
                for name, value in (("row", row), ("record", blob), ("read", read_blob),
                                    ("messages", json.dumps(again, ensure_ascii=False)),
                                    ("schema", json.dumps(request.schema))):  # type: ignore[union-attr]
                    asking[name].append(value)
        counts = {"asked": len(batch["row"]) if self.stage == "finish" else 0,
                  "write_failures": self.cache.write_failures - failures,
                  "files_read": files if self.stage == "prepare" else 0,
                  "files_from_store": from_store if self.stage == "prepare" else 0}
        if self.stage == "prepare":  # the rows settled here leave the stream: the processor asks the others
            self._ray.get(self.collector.put.remote(settled["row"], settled["result"], counts))
            return {name: column(values) for name, values in asking.items()}
        return {"row": column(settled["row"] + asking["row"]),
                "result": column(settled["result"] + [b""] * len(asking["row"])),
                "record": column([b""] * len(settled["row"]) + asking["record"]),
                "read": column([b""] * len(settled["row"]) + asking["read"]),
                "messages": column([""] * len(settled["row"]) + asking["messages"]),
                "schema": column([""] * len(settled["row"]) + asking["schema"]),
                **{name: column([value] + [0] * (len(batch["row"]) - 1)) for name, value in counts.items()}}

    def _request(self, record: Any, read: Any) -> Prepared | XladdinError:
        """The row's request, made as ``Resolver`` and ``Batcher.prepare`` make it; a bad row's error."""
        try:
            record, path = documents.report_path(record)
            if path is not None:
                if isinstance(read, InputError):
                    raise read
                _, text, readings = read
                # the text with what a reader process read of it, as the reader processes' texts come
                record = documents.with_text(record, path, figures.with_readings(text, readings))
            return self.requests.prepare(self.task, self.task.parse(record))
        except XladdinError as e:
            return e
        except Exception as e:  # a bug on one row is that row's value
            return InternalError(f"{e.__class__.__name__}: {e}")

    def _cached(self, request: Prepared) -> Any | None:
        stored = self.cache.get(request.key)
        if stored is None:
            return None
        try:
            return request.finish(request.validate(stored), True)
        except (ValidationError, ValueError):
            return None  # written by an older schema: ask again

    def _finish(self, request: Prepared, answer: dict[str, Any], round_: int) -> tuple[Any, list | None]:
        """(the row's result, or ``None`` with the messages that ask again)."""
        text = answer.get("text", "")
        try:
            if answer.get("error"):
                raise EngineError(f"{request.model} (ray.data.llm): {answer['error']}")
            if answer.get("cut"):
                raise OutputError(f"answer cut at max_tokens={self.params.max_tokens}", answer=text)
            out = request.validate(text)
        except (OutputError, ValidationError, ValueError) as e:
            fault = e if isinstance(e, OutputError) else OutputError(
                f"model answer does not match the schema: {first_error(e)}", answer=text)
            if round_ + 1 < self.rounds:
                return None, ask_again(request.messages, text, fault)
            return _alone(request, fault), None
        except EngineError as e:
            return _alone(request, e), None
        self.cache.set(request.key, out.model_dump(mode="json"))
        return request.finish(out, False), None


def _alone(request: Prepared, error: XladdinError) -> Any:
    alone = request.alone(error)
    return error if alone is None else alone


# ------------------------------------------------------------------ the processors
def vllm_config(options: Any, params: SamplingParams) -> Any:
    """ray.data.llm's vLLM processor for ``options`` (``ray_job.RayOptions``): its profile's engine
    settings (``profiles.engine_kwargs``), the model's source, ``replicas`` vLLM engines."""
    from ray.data.llm import vLLMEngineProcessorConfig

    from ..engine.profiles import engine_kwargs, get_profile, server_env

    profile = get_profile(options.profile)
    kwargs = {**engine_kwargs(profile, seed=params.seed), **options.engine_kwargs}
    env = server_env(profile)  # batch-invariant decoding, when the profile asks for it
    return vLLMEngineProcessorConfig(model_source=options.model or profile.model, engine_kwargs=kwargs,
                                     runtime_env={"env_vars": env} if env else None,
                                     concurrency=options.replicas, batch_size=options.llm_batch,
                                     should_continue_on_error=True, log_engine_metrics=False,  # (Ray's metrics
                                     # wrapper of vLLM 0.26 fails to import Ray's metrics without ray[default])
                                     chat_template_stage={"enabled": True},
                                     tokenize_stage={"enabled": True}, detokenize_stage={"enabled": True})


def model_of(options: Any) -> tuple[str, int, str]:
    """(model id, context tokens, tokenizer source) of the vLLM processor ``options`` name."""
    from ..engine.profiles import get_profile

    profile = get_profile(options.profile)
    source = options.model or profile.model
    return source, int(options.engine_kwargs.get("max_model_len", profile.max_model_len)), source


def _is_http(config: Any) -> bool:
    return type(config).__name__ == "HttpRequestProcessorConfig"


def processor(config: Any, params: SamplingParams, model: Model) -> Any:
    """The processor of ``config`` with the pre- and postprocessing of its kind: a row's messages and
    schema in (JSON text: each row's schema may differ), ``answer`` out (JSON: the text, whether it was
    cut at max_tokens, an engine error)."""
    from ray.data.llm import build_processor

    carried = ("row", "record", "read", "round")
    if _is_http(config):
        def pre(row: dict[str, Any]) -> dict[str, Any]:
            from ..engine.openai_http import chat_body

            body = chat_body(model.served, json.loads(row["messages"]), json.loads(row["schema"]), params, True)
            return {**{k: row[k] for k in carried}, "payload": body}

        def post(row: dict[str, Any]) -> dict[str, Any]:
            choice = (row.get("http_response") or {}).get("choices", [{}])[0]
            answer = {"text": (choice.get("message") or {}).get("content") or "",
                      "cut": choice.get("finish_reason") == "length"}
            return {**{k: row[k] for k in carried}, "answer": json.dumps(answer, ensure_ascii=False)}

        return build_processor(config, preprocess=pre, postprocess=post)

    sampling = {"temperature": params.temperature, "max_tokens": params.max_tokens, "seed": params.seed}

    def pre_vllm(row: dict[str, Any]) -> dict[str, Any]:
        return {**{k: row[k] for k in carried}, "messages": json.loads(row["messages"]),
                "sampling_params": {**sampling, "structured_outputs": {"json": row["schema"]}}}

    def post_vllm(row: dict[str, Any]) -> dict[str, Any]:
        error = row.get("__inference_error__") or ""
        answer = {"text": row.get("generated_text") or "", "error": error,
                  "cut": not error and int(row.get("num_generated_tokens") or 0) >= params.max_tokens}
        return {**{k: row[k] for k in carried}, "answer": json.dumps(answer, ensure_ascii=False)}

    return build_processor(config, preprocess=pre_vllm, postprocess=post_vllm,
                           builder_kwargs={"chat_template_kwargs": {"enable_thinking": False}})


def described_core(settings: Settings, options: Any) -> Any:
    """The driver's core for ``--ray-engine vllm``: the cache and the request makers over the model the
    options name (``Described``), so the driver measures it and keys its answers as the actors do."""
    from ..core import Batcher

    source, context, tokenizer = model_of(options)
    return Batcher.from_settings(settings, engine=Described(source, context, tokenizer), own_engine=True)


def answering(core: Any, options: Any, settings: Settings) -> tuple[Model, Any]:
    """(the model, as the driver's started ``core`` knows it; the processor config) for ``options``."""
    engine = core.engine
    model = Model(engine.model_id, engine.context_tokens, core.tokens_per_char, getattr(engine, "served", ""))
    if options.engine == "vllm":
        return model, vllm_config(options, settings.sampling)
    from ray.data.llm import HttpRequestProcessorConfig

    from ..engine.openai_http import split_urls

    http = settings.openai_http
    url = split_urls(http.url or "")[0]
    headers = {"Authorization": f"Bearer {http.api_key}"} if http.api_key else None
    return model, HttpRequestProcessorConfig(url=f"{url}/chat/completions", headers=headers,
                                             concurrency=options.replicas, batch_size=options.llm_batch,
                                             http_request_stage={"num_cpus": 0})  # it waits on the server


# ------------------------------------------------------------------ the job
class Collector:
    """A Ray actor: the rows the prepare stage settled (the cache's answers, bad rows) and its counts,
    taken by the driver as the job goes (they leave the stream, which carries only the rows the model
    answers)."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.results: list[bytes] = []
        self.counts: dict[str, int] = {}

    def put(self, rows: list[int], results: list[bytes], counts: dict[str, int]) -> None:
        self.rows += rows
        self.results += results
        for name, value in counts.items():
            self.counts[name] = self.counts.get(name, 0) + value

    def take(self) -> tuple[list[int], list[bytes], dict[str, int]]:
        taken = self.rows, self.results, self.counts
        self.rows, self.results, self.counts = [], [], {}
        return taken


def run_rows(ds: Any, n: int, settings: Settings, task: Any, options: Any, model: Model, config: Any,
             on_result: Any = None) -> tuple[list[Any], dict[str, Any]]:
    """The read rows ``ds`` (``ray_job.read_reports``'s output, ``n`` rows) through the three stages in one
    stream (a file read, its row asked, its answer finished, while other files are still being read):
    results in input order and the job's counts. A row whose answer must be asked again goes through the
    processor once more after the stream. Every row gets its result or its error."""
    import ray
    import ray.data

    results: list[Any] = [None] * n
    counts = {"asked": 0, "write_failures": 0, "files_read": 0, "files_from_store": 0}
    rounds = 2  # the answer, and once more with its fault (structured_call's one retry)
    collector = ray.remote(num_cpus=0)(Collector).remote()
    # the stages' actors reserve no CPU (as the HTTP path's): in one stream with the read tasks and the
    # processor's stages, reserved CPUs of a small machine leave none for the read tasks, and it waits forever
    actors = {"batch_size": options.answer_batch, "num_cpus": 0,
              "compute": ray.data.ActorPoolStrategy(size=options.actors)}
    shared = {"settings": dumps(settings), "task": dumps(task), "model": model, "rounds": rounds,
              "collector": collector}

    def settle(rows: Any, blobs: Any, batch_counts: dict[str, Any]) -> None:
        for name in counts:
            counts[name] += int(sum(batch_counts.get(name, [0])))
        for i, blob in zip(rows, blobs, strict=True):
            if len(blob):
                results[int(i)] = loads(blob)
                if on_result is not None:
                    on_result(int(i), results[int(i)])

    def drain() -> None:
        rows, blobs, taken = ray.get(collector.take.remote())
        settle(rows, blobs, {name: [value] for name, value in taken.items()})

    def finished_rows(stream: Any) -> list[dict[str, Any]]:
        """The stream's batches settled as they come; the rows to ask again."""
        again = []
        for batch in stream.iter_batches(batch_size=None, batch_format="numpy"):
            settle(batch["row"], batch["result"], batch)
            again += [{k: batch[k][j] for k in ("row", "record", "read", "messages", "schema")}
                      for j in range(len(batch["row"])) if not len(batch["result"][j])]
            drain()
        drain()
        return again

    t0 = time.perf_counter()
    answer = processor(config, settings.sampling, model)
    prepared = ds.map_batches(Rows, fn_constructor_kwargs={**shared, "stage": "prepare"}, **actors)
    stream = answer(prepared.map_batches(_round, fn_kwargs={"round_": 0}, batch_size=None))
    again = finished_rows(stream.map_batches(Rows, fn_constructor_kwargs={**shared, "stage": "finish"}, **actors))
    if again:  # asked once more with its fault in the messages: a processor of its own for these rows
        todo = ray.data.from_items([{**item, "round": 1} for item in again],
                                   override_num_blocks=-(-len(again) // options.llm_batch))
        left = finished_rows(answer(todo).map_batches(Rows, fn_constructor_kwargs={**shared, "stage": "finish"},
                                                      **actors))
        assert not left, "the last round gives every row its result"
    for i, value in enumerate(results):
        if value is None:
            results[i] = InternalError("not answered: the ray.data.llm stage gave no answer for this row")
            if on_result is not None:
                on_result(i, results[i])
    return results, {"engine_requests": counts["asked"], "cache_write_failures": counts["write_failures"],
                     "files_read": counts["files_read"], "files_from_store": counts["files_from_store"],
                     "asked_again": len(again),
                     "llm_seconds": round(time.perf_counter() - t0, 3)}


def _round(batch: dict[str, Any], round_: int) -> dict[str, Any]:
    import numpy as np

    return {**batch, "round": np.full(len(batch["row"]), round_)}


def check(options: Any) -> None:
    """Refuse ray.data.llm options that cannot run, naming the option."""
    if options.replicas < 1 or options.llm_batch < 1:
        raise ConfigError("--ray-replicas and the processor's batch must be at least 1")
    if not isinstance(options.engine_kwargs, dict):
        raise ConfigError("--ray-engine-kwargs: a JSON object of vLLM engine arguments")
