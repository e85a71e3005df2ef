"""Helpers for tests and benchmarks: a tiny random-weight Qwen3 GGUF model.

The model has two layers of width 64 and a byte-level vocabulary (256 byte
tokens, a few merges, the ChatML special tokens), so it loads in well under a
second and decodes hundreds of tokens per second on one core. Its text is
noise, but constrained decoding makes its output schema-valid, which is all the
pipeline needs to be exercised end to end through a real engine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .engine.base import Engine

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_MERGES = [("Ġ", "Ġ"), ('"', ":"), ("{", '"'), ('"', ","), ("Ċ", "Ġ")]


def _byte_tokens() -> list[str]:
    """GPT-2 byte-to-unicode table: one printable character per byte value."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def write_tiny_qwen_gguf(path: str | Path, *, seed: int = 0, n_ctx: int = 4096) -> Path:
    """Write a tiny random-weight Qwen3-architecture GGUF file to ``path``."""
    import gguf  # dev dependency: only tests and benchmarks need it

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    tokens = _byte_tokens() + [a + b for a, b in _MERGES] + _SPECIAL
    types = [gguf.TokenType.NORMAL] * (len(tokens) - len(_SPECIAL)) + [gguf.TokenType.CONTROL] * len(_SPECIAL)
    n_vocab = len(tokens)
    n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer = 64, 4, 2, 16, 128, 2

    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_name("xladdin-tiny-qwen3")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in _MERGES])
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)

    def t(name: str, *shape: int, scale: float = 0.02) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def ones(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    # Dimension 0 of every embedding is a large constant that survives the two
    # small layers; output rows with weight on it get a logit bonus. Favouring
    # the JSON punctuation and `null`/`false` keeps the constrained answers short
    # (strings close early, nullable figures are null), so tests run fast.
    embd = rng.standard_normal((n_vocab, n_embd)).astype(np.float32)
    embd[:, 0] = 8.0
    w.add_tensor("token_embd.weight", embd)
    ones("output_norm.weight", n_embd)
    out = (rng.standard_normal((n_vocab, n_embd)) * 0.5).astype(np.float32)
    out[:, 0] = 0.0
    byte = {ch: i for i, ch in enumerate(_byte_tokens())}
    for ch, bonus in {'"': 3.0, "}": 2.0, ",": 2.0, "n": 1.5, "u": 1.5, "l": 1.5, "f": 1.0, "a": 1.0,
                      "s": 1.0, "e": 1.0, "1": 1.0}.items():
        out[byte[ch], 0] = bonus
    w.add_tensor("output.weight", out)
    for i in range(n_layer):
        p = f"blk.{i}."
        ones(p + "attn_norm.weight", n_embd)
        t(p + "attn_q.weight", n_head * head_dim, n_embd)
        t(p + "attn_k.weight", n_head_kv * head_dim, n_embd)
        t(p + "attn_v.weight", n_head_kv * head_dim, n_embd)
        t(p + "attn_output.weight", n_embd, n_head * head_dim)
        ones(p + "attn_q_norm.weight", head_dim)
        ones(p + "attn_k_norm.weight", head_dim)
        ones(p + "ffn_norm.weight", n_embd)
        t(p + "ffn_gate.weight", n_ff, n_embd)
        t(p + "ffn_up.weight", n_ff, n_embd)
        t(p + "ffn_down.weight", n_embd, n_ff)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


class ScriptedEngine(Engine):
    """An injectable engine for unit tests of batching and caching logic (an ``Engine``, so a change
    of the protocol reaches it).

    ``respond(messages)`` returns the answer text (or raises); every call is
    recorded with the number of calls in flight at that moment. Integration
    tests use the real embedded engine instead.
    """

    kind = "scripted"
    reports_load = False
    server_url = None
    starter = False

    def __init__(self, respond, *, delay: float = 0.0, max_parallel: int = 4, model_id: str = "scripted-model"):
        self.respond = respond
        self.delay = delay
        self.max_parallel = max_parallel
        self.model_id = model_id
        self.calls: list[list[dict[str, str]]] = []
        self.in_flight = 0
        self.peak = 0
        self.closed = False

    async def complete(self, messages, schema, params) -> str:
        import asyncio

        self.calls.append(messages)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            return self.respond(messages)
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        self.closed = True

    def describe(self) -> str:
        return f"scripted {self.model_id}"


def screen_answer(reason: str = "业绩稳健", **figures) -> str:
    """A valid ``ScreenExtraction`` JSON text; figures as ``name=(value, unit)`` (quoted as
    written, ``"1505.6亿元"``) or ``name=(value, unit, quote)``; ``contradiction=`` the words the
    model cites as contradicting."""
    import json

    names = ("revenue", "net_profit", "revenue_growth", "net_profit_growth", "gross_margin", "net_margin", "roe", "eps")
    data: dict = {"reason": reason, "contradiction": figures.pop("contradiction", None)}  # the contradicting words
    for name in names:
        fig = figures.get(name)
        if fig is None:
            data[name] = None
        else:
            value = f"{fig[0]}{fig[1]}"
            data[name] = {"value": value, "quote": fig[2] if len(fig) > 2 else value}
    return json.dumps(data, ensure_ascii=False)


def misbehaving_read(path: str, max_bytes: int) -> tuple[str, str]:
    """A reader process's read (``readers.Reader(read=…)``) that hangs on a file whose name holds
    ``hang`` and ends its process on one that holds ``crash`` — what a malformed PDF can do to
    PDFium — and reads any other file as the product does."""
    import os
    import time

    from .reading.documents import read_file

    name = os.path.basename(path)
    if "hang" in name:
        with open(path + ".hanging", "w"):  # a mark beside the file: a test waits for it, not for a clock
            pass
        while True:
            time.sleep(3600)
    if "crash" in name:
        os._exit(139)
    return read_file(path, max_bytes)


def write_report_pdf(path, seed: int = 0):
    """A small annual-report PDF with a text layer (reportlab, a CID font for Chinese): its key-figure
    table as code reads it, the figures changed by ``seed`` so each file is another report."""
    revenue, profit = 52_310.50 + seed, 3_120.40 + seed
    lines = ["2023年年度报告", "七、近三年主要会计数据和财务指标", "(一) 主要会计数据", "单位：万元 币种：人民币",
             "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年",
             f"营业收入 {revenue:,.2f} 48,002.10 {(revenue / 48_002.10 - 1) * 100:.2f} 40,100.00",
             f"归属于上市公司股东的净利润 {profit:,.2f} 2,050.20 {(profit / 2_050.20 - 1) * 100:.2f} 2,300.00",
             "基本每股收益（元／股） 0.25 0.18 38.89 0.19", "加权平均净资产收益率（%） 8.10 6.32 增加1.78个百分点 5.95"]
    return write_pdf(path, [lines])


def write_pdf(path, pages: list[list[str]], *, encrypt: str | None = None):
    """A PDF with a text layer (reportlab, Chinese through a CID font), one list of lines per page."""
    from pathlib import Path

    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.pdfgen import canvas

    pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
    c = canvas.Canvas(str(path), encrypt=encrypt)
    for lines in pages:
        c.setFont("STSong-Light", 10)
        for i, line in enumerate(lines):
            c.drawString(40, 800 - 16 * i, line)
        c.showPage()
    c.save()
    return Path(path)
