"""What every task owns: input model, output model (the JSON schema sent for
constrained decoding), prompt, version, and deterministic post-processing; and what the tasks that read a
report share: its excerpt within the model's budget (``excerpt``, below). Tasks never do I/O."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Annotated, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ..errors import InputError, XladdinError, first_error
from ..reading.document import Document
from ..reading.pool import trim_text
from ..reading.sections import HEADINGS, section_starts
from ..reading.tables import PAGE_BREAK, page_of

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out", bound=BaseModel)
Res = TypeVar("Res", bound=BaseModel)


class Provenance(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str = Field(title="模型 model")
    task_version: str = Field(title="任务版本 task version")
    cached: bool = Field(title="缓存命中 cached")


class ResultRow(BaseModel):
    """A result shown as a table row (a report's columns, a spill): field titles are the headers, and
    a ``provenance`` field ends the row with its three columns."""

    model_config = ConfigDict(frozen=True)

    def cells(self) -> list[Any]:
        """Flat row of cell values in column order (lists joined by commas, enums as their values,
        provenance last)."""
        row: list[Any] = []
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, Provenance):
                row += [value.model, value.task_version, value.cached]
            elif isinstance(value, list):
                row.append(",".join(str(getattr(v, "value", v)) for v in value))
            elif isinstance(value, Enum):
                row.append(value.value)
            else:
                row.append(value)
        return row

    @classmethod
    def headers(cls) -> list[str]:
        heads = [f.title or n for n, f in cls.model_fields.items() if n != "provenance"]
        return heads + [f.title or n for n, f in Provenance.model_fields.items()]


# One character JSON writes as itself: no quote mark, backslash or control character (no escapes).
PLAIN_CHAR = r'[^"\\\x00-\x1f]'
# xgrammar compiles a counted class in time that grows with the count, and fails past ~200
# (``python -m bench grammar``, ``bench/results/grammar.json``).
MAX_PLAIN_CHARS = 128


def plain_text(min_chars: int, max_chars: int) -> Any:
    """A string the model writes, ``min_chars`` to ``max_chars`` characters without escapes, as one
    pattern (a character class with a count), not ``minLength``/``maxLength``.

    Constrained decoding computes a token mask for every sequence at every step. A length bound on a
    JSON string (where escapes may appear) throws xgrammar off its fast path: tens of times the time
    per mask on the screen schemas (``python -m bench grammar``, ``bench/results/grammar.json``), and
    on an H200 with ~1,000 sequences running vLLM's engine loop waited on those masks most of the
    time (docs/BENCHMARKS.md §6). The counted class
    keeps the bound (which a model with random weights needs to end its strings at all) on the fast
    path."""
    if not 0 <= min_chars <= max_chars <= MAX_PLAIN_CHARS:
        raise ValueError(f"plain_text({min_chars}, {max_chars}): counts 0..{MAX_PLAIN_CHARS}")
    return Annotated[str, StringConstraints(pattern=f"^{PLAIN_CHAR}{{{min_chars},{max_chars}}}$")]


def plain(text: str) -> str:
    """``text`` with what ``plain_text`` leaves out mended: quote marks as ”, backslashes and control
    characters dropped (for code that mends a model's free wording, e.g. a reason)."""
    return "".join("”" if c == '"' else c for c in text if c != "\\" and ord(c) >= 0x20)


def validate_input(model: type[In], data: Mapping[str, Any] | In) -> In:
    """Validate ``data`` into ``model``; a failure is an ``InputError`` naming the field."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as e:
        field, _, why = first_error(e, model.__name__).partition(": ")
        raise InputError(field, why.lower()) from None


class Task(ABC, Generic[In, Out, Res]):
    """One kind of question. Subclasses set the class attributes and three methods."""

    name: ClassVar[str]
    version: ClassVar[str]
    input_model: ClassVar[type[BaseModel]]
    output_model: ClassVar[type[BaseModel]]
    result_model: ClassVar[type[BaseModel]]

    def parse(self, data: Mapping[str, Any] | In) -> In:
        return validate_input(self.input_model, data)  # type: ignore[return-value]

    system: ClassVar[str]

    def messages(self, inp: In) -> list[dict[str, str]]:
        """The fixed system prompt first (shared by every row, so the engine's prefix
        cache serves it), the row second."""
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user_text(inp)}]

    @abstractmethod
    def user_text(self, inp: In) -> str:
        """The part of the prompt that is this input's own."""

    @abstractmethod
    def finish(self, inp: In, out: Out, provenance: Provenance) -> Res:
        """Deterministic post-processing of a validated model answer."""

    def without_answer(self, inp: In, error: XladdinError, provenance: Provenance) -> Res | None:
        """The result code alone gives when the model's answer failed (cut, not valid JSON, off the
        schema, even when asked again); ``None``: the row is that error. Never cached."""
        return None

    def key_config(self, inp: In | None = None) -> dict[str, Any]:
        """Task settings that change what the model is asked for ``inp`` (part of the cache key)."""
        return {}

    def fitted(self, text_chars: int | None) -> Task:
        """This task with its input text sized to ``text_chars`` characters (what the engine's
        context holds); a task without a long text is itself."""
        return self

    def identity(self) -> Hashable:
        """Everything that decides this task's result for a given input and answer."""
        return (self.name, self.version, *sorted(self.key_config().items()))

    @cached_property
    def schema(self) -> dict[str, Any]:
        return self.output_model.model_json_schema()

    def schema_for(self, inp: In) -> dict[str, Any]:
        """The JSON schema sent for ``inp`` (a task whose answers depend on the input overrides this)."""
        return self.schema

    def validate_output(self, data: str | dict[str, Any], inp: In | None = None) -> Out:
        """The model's answer (JSON text, or a cached dict) as the output model, after ``repair``;
        raises ValueError."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as e:
                raise ValueError(f"not JSON: {e}") from None
        if isinstance(data, dict):
            data = self.repair(data, inp)
        return self.output_model.model_validate(data)  # type: ignore[return-value]

    def repair(self, data: dict[str, Any], inp: In | None = None) -> dict[str, Any]:
        """Mend in code what code can mend in a model's answer for ``inp`` (never asked again for it)."""
        return data

    @staticmethod
    def row_json(inp: BaseModel, exclude: set[str] | None = None) -> str:
        """The row as the model reads it: compact JSON (no space after a colon or a comma: ~15 fewer
        Qwen3 tokens on a short pool row of ~140), the fields that are None left out, in the model's
        field order."""
        data = inp.model_dump(mode="json", exclude_none=True, exclude=exclude)
        return json.dumps(data, ensure_ascii=False, sort_keys=False, separators=(",", ":"))


# What the model is given of a long report: chosen, not cut.
#
# A report longer than the budget (characters that fit the engine's context, ``Batcher`` sizes it)
# is given as its sections that carry the figures and the management discussion — 主要会计数据 /
# 主要财务指标, then 经营情况讨论与分析 / 管理层讨论与分析 — then its opening and later sentences
# with digits while they fit. Code reads the tables itself; the excerpt is what the model reads, and
# the result says how much of the text that was and from where (``Excerpt.scope``).

# each section ``reading.sections`` finds (its label), the share of the budget it gets at most
SHARES: dict[str, float] = {"主要会计数据": 0.35, "经营情况讨论与分析": 0.45}


@dataclass(frozen=True)
class Excerpt:
    text: str
    trimmed: bool  # the model did not get the whole text
    scope: str  # what it got, in words ("" for the whole text)


def _pages(text: str, start: int, end: int) -> str:
    a, b = page_of(text, start), page_of(text, max(start, end - 1))
    return f"第{a}页" if a == b else f"第{a}-{b}页"


def excerpt(text: str, limit: int, skip: frozenset[str] = frozenset()) -> Excerpt:
    """At most ``limit`` characters of ``text`` for the model (page breaks as new lines); ``skip``: the
    labels of sections the model need not read (a figure table code has read). Chosen once per
    ``Document``, limit and skip (a row's prompt and its result's scope both ask)."""
    if not isinstance(text, Document):
        return _excerpt(text, limit, skip)
    name = f"excerpt:{limit}:{','.join(sorted(skip))}"
    chosen = text.kept(name)
    return chosen if chosen is not None else text.keep(name, _excerpt(text, limit, skip))


def _excerpt(text: str, limit: int, skip: frozenset[str]) -> Excerpt:
    if len(text) <= limit:
        return Excerpt(text.replace(PAGE_BREAK, "\n"), False, "")
    parts: list[tuple[int, int, str]] = []
    starts = section_starts(text)
    for label, _ in HEADINGS:  # in the order they are taken; one found without a share: a KeyError, not dropped
        if label in skip or label not in starts:
            continue
        span = starts[label], min(len(text), starts[label] + int(limit * SHARES[label]))
        if not any(a <= span[0] < b for a, b, _ in parts):
            parts.append((*span, label))
    used = sum(b - a for a, b, _ in parts)
    rest = limit - used - 2 * len(parts)
    pieces = []
    if rest >= 50:
        # the rest of the budget: the opening and later sentences with digits, from what is not taken yet
        remaining = "".join(text[a:b] for a, b in _gaps(len(text), parts))
        head, _ = trim_text(remaining, rest)
        pieces.append(("开头及含数字的句子", head))
    for a, b, label in sorted(parts):
        pieces.append((f"{label}({_pages(text, a, b)})" if PAGE_BREAK in text else label, text[a:b]))
    body = "\n…\n".join(p for _, p in pieces).replace(PAGE_BREAK, "\n")[:limit]
    scope = f"读了全文{len(text):,}字中的{len(body):,}字: " + ", ".join(label for label, _ in pieces)
    return Excerpt(body, True, scope)


def _gaps(n: int, parts: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    out, at = [], 0
    for a, b, _ in sorted(parts):
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < n:
        out.append((at, n))
    return out
