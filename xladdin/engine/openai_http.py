"""Any OpenAI-compatible server: vLLM in production, llama.cpp or SGLang too.

Structured output goes as ``response_format`` json_schema (vLLM ≥ 0.12 ignores
the old ``guided_json`` keys). Thinking is switched off through
``chat_template_kwargs``. The openai client retries connection errors, 429 and
5xx with exponential backoff ``retries`` times within ``timeout`` each.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..errors import EngineError, EngineOffline, EngineTimeout, OutputError
from ..settings import Settings
from .base import Engine, SamplingParams, request_fields

DEFAULT_PARALLEL = 32


def normalize_base_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


class OpenAIHTTPEngine(Engine):
    kind: ClassVar[str] = "openai_http"

    def __init__(self, settings: Settings, cache: Any = None):
        import openai

        assert settings.engine_url
        self.settings = settings
        self.base_url = normalize_base_url(settings.engine_url)
        self.max_parallel = settings.max_parallel or DEFAULT_PARALLEL
        self._openai = openai
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=settings.api_key or "EMPTY",
            timeout=settings.timeout,
            max_retries=settings.retries,
        )
        self.model_id = settings.served_model or ""

    def _translate(self, e: Exception) -> EngineError:
        o = self._openai
        if isinstance(e, o.APITimeoutError):
            return EngineTimeout(f"engine timeout after {self.settings.timeout:g}s ({self.base_url})")
        if isinstance(e, o.APIConnectionError):
            return EngineOffline(f"engine offline ({self.base_url})")
        if isinstance(e, o.AuthenticationError):
            return EngineError(f"API key rejected by {self.base_url} — set XLADDIN_API_KEY")
        if isinstance(e, o.APIStatusError):
            return EngineError(f"engine error {e.status_code} ({self.base_url}): {str(e.message)[:200]}")
        return EngineError(f"engine error ({self.base_url}): {e}")

    async def start(self) -> None:
        if self.model_id:
            return
        try:
            models = await self._client.models.list()
        except self._openai.OpenAIError as e:
            raise self._translate(e) from None
        if not models.data:
            raise EngineError(f"{self.base_url} serves no model")
        self.model_id = models.data[0].id

    async def complete(self, messages: list[dict[str, str]], schema: dict[str, Any], params: SamplingParams) -> str:
        if not self.model_id:
            await self.start()
        try:
            resp = await self._client.chat.completions.create(
                model=self.model_id,
                temperature=params.temperature,
                seed=params.seed,
                max_tokens=params.max_tokens,
                extra_body={"chat_template_kwargs": {"enable_thinking": False}},
                **request_fields(messages, schema, self.settings.structured_output),  # type: ignore[arg-type]
            )
        except self._openai.OpenAIError as e:
            raise self._translate(e) from None
        choice = resp.choices[0]
        if choice.finish_reason == "length":
            raise OutputError(f"answer cut at max_tokens={params.max_tokens}")
        return choice.message.content or ""

    async def aclose(self) -> None:
        await self._client.close()

    def describe(self) -> str:
        return f"{self.model_id} at {self.base_url}"
