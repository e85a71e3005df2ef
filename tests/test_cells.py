"""The cell service through real HTTPS on 127.0.0.1 (its own certificate, verified): batches, pending
calls settling over a long poll, a second client and a restarted service answered from memory and
the cache, bad arguments, calls too large, a down engine (and the call asked again once it is back),
the service stopped mid-way, the key (and where the add-ins' URLs carry it), the origin and the rate
bound, WPS's page at its folder URL; and the one function table every grid's declarations come from."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import shutil
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("cryptography")

from conftest import tiny_settings  # noqa: E402
from kit import Walk, free_port, overloaded_while, wait_until  # noqa: E402

from xladdin.cells import calls, certs, manifests, service  # noqa: E402
from xladdin.core.batcher import Batcher  # noqa: E402
from xladdin.settings import Settings  # noqa: E402
from xladdin.sheet import functions  # noqa: E402
from xladdin.sheet.functions import CellRuntime  # noqa: E402
from xladdin.testing import ScriptedEngine, screen_answer  # noqa: E402

OFFICE = Path(__file__).parent.parent / "office"
WIDTH = len(functions.SPILL_FIELDS)


def row(i: int, roe=10.0) -> list:
    return [600000 + i, f"公司{i}", "银行" if i % 2 else "白酒", 20.0 + i, roe, 1.0, f"营业收入{100 + i}亿元"]


class Client:
    """A client of the service over verified HTTPS (the service's own authority)."""

    def __init__(self, url: str, ca: Path, key: str | None = None):
        self.url = url.replace("127.0.0.1", "localhost")
        self.ca, self.key = ca, key
        self.context = ssl.create_default_context(cafile=str(ca))

    def send(self, path: str, body=None, *, raw: bytes | None = None, headers=None, method=None):
        data = raw if raw is not None else (json.dumps(body, ensure_ascii=False).encode() if body is not None else None)
        h = {"Content-Type": "application/json", **({"X-Xladdin-Key": self.key} if self.key else {}), **(headers or {})}
        req = urllib.request.Request(self.url + path, data=data, headers=h, method=method)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=60) as r:
                return r.status, json.loads(r.read() or b"null"), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null"), dict(e.headers)

    def calls(self, items):
        status, body, _ = self.send("/api/calls", {"calls": items})
        assert status == 200, body
        return body["results"]

    def settle_all(self, results, rounds: int = 50) -> dict[str, object]:
        """Every pending call's value, polled as the add-in polls."""
        ids = [r["id"] for r in results if r["state"] == "pending"]
        got: dict[str, object] = {}
        for _ in range(rounds):
            if not ids:
                return got
            status, body, _ = self.send("/api/settle", {"ids": ids, "wait": 20})
            assert status == 200, body
            got.update({k: v["value"] for k, v in body["results"].items()})
            ids = body["pending"]
        raise AssertionError(f"{len(ids)} calls never settled")


def start(runtime: CellRuntime, tmp_path: Path, **options):
    cert = certs.ensure(tmp_path / "cert")
    svc = service.CellService(runtime, port=free_port(), **options)
    running = service.Running(svc, service.tls(cert.cert, cert.key))
    return running, cert


@pytest.fixture
def scripted(tmp_path):
    """A service on a scripted engine (answers after 50 ms), and its client."""
    engine = ScriptedEngine(lambda m: screen_answer(), delay=0.05)
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, cert = start(runtime, tmp_path)
    yield running, Client(running.url, cert.ca), engine
    running.stop()
    runtime.close()


def test_a_settle_asked_as_a_stream_sends_each_value_as_it_settles_and_ends_when_all_have(tmp_path):
    """``stream``: the ids sent once, their values in JSON lines as they settle (one call held by the engine
    while the others' line is read), the last line ``end`` with none pending."""
    gate = threading.Event()

    class Held(ScriptedEngine):
        async def complete(self, messages, schema, params):
            while "公司7" in messages[-1]["content"] and not gate.is_set():  # held, the loop free for the others
                await asyncio.sleep(0.02)
            return await super().complete(messages, schema, params)

    engine = Held(lambda m: screen_answer(), delay=0.01)
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, cert = start(runtime, tmp_path)
    try:
        client = Client(running.url, cert.ca)
        first = client.calls([{"fn": "QWEN_SCREEN", "args": [[row(i)]]} for i in range(8)])
        ids = [r["id"] for r in first]
        req = urllib.request.Request(client.url + "/api/settle", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"ids": ids, "wait": 20, "stream": True}).encode())
        with urllib.request.urlopen(req, context=client.context, timeout=60) as r:
            assert r.headers["Content-Type"].startswith("application/x-ndjson")
            parts = [json.loads(r.readline())]
            while sum(len(p["results"]) for p in parts) < 7:
                parts.append(json.loads(r.readline()))
            assert ids[7] not in [cid for p in parts for cid in p["results"]] and not gate.is_set()
            gate.set()  # the held call answers: its line, and the end
            parts += [json.loads(line) for line in r.read().decode().splitlines()]
        assert parts[-1]["end"] is True and parts[-1]["pending"] == [] and not parts[-1]["stopping"]
        assert not any("end" in p for p in parts[:-1])
        got = [cid for p in parts for cid in p["results"]]
        assert sorted(got) == sorted(ids)  # each value once
        assert all(v["state"] == "done" and len(v["value"][0]) == WIDTH for p in parts for v in p["results"].values())
    finally:
        gate.set()
        running.stop()
        runtime.close()


def test_a_settled_call_leaves_no_cycle_for_the_garbage_collector(scripted):
    """A call's fates let go of their callbacks once run (``cache.Fate``): what a request made (its
    futures, closures, the engine's task) is freed by reference counting when it settles. Kept, they made
    ~90 objects a request that only the cyclic collector freed, its collections a tenth of the service's
    time in a 5,400-cell recalculation."""
    import gc

    running, client, engine = scripted
    client.settle_all(client.calls([{"fn": "QWEN_SCREEN", "args": [[row(1000)]]}]))  # the engine started
    gc.collect()
    gc.disable()
    try:
        values = client.settle_all(client.calls([{"fn": "QWEN_SCREEN", "args": [[row(i)]]} for i in range(100)]))
        assert len(values) == 100 and len(engine.calls) == 101
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert unreachable < 2000, f"{unreachable} objects in cycles after 100 calls"


def test_a_batch_is_answered_pending_settles_over_a_poll_and_then_comes_from_memory(scripted):
    running, client, engine = scripted
    batch = [{"fn": "QWEN_SCREEN", "args": [[row(i)]]} for i in range(30)]
    batch += batch[:5]  # the same calls again in the same batch: one call each
    first = client.calls(batch)
    assert [r["state"] for r in first] == ["pending"] * 35
    assert len({r["id"] for r in first}) == 30
    values = client.settle_all(first)
    assert len(values) == 30 and len(engine.calls) == 30
    for v in values.values():
        assert len(v) == 1 and len(v[0]) == WIDTH and v[0][0].startswith("6000") and v[0][2] in ("低", "中", "高")
    again = client.calls(batch)  # a recalculation: every call from memory, no engine request
    assert [r["state"] for r in again] == ["done"] * 35 and len(engine.calls) == 30
    assert again[0]["value"] == values[first[0]["id"]]
    other = Client(running.url, client.ca)  # a second client: the same calls from memory
    assert [r["state"] for r in other.calls(batch[:10])] == ["done"] * 10 and len(engine.calls) == 30


def test_a_restarted_service_answers_from_the_disk_cache(tmp_path):
    engine = ScriptedEngine(lambda m: screen_answer())
    settings = tiny_settings(tmp_path)
    batch = [{"fn": "QWEN_SCREEN", "args": [[row(i)]]} for i in range(8)]
    for _ in range(2):
        runtime = CellRuntime(batcher=Batcher.from_settings(settings, engine, own_engine=False))
        running, cert = start(runtime, tmp_path)
        client = Client(running.url, cert.ca)
        results = client.calls(batch)
        # the second time a new runtime (as a new process): pending only until its engine says which
        # model it serves (the cache key), then every answer from the disk cache
        done = [r for r in results if r["state"] == "done"]
        assert len(client.settle_all(results)) + len(done) == 8
        assert [r["state"] for r in client.calls(batch)] == ["done"] * 8
        running.stop()
        runtime.close()
    assert len(engine.calls) == 8


def test_a_table_with_its_header_spills_and_every_function_answers_through_the_tiny_model(tiny_engine, tmp_path):
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), tiny_engine, own_engine=False))
    running, cert = start(runtime, tmp_path)
    try:
        client = Client(running.url, cert.ca)
        header = ["代码", "名称", "行业", "市盈率TTM", "ROE", "每股收益", "财报摘要"]
        batch = [{"fn": "QWEN_SCREEN", "args": [[header, row(1), row(2)], True]},
                 {"fn": "QWEN", "args": ["用一句话说明市盈率", [["市盈率", 20]]]},
                 {"fn": "QWEN_EXTRACT", "args": ["营业收入100亿元，同比增长5%", "营业收入"]},
                 {"fn": "QWEN_CLASSIFY", "args": ["白酒龙头", "白酒,银行"]},
                 {"fn": "QWEN_HIGHLIGHTS", "args": ["营业收入100亿元，同比增长5%。净利润20亿元。", 2]},
                 {"fn": "QWEN_STATUS", "args": []}]
        first = client.calls(batch)
        assert first[5]["state"] == "done" and len(first[5]["value"]) == 13
        settled = client.settle_all(first)
        values = [settled.get(r.get("id"), r.get("value")) for r in first]
        assert values[0][0] == functions.spill_header() and [len(r) for r in values[0]] == [WIDTH] * 3
        assert functions.PENDING not in json.dumps(values, ensure_ascii=False)  # every value final
        assert isinstance(values[2], float) or str(values[2]).startswith("#QWEN!")
        assert values[3] in ("白酒", "银行") or str(values[3]).startswith("#QWEN!")
        status, body, _ = client.send("/api/status", method="GET")
        assert status == 200 and dict(map(tuple, body["status"]))["pending cells"] == 0
    finally:
        running.stop()
        runtime.close()


def test_bad_calls_are_error_values_and_bad_requests_clear_errors(scripted, tmp_path):
    running, client, engine = scripted
    results = client.calls([{"fn": "NOPE", "args": []}, {"fn": "QWEN_SCREEN", "args": "x"},
                            {"fn": "QWEN_CLASSIFY", "args": ["text"]},
                            {"fn": "QWEN_SCREEN", "args": [[row(1, roe="abc")]]},
                            {"fn": "QWEN", "args": [1, 2, 3]}, "not a call"])
    assert [r["state"] for r in results] == ["error"] * 6
    assert "no function 'NOPE'" in results[0]["value"] and "args must be a list" in results[1]["value"]
    assert "labels is missing" in results[2]["value"]
    assert results[3]["value"][0][0].startswith("#QWEN!") and "roe is not a number" in results[3]["value"][0][0]
    assert len(results[3]["value"][0]) == WIDTH  # the spill keeps its shape
    assert "at most 2 arguments" in results[4]["value"]
    status, body, _ = client.send("/api/calls", raw=b"{not json")
    assert status == 400 and "not JSON" in body["error"]
    assert client.send("/api/calls", {"calls": 3})[0] == 400
    assert client.send("/api/settle", {"ids": "x"})[0] == 400
    assert engine.calls == []


def test_a_request_too_large_or_with_too_many_calls_is_refused_with_its_limit(tmp_path):
    engine = ScriptedEngine(lambda m: screen_answer())
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, cert = start(runtime, tmp_path, max_request_bytes=64 << 10, max_calls=10)
    try:
        client = Client(running.url, cert.ca)
        big = [{"fn": "QWEN", "args": ["x" * (100 << 10)]}]
        status, body, _ = client.send("/api/calls", {"calls": big})
        assert status == 413 and "request too large" in body["error"]
        status, body, _ = client.send("/api/calls", {"calls": [{"fn": "QWEN_STATUS"}] * 11})
        assert status == 413 and "at most 10" in body["error"]
        assert client.calls([{"fn": "QWEN_STATUS", "args": []}])[0]["state"] == "done"  # still serving
    finally:
        running.stop()
        runtime.close()


def test_a_down_engine_is_an_error_value_never_a_hang(tmp_path):
    settings = Settings.load({"cache_dir": tmp_path / "cache", "engine_url": f"http://127.0.0.1:{free_port()}/v1",
                              "timeout": 5}, env={})
    runtime = CellRuntime(settings)
    running, cert = start(runtime, tmp_path)
    try:
        client = Client(running.url, cert.ca)
        results = client.calls([{"fn": "QWEN_SCREEN", "args": [[row(i)]]} for i in range(3)])
        values = [client.settle_all([r]).popitem()[1] if r["state"] == "pending" else r["value"] for r in results]
        for v in values:
            assert v[0][0].startswith("#QWEN!") and len(v[0]) == WIDTH
        again = client.calls([{"fn": "QWEN_SCREEN", "args": [[row(0)]]}])  # within the error TTL: at once
        assert again[0]["state"] == "error"
    finally:
        running.stop()
        runtime.close(abort=True)


def test_a_call_pending_again_after_its_error_s_time_waits_for_its_new_outcome(tmp_path):
    """The engine down, then up again after the error's time: the recalculation's call is pending and
    the next poll waits for its verdict, never answering the old error (issue 45)."""
    fail = threading.Event()
    fail.set()
    engine = ScriptedEngine(overloaded_while(fail), delay=0.05)
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path, retries=0), engine, own_engine=True))
    running, cert = start(runtime, tmp_path)
    try:
        client = Client(running.url, cert.ca)
        call = [{"fn": "QWEN_SCREEN", "args": [[row(1)]]}]
        first = client.calls(call)
        assert first[0]["state"] == "pending"
        error = client.settle_all(first)[first[0]["id"]]
        assert error[0][0].startswith("#QWEN! engine error 503")
        assert client.calls(call)[0] == {"state": "error", "value": error}  # within the error's time
        fail.clear()  # the engine is back
        runtime.error_ttl = 0  # and the error's 30 s are over: the next call asks again
        again = client.calls(call)
        assert again[0] == {"state": "pending", "id": first[0]["id"]}
        status, body, _ = client.send("/api/settle", {"ids": [again[0]["id"]], "wait": 20})
        assert status == 200 and body["pending"] == []
        verdict = body["results"][again[0]["id"]]
        assert verdict["state"] == "done" and verdict["value"][0][0] == "600001.SH", verdict
        assert client.calls(call)[0] == verdict and len(engine.calls) == 2  # then from memory
    finally:
        running.stop()
        runtime.close()


def test_a_failed_answer_is_the_call_s_error_once_even_for_a_call_whose_input_holds_a_range(tmp_path):
    """A call whose answer fails (here: never the schema) gets its error; the recalculation the runtime
    makes when it fails finds that error, for every function and for arguments that are ranges (a
    context range, labels from cells). A request whose input held a range once had no fate: each
    recalculation asked the engine again, in a loop that never settled."""
    engine = ScriptedEngine(lambda messages: '{"nothing": 1}', delay=0.01)
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path, retries=0), engine, own_engine=True))
    running, cert = start(runtime, tmp_path)
    try:
        client = Client(running.url, cert.ca)
        batch = [{"fn": "QWEN", "args": ["一句话说明", [["甲", "乙"], ["丙", None]]]},
                 {"fn": "QWEN_CLASSIFY", "args": ["业绩大增", [["好", "坏"]]]},
                 {"fn": "QWEN_EXTRACT", "args": ["营业收入10亿元", "营业收入"]},
                 {"fn": "QWEN_SCREEN", "args": [[row(1)]]}]
        first = client.calls(batch)
        assert [r["state"] for r in first] == ["pending"] * 4
        settled = client.settle_all(first)
        values = [settled[r["id"]] for r in first]
        assert all(v.startswith("#QWEN! model answer does not match the schema") for v in values[:3]), values
        assert values[3][0][:3] == ["600001.SH", "公司1", "中"] and values[3][0][5] == "模型未作答"  # code's verdict
        time.sleep(0.5)  # a loop would go on asking meanwhile
        assert len(engine.calls) == 8  # each request once, with its one re-ask for an answer off the schema
        again = client.calls(batch)  # a recalculation: each call's outcome from memory
        assert [r["state"] for r in again] == ["error", "error", "error", "done"]
        assert [r["value"] for r in again] == values and len(engine.calls) == 8
    finally:
        running.stop()
        runtime.close()


def test_the_service_stopped_mid_way_answers_its_held_polls(tmp_path):
    gate = threading.Event()

    def respond(messages):
        gate.wait(30)
        return screen_answer()

    engine = ScriptedEngine(respond)
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, cert = start(runtime, tmp_path)
    client = Client(running.url, cert.ca)
    results = client.calls([{"fn": "QWEN_SCREEN", "args": [[row(1)]]}])
    assert results[0]["state"] == "pending"
    answer: dict = {}

    def poll():
        try:
            answer["reply"] = client.send("/api/settle", {"ids": [results[0]["id"]], "wait": 25})
        except Exception as e:  # the connection closed under it: the add-in shows an error
            answer["error"] = e

    t = threading.Thread(target=poll)
    t.start()
    while not running.service.counts["polls"]:
        threading.Event().wait(0.02)
    running.stop()
    t.join(20)
    assert not t.is_alive()
    assert "error" in answer or answer["reply"][1]["stopping"] is True
    gate.set()
    runtime.close(abort=True)


def test_the_key_the_origin_and_the_rate_are_enforced(tmp_path):
    engine = ScriptedEngine(lambda m: screen_answer())
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    with pytest.raises(Exception, match="needs a key"):
        service.CellService(runtime, host="0.0.0.0")
    running, cert = start(runtime, tmp_path, key="s3cret", rate=1.0, burst=4)
    try:
        plain = Client(running.url, cert.ca)
        keyed = Client(running.url, cert.ca, key="s3cret")
        status, body, _ = plain.send("/api/calls", {"calls": []})
        assert status == 401 and "X-Xladdin-Key" in body["error"]
        own = f"https://localhost:{running.service.port}"
        status, _, headers = keyed.send("/api/calls", {"calls": []}, headers={"Origin": own})
        assert status == 200 and headers["Access-Control-Allow-Origin"] == own
        status, body, _ = keyed.send("/api/calls", {"calls": []}, headers={"Origin": "https://evil.example"})
        assert status == 403 and "not the add-in's" in body["error"]
        codes = [keyed.send("/api/calls", {"calls": []})[0] for _ in range(4)]
        assert 429 in codes
        status, body, headers = keyed.send("/api/calls", {"calls": []})
        assert status == 429 and int(headers["Retry-After"]) >= 1 and "a second" in body["error"]
        assert plain.send("/addin/functions.json", method="GET")[0] == 200  # the add-in's files need no key
    finally:
        running.stop()
        runtime.close()


def test_without_the_key_a_request_costs_nothing_and_the_rate_is_the_key_s(tmp_path):
    """The key is checked before the rate bucket: a local process without it is refused (401) however
    often it asks, and the add-in with it still gets through (issue 45)."""
    engine = ScriptedEngine(lambda m: screen_answer())
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, cert = start(runtime, tmp_path, key="s3cret", rate=0.5, burst=3)
    try:
        stranger = Client(running.url, cert.ca, key="wrong")
        assert {stranger.send("/api/calls", {"calls": []})[0] for _ in range(20)} == {401}
        keyed = Client(running.url, cert.ca, key="s3cret")
        assert [keyed.send("/api/calls", {"calls": []})[0] for _ in range(3)] == [200] * 3
        assert keyed.send("/api/calls", {"calls": []})[0] == 429  # the key's own bucket, now spent
    finally:
        running.stop()
        runtime.close()


def test_json_the_service_cannot_take_is_a_400_naming_why(scripted):
    running, client, engine = scripted
    deep = b'{"calls": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    status, body, _ = client.send("/api/calls", raw=deep)
    assert status == 400 and "nested too deep" in body["error"]
    nested = {"calls": [{"fn": "QWEN", "args": [[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]}]}
    status, body, _ = client.send("/api/calls", nested)
    assert status == 400 and "at most 16 levels" in body["error"]
    status, body, _ = client.send("/api/calls", raw=b'{"calls": [{"fn": "QWEN", "args": [NaN]}]}')
    assert status == 400 and "NaN is no JSON number" in body["error"]
    status, body, _ = client.send("/api/settle", raw=b'{"ids": [], "wait": Infinity}')
    assert status == 400 and "Infinity" in body["error"]
    assert client.calls([{"fn": "QWEN_STATUS", "args": []}])[0]["state"] == "done"  # still serving
    assert engine.calls == []


def _tls_socket(url: str, ca: Path):
    import socket

    port = int(url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(ca))
    sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30), server_hostname="localhost")
    return sock


def _closed_within(sock, seconds: float) -> bool:
    """Whether the service closes ``sock`` within ``seconds`` (reads until the end of the stream)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except (TimeoutError, ssl.SSLError, OSError) as e:
        return not isinstance(e, TimeoutError)


def test_a_connection_sending_its_headers_a_byte_at_a_time_is_closed_and_others_are_served(tmp_path):
    """A slow client (its request's headers never finished) is closed after the idle timeout; an idle
    connection likewise; while they hang on, requests are served (issue 45)."""
    engine = ScriptedEngine(lambda m: screen_answer())
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, cert = start(runtime, tmp_path, idle_timeout=1.0)
    try:
        slow, idle = _tls_socket(running.url, cert.ca), _tls_socket(running.url, cert.ca)
        slow.sendall(b"POST /api/calls HTTP/1.1\r\nHost: localhost\r\n")
        closed = False
        for byte in b"X-Slow: 1" * 4:  # a byte every 0.25 s: 9 s in all, the timeout is 1 s
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            if _closed_within(slow, 0.25):
                closed = True
                break
        assert closed, "a connection sending its headers a byte at a time stayed open"
        assert _closed_within(idle, 10)
        assert Client(running.url, cert.ca).calls([{"fn": "QWEN_STATUS", "args": []}])[0]["state"] == "done"
    finally:
        running.stop()
        runtime.close()


def test_open_connections_are_bounded_and_a_new_one_closes_the_oldest_idle(tmp_path):
    """At the bound (here 4), the add-in's request still gets through: it closes the oldest connection
    that is not in a request; the service never holds more than the bound (issue 45)."""
    engine = ScriptedEngine(lambda m: screen_answer())
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, cert = start(runtime, tmp_path, max_connections=4, idle_timeout=60)
    try:
        idle = [_tls_socket(running.url, cert.ca) for _ in range(4)]
        server = running.site._runner.server

        def open_connections() -> int:
            return sum(h.transport is not None for h in server.connections)

        deadline = time.monotonic() + 10
        while open_connections() < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert open_connections() == 4
        for _ in range(3):
            status, body, _ = Client(running.url, cert.ca).send("/api/calls", {"calls": [{"fn": "QWEN_STATUS"}]})
            assert status == 200 and body["results"][0]["state"] == "done"
            assert open_connections() <= 4
        assert _closed_within(idle[0], 10)  # the oldest idle one made room
    finally:
        running.stop()
        runtime.close()


def test_a_relative_report_path_is_taken_from_report_dirs(tmp_path):
    """The service has no workbook folder: a relative report path is found in ``report_dirs`` (the first
    that holds it), as documented; one that none holds is an error naming the file (issue 45)."""
    reports = tmp_path / "reports"
    (reports / "2023").mkdir(parents=True)
    (reports / "2023" / "600001_年报.txt").write_text("营业收入123.45亿元，同比增长10%。", encoding="utf-8")
    engine = ScriptedEngine(lambda m: screen_answer(), delay=0.05)
    settings = tiny_settings(tmp_path, report_dirs=[tmp_path / "elsewhere", reports])
    runtime = CellRuntime(settings, batcher=Batcher.from_settings(settings, engine, own_engine=True))
    running, cert = start(runtime, tmp_path)
    try:
        client = Client(running.url, cert.ca)
        found = [600001, "公司1", "银行", 21.0, 10.0, 1.0, "2023/600001_年报.txt"]
        missing = [600002, "公司2", "银行", 21.0, 10.0, 1.0, "2023/600002_年报.txt"]
        results = client.calls([{"fn": "QWEN_SCREEN", "args": [[found]]}, {"fn": "QWEN_SCREEN", "args": [[missing]]}])
        assert results[1]["state"] == "error" and "600002_年报.txt: file not found" in results[1]["value"][0][0]
        value = results[0]["value"] if results[0]["state"] != "pending" else client.settle_all(results[:1]).popitem()[1]
        assert value[0][0] == "600001.SH" and not str(value[0][0]).startswith("#QWEN!")
        assert any("营业收入123.45亿元" in m["content"] for m in engine.calls[0])  # the file's text was read
    finally:
        running.stop()
        runtime.close()


def test_a_post_past_its_budget_answers_pending_at_once_and_a_changed_report_file_is_asked_again(tmp_path):
    """With no time to run its calls (``answer_budget=0``), a POST answers every new call pending and
    they are run off the request and settle; the recalculation answers from memory, except a call
    naming a report file, which follows its file: changed, it is asked again (issue 45)."""
    reports = tmp_path / "reports"
    reports.mkdir()
    report = reports / "600001_年报.txt"
    report.write_text("营业收入123.45亿元。", encoding="utf-8")
    engine = ScriptedEngine(lambda m: screen_answer(), delay=0.02)
    settings = tiny_settings(tmp_path, report_dirs=[reports])
    runtime = CellRuntime(settings, batcher=Batcher.from_settings(settings, engine, own_engine=True))
    running, cert = start(runtime, tmp_path, answer_budget=0)
    try:
        client = Client(running.url, cert.ca)
        batch = [{"fn": "QWEN_SCREEN", "args": [[row(i)]]} for i in range(40)]
        batch.append({"fn": "QWEN_SCREEN", "args": [[[600001, "公司1", "银行", 21.0, 10.0, 1.0, "600001_年报.txt"]]]})
        first = client.calls(batch)
        assert [r["state"] for r in first] == ["pending"] * 41
        values = client.settle_all(first)
        assert len(values) == 41 and len(engine.calls) == 41
        assert all(not str(v[0][0]).startswith("#QWEN") for v in values.values())
        again = client.calls(batch)
        assert [r["state"] for r in again[:40]] == ["done"] * 40 and len(engine.calls) == 41
        assert running.service.counts["memory"] == 40  # answered without running them
        report.write_text("营业收入99.99亿元。", encoding="utf-8")  # the file changes: its call is asked again
        os.utime(report, (time.time() + 5, time.time() + 5))
        changed = client.calls(batch[-1:])
        value = changed[0]["value"] if changed[0]["state"] == "done" else client.settle_all(changed).popitem()[1]
        assert value[0][0] == "600001.SH" and len(engine.calls) == 42
        assert "99.99" in engine.calls[-1][-1]["content"]
    finally:
        running.stop()
        runtime.close()


def test_calls_left_for_later_send_their_cache_reads_together_not_one_call_s_at_a_time(tmp_path, monkeypatch):
    """A reopened workbook's recalculation on a restarted service: the calls a POST leaves for later
    (``answer_budget=0``) are all made at once, each cell waiting in the fate table, while the first
    cache read is still held on the disk thread (no call waits for its read before the next is made, even
    with a read bound of a minute); released, every value comes from the cache, none from the engine."""
    from xladdin.core.cache import Cache

    engine = ScriptedEngine(lambda m: screen_answer())
    settings = tiny_settings(tmp_path)
    batch = [{"fn": "QWEN_SCREEN", "args": [[row(i)]]} for i in range(12)]
    first = CellRuntime(batcher=Batcher.from_settings(settings, engine, own_engine=False))
    running, cert = start(first, tmp_path)
    client = Client(running.url, cert.ca)
    client.settle_all(client.calls(batch))
    running.stop()
    first.close()
    assert len(engine.calls) == 12

    monkeypatch.setattr(functions, "READ_WAIT_S", 60.0)
    held, release = threading.Event(), threading.Event()
    real_get = Cache.get

    def get(self, key):  # the first read of the restarted service is held until released
        if not held.is_set():
            held.set()
            release.wait(60)
        return real_get(self, key)

    monkeypatch.setattr(Cache, "get", get)
    runtime = CellRuntime(batcher=Batcher.from_settings(settings, engine, own_engine=False))
    runtime.batcher.start()  # the engine named its model (by the workbook's first cells)
    running, cert = start(runtime, tmp_path, answer_budget=0)
    try:
        client = Client(running.url, cert.ca)
        results = client.calls(batch)
        assert [r["state"] for r in results] == ["pending"] * 12
        wait_until(lambda: runtime.pending_cells == 12, 30,
                   message=lambda: f"{runtime.pending_cells} of 12 calls made while the first read is held")
        assert held.wait(30)  # the first read is held meanwhile
        release.set()
        values = client.settle_all(results)
        assert len(values) == 12 and all(v[0][0].startswith("6000") for v in values.values())
        assert len(engine.calls) == 12  # every answer from the cache
    finally:
        release.set()
        running.stop()
        runtime.close()


def test_while_the_model_loads_a_post_answers_pending_and_its_calls_are_asked_once_it_has(tmp_path):
    """An engine still starting (a model loading) when the first recalculation's POST arrives: the POST
    does not wait for it (every call but the status answers pending), and once the engine has started
    the calls are asked and settle over the poll. A POST of the status alone starts nothing."""
    loaded, begun = threading.Event(), threading.Event()

    class Loading(ScriptedEngine):
        async def start(self):
            import asyncio

            begun.set()
            await asyncio.to_thread(loaded.wait, 60)
            return self.started()

    engine = Loading(lambda m: screen_answer())
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, cert = start(runtime, tmp_path)
    try:
        client = Client(running.url, cert.ca)
        assert [r["state"] for r in client.calls([{"fn": "QWEN_STATUS", "args": []}])] == ["done"]
        assert not begun.is_set()  # the status alone starts no engine
        batch = [{"fn": "QWEN_SCREEN", "args": [[row(i)]]} for i in range(6)] + [{"fn": "QWEN_STATUS", "args": []}]
        results = client.calls(batch)
        assert [r["state"] for r in results] == ["pending"] * 6 + ["done"]
        assert engine.calls == []
        loaded.set()
        values = client.settle_all(results)
        assert len(values) == 6 and all(v[0][0].startswith("6000") for v in values.values())
        assert len(engine.calls) == 6
    finally:
        loaded.set()
        running.stop()
        runtime.close()


def test_wps_loads_the_add_in_from_its_folder_url(scripted):
    """WPS opens an online add-in at its folder URL: ``/addin/wps/`` is its page, which loads ``main.js``
    (and that ``../functions.js``); without the slash it is sent to the folder (issue 45)."""
    running, client, _ = scripted
    for path in ("/addin/wps/", "/addin/wps"):
        with urllib.request.urlopen(client.url + path, context=client.context, timeout=30) as r:
            assert r.status == 200 and r.url == client.url + "/addin/wps/"
            assert r.headers["Content-Type"].startswith("text/html")
            page = r.read().decode()
        assert re.search(r'<script src="main.js"></script>', page), page
    assert (service.STATIC / "wps" / "index.html").read_text(encoding="utf-8") == page
    main_js = (service.STATIC / "wps" / "main.js").read_text(encoding="utf-8")
    assert '"../functions.js"' in main_js  # main.js loads the shared client from the folder above


# -- the one function table ------------------------------------------------------------------------

def test_every_grid_declares_the_functions_of_the_one_table(monkeypatch):
    import dataclasses

    from xladdin.calc import build
    from xladdin.excel import udfs

    # every Excel UDF calls through the one table: a body put in the table is what the UDF runs, with its
    # arguments in the table's order
    assert functions.BY_NAME == {f.name: f for f in functions.FUNCTIONS}
    for f in functions.FUNCTIONS:
        monkeypatch.setitem(functions.BY_NAME, f.name,
                            dataclasses.replace(f, body=lambda rt, a, caller, folder, n=f.name: [n, *a]))
        given = [f"{p.name}!" for p in f.params]
        assert getattr(udfs, f.name)(*given) == [f.name, *given], f.name
    udfs.set_runtime(None)

    for f in functions.FUNCTIONS:  # Excel: the UDFs' arguments, their defaults and xlwings' conversions
        sig = inspect.signature(getattr(udfs, f.name))
        names = [n for n in sig.parameters if n != "caller"]
        assert names == [p.name for p in f.params], f.name
        for p in f.params:
            default = sig.parameters[p.name].default
            assert (default is not inspect.Parameter.empty) == p.optional, (f.name, p.name)
            if p.optional:
                assert default == p.default, (f.name, p.name)
            ndim = udfs.ARG_OPTIONS.get(f.name, {}).get(p.name, {}).get("ndim")
            assert ndim == {"range": 2, "list": 1, "value": None}[p.shape], (f.name, p.name)
        # Calc: the interface and the names and help Calc shows
        assert f"any {f.method}(" in build.idl() and f"<value xml:lang=\"en\">{f.name}</value>" in build.xcu()
    assert build.FUNCTIONS is functions.FUNCTIONS
    meta = functions.metadata()["functions"]  # Office's functions.json (WPS reads the same)
    assert [m["id"] for m in meta] == [f.name for f in functions.FUNCTIONS]
    for m, f in zip(meta, functions.FUNCTIONS, strict=True):
        assert [p["name"] for p in m["parameters"]] == [p.name for p in f.params]
        assert m["result"]["dimensionality"] == ("matrix" if f.spill else "scalar")
    js = (service.STATIC / "functions.js").read_text(encoding="utf-8")
    names = json.loads(re.search(r"var NAMES = (\[[^\]]*\]);", js).group(1))
    assert names == [f.name for f in functions.FUNCTIONS]
    spill = set(re.findall(r"(\w+): true", re.search(r"var SPILL = \{([^}]*)\}", js).group(1)))
    assert spill == {f.name for f in functions.FUNCTIONS if f.spill}
    arity = dict(re.findall(r"(\w+): (\d+)", re.search(r"var ARITY = \{([^}]*)\}", js).group(1)))
    assert {k: int(v) for k, v in arity.items()} == {m["id"]: len(m["parameters"]) for m in meta}
    pending = json.loads(re.search(r'var PENDING = ("[^"]*");', js).group(1))
    assert pending == functions.PENDING
    from xladdin.calc import headless  # LibreOffice's script, run outside xladdin: its own copy

    assert headless.PENDING == functions.PENDING


def test_office_and_wps_files_are_written_by_the_commands(tmp_path):
    from xladdin.cli.main import main

    out = tmp_path / "manifest.xml"
    assert main(["cells", "office", "-o", str(out), "--url", "https://localhost:9443"]) == 0
    text = out.read_text(encoding="utf-8")
    import xml.etree.ElementTree as ET

    root = ET.fromstring(text)
    ns = {"o": "http://schemas.microsoft.com/office/appforoffice/1.1"}
    assert root.find("o:Id", ns).text == manifests.ADDIN_ID
    assert "https://localhost:9443/addin/functions.json" in text and 'DefaultValue="XLADDIN"' in text
    plugins = tmp_path / "wps" / "jsplugins.xml"
    plugins.parent.mkdir()
    plugins.write_text('<jsplugins>\n  <jspluginonline name="other" type="et" url="https://x/"/>\n</jsplugins>\n')
    for _ in range(2):  # written twice: one entry of ours, the other add-in kept
        assert main(["cells", "wps", "--jsplugins", str(plugins), "--url", "https://localhost:9443"]) == 0
    entries = ET.fromstring(plugins.read_text()).findall("jspluginonline")
    assert [e.get("name") for e in entries] == ["xladdin", "other"]
    assert entries[0].get("url") == "https://localhost:9443/addin/wps/" and entries[0].get("type") == "et"
    wps = ET.fromstring(manifests.wps_manifest())
    assert wps.find("Functions/Namespace").text == functions.NAMESPACE


def test_with_a_key_wps_s_entry_and_office_s_page_carry_it_in_their_fragment_only(tmp_path, monkeypatch):
    """WPS gets the key as Office does: in its page URL's fragment (read by the page's script, never sent
    to a server); no URL carries it in a query, and the manifest's SupportUrl (shown to users) not at all."""
    import xml.etree.ElementTree as ET

    from xladdin.cli.main import main

    monkeypatch.setenv("XLADDIN_CELLS_KEY", "s3cret&x")
    plugins = tmp_path / "jsplugins.xml"
    assert main(["cells", "wps", "--jsplugins", str(plugins), "--url", "https://localhost:9443"]) == 0
    assert main(["cells", "wps", "--jsplugins", str(plugins), "--url", "https://localhost:9443"]) == 0
    entries = ET.fromstring(plugins.read_text(encoding="utf-8")).findall("jspluginonline")
    assert [e.get("url") for e in entries] == ["https://localhost:9443/addin/wps/#key=s3cret%26x"]
    out = tmp_path / "manifest.xml"
    assert main(["cells", "office", "-o", str(out), "--url", "https://localhost:9443"]) == 0
    root = ET.fromstring(out.read_text(encoding="utf-8"))
    ns = {"o": "http://schemas.microsoft.com/office/appforoffice/1.1",
          "bt": "http://schemas.microsoft.com/office/officeappbasictypes/1.0"}
    page = "https://localhost:9443/addin/taskpane.html"
    assert root.find("o:SupportUrl", ns).get("DefaultValue") == page
    assert root.find("o:DefaultSettings/o:SourceLocation", ns).get("DefaultValue") == page + "#key=s3cret%26x"
    urls = {u.get("id"): u.get("DefaultValue") for u in root.iter(f"{{{ns['bt']}}}Url")}
    assert urls["Taskpane.Url"] == page + "#key=s3cret%26x"
    learn_more = next(root.iter("{http://schemas.microsoft.com/office/taskpaneappversionoverrides}LearnMoreUrl"))
    assert urls[learn_more.get("resid")] == page  # the Get Started callout's link, shown to users too
    for url in [e.get("url") for e in entries] + list(urls.values()):
        assert "?" not in url
    monkeypatch.delenv("XLADDIN_CELLS_KEY")
    assert main(["cells", "wps", "--jsplugins", str(plugins), "--url", "https://localhost:9443"]) == 0
    assert ET.fromstring(plugins.read_text()).find("jspluginonline").get("url") == "https://localhost:9443/addin/wps/"


@pytest.mark.skipif(shutil.which("node") is None or not (OFFICE / "node_modules" / "office-addin-manifest").is_dir(),
                    reason="office-addin-manifest is not installed (cd office && npm install)")
def test_microsoft_s_manifest_tool_reads_the_manifest(tmp_path):
    """``office-addin-manifest info`` parses the manifest offline (its ``validate`` asks Microsoft's
    online service, which cannot be reached here)."""
    out = tmp_path / "manifest.xml"
    out.write_text(manifests.office("https://localhost:8443"), encoding="utf-8")
    tool = OFFICE / "node_modules" / ".bin" / "office-addin-manifest"
    r = subprocess.run([str(tool), "info", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert manifests.ADDIN_ID in r.stdout and "xladdin" in r.stdout
    assert "https://localhost:8443/addin/taskpane.html" in r.stdout


def _leaf_for(folder: Path, host: str, tmp_path: Path) -> tuple[Path, Path]:
    """A server certificate for ``host`` signed with the authority's key, as whoever read ``ca-key.pem``
    could make one."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca = x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((folder / "ca-key.pem").read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert, key_path = tmp_path / f"{host}.pem", tmp_path / f"{host}-key.pem"
    cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert, key_path


def _handshake(cert: Path, key: Path, ca: Path, host: str) -> None:
    """A TLS handshake on 127.0.0.1 with a server presenting ``cert``, verified as a browser would for ``host``."""
    import socket

    server_context = service.tls(cert, key)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server_context.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        client = ssl.create_default_context(cafile=str(ca))
        try:
            with client.wrap_socket(socket.create_connection(listener.getsockname(), timeout=30), server_hostname=host):
                pass
        finally:
            thread.join(10)


def test_the_authority_vouches_for_this_machine_s_names_only_and_lives_a_year(tmp_path):
    """Whoever reads ``ca-key.pem`` cannot make a certificate a browser trusting the authority accepts for
    another site (name constraints); the authority lives about a year; one made without the
    constraints is made again (issue 45)."""
    from cryptography import x509

    folder = tmp_path / "cert"
    made = certs.ensure(folder)
    ca = x509.load_pem_x509_certificate(made.ca.read_bytes())
    constraints = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert (ca.not_valid_after_utc - ca.not_valid_before_utc).days <= 400
    _handshake(made.cert, made.key, made.ca, "localhost")  # the service's own certificate is accepted
    forged = _leaf_for(folder, "bank.example", tmp_path)
    with pytest.raises(ssl.SSLCertVerificationError, match="(?i)name constraint|permitted"):
        _handshake(*forged, made.ca, "bank.example")
    old_ca = made.ca.read_bytes()
    assert certs.ensure(folder) and made.ca.read_bytes() == old_ca  # kept while it is fit
    remade = certs.ensure(folder, ("192.168.1.20",))  # a host the authority does not permit: made again
    assert made.ca.read_bytes() != old_ca
    _handshake(remade.cert, remade.key, remade.ca, "localhost")
    # an authority from before the constraints (one without them, as earlier versions made): made again
    _unconstrained_ca(folder)
    with pytest.raises(x509.ExtensionNotFound):
        x509.load_pem_x509_certificate(made.ca.read_bytes()).extensions.get_extension_for_class(x509.NameConstraints)
    again = certs.ensure(folder)
    ca = x509.load_pem_x509_certificate(again.ca.read_bytes())
    assert ca.extensions.get_extension_for_class(x509.NameConstraints).critical
    _handshake(again.cert, again.key, again.ca, "localhost")


def _unconstrained_ca(folder: Path) -> None:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "xladdin local cell service CA")])
    now = datetime.datetime.now(datetime.UTC)
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).sign(key, hashes.SHA256()))
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "ca-key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))


def test_a_call_whose_answers_arrive_is_settled_from_them_and_not_run_again(tmp_path, monkeypatch):
    """When a pending call's requests are answered, the service settles it with the value made from their
    answers, the value running the call again gives: each call's function body runs once, not once more
    per settle."""
    import dataclasses

    runs = []
    screen = functions.BY_NAME["QWEN_SCREEN"]
    monkeypatch.setitem(functions.BY_NAME, "QWEN_SCREEN", dataclasses.replace(
        screen, body=lambda rt, a, caller, folder: runs.append(caller) or screen.body(rt, a, caller, folder)))
    engine = ScriptedEngine(lambda m: screen_answer(), delay=0.05)
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, cert = start(runtime, tmp_path)
    client = Client(running.url, cert.ca)
    try:
        batch = [{"fn": "QWEN_SCREEN", "args": [[row(i)], True if i == 0 else None]} for i in range(20)]
        batch[0]["args"][0] = [["代码", "名称", "行业", "市盈率TTM", "ROE", "EPS", "财报摘要"], row(0)]  # a header
        first = client.calls(batch)
        assert [r["state"] for r in first] == ["pending"] * 20
        settled = client.settle_all(first)
        assert len(runs) == 20 and len(set(runs)) == 20  # each call's body once
        assert settled[first[0]["id"]][0] == functions.spill_header()
        fn = calls.function("QWEN_SCREEN")
        for item, r in zip(batch, first, strict=True):  # the call run again (now from memory) gives the same
            assert calls.evaluate(runtime, fn, item["args"], "again") == settled[r["id"]]
        assert all(settled[r["id"]][-1][0] == f"{600000 + i}.SH" for i, r in enumerate(first))
        assert len(engine.calls) == 20
    finally:
        running.stop()
        runtime.close()


# What one call costs the service (Excel's cell: test_user_paths.MISS_CARRIERS, MISS_FUTURES): carried by its
# HTTP loop (the POST, then the settle), the thread that runs the calls after their POST, and the core's loop;
# its fate, the call's future, and the door's own for the calls of its POST run later.
SERVICE_CARRIERS, SERVICE_FUTURES = 3, 3


def test_a_call_walks_down_the_layers_and_its_door_is_told_by_its_future(tmp_path):
    """One ``QWEN_SCREEN`` call through the service (real HTTPS on 127.0.0.1), pending, then settled: every
    xladdin function entered on every thread is recorded with the function that called it. None calls a
    function of a layer above its own: the service hears of the answers through the call's future, which
    runs its ``recalculate`` (a mutant where the cells' runtime calls its door back fails here)."""
    walk = Walk()
    engine = ScriptedEngine(lambda m: screen_answer(), delay=0.05)
    with walk.walking():  # the service's and the batcher's threads start inside: each runs the hook
        runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
        running, cert = start(runtime, tmp_path)
        client = Client(running.url, cert.ca)
        try:
            client.settle_all(client.calls([{"fn": "QWEN_SCREEN", "args": [[row(1)], None]}]))  # all started
            walk.recording.set()
            first = client.calls([{"fn": "QWEN_SCREEN", "args": [[row(2)], None]}])
            settled = client.settle_all(first)
            walk.recording.clear()
        finally:
            running.stop()
            runtime.close()
    assert first[0]["state"] == "pending" and settled[first[0]["id"]][0][0] == "600002.SH"
    assert {"xladdin.cells.service", "xladdin.sheet.functions", "xladdin.core.resolver"} <= walk.entered
    assert not walk.upward, sorted(walk.upward)
    assert len(walk.carriers()) <= SERVICE_CARRIERS, walk.threads
    assert walk.futures <= SERVICE_FUTURES, walk.futures


def test_calls_run_after_their_post_are_paced_by_the_engine(tmp_path):
    """A recalculation larger than the engine's window and ``ROWS_AHEAD``: the calls the service runs after
    answering them pending make their requests as the engine takes them, not all at once; every call
    settles once the engine answers."""
    from test_user_paths import _answering_server

    from xladdin.core.resolver import ROWS_AHEAD

    go = threading.Event()
    window, n = 2, ROWS_AHEAD + 40
    server = _answering_server(screen_answer(), hold=go)
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path, engine_url=server.url,
                                                                      max_parallel=window)))
    running, cert = start(runtime, tmp_path, answer_budget=0.0)  # every call run after the POST
    client = Client(running.url, cert.ca)
    try:
        first = client.calls([{"fn": "QWEN_SCREEN", "args": [[row(i)]]} for i in range(n)])
        assert [r["state"] for r in first] == ["pending"] * n
        stats = runtime.batcher.stats
        wait_until(lambda: stats.submitted >= window + ROWS_AHEAD, 60, message="the calls were not run")
        time.sleep(1.0)  # time to run on, were there no pace
        assert stats.submitted == window + ROWS_AHEAD < n
        go.set()
        settled = client.settle_all(first)
        assert all(settled[r["id"]][0][0] == f"{600000 + i}.SH" for i, r in enumerate(first))
    finally:
        go.set()
        running.stop()
        runtime.close()
        server.close()


def test_the_calls_remembered_are_bounded_by_their_bytes_not_their_count(tmp_path, monkeypatch):
    """Failing calls of half a MiB each (bad arguments): what the service keeps of them stays under its bound
    of bytes, however many come."""
    monkeypatch.setattr(service, "MAX_KEPT_BYTES", 4 << 20)
    engine = ScriptedEngine(lambda m: screen_answer())
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, cert = start(runtime, tmp_path)
    try:
        client = Client(running.url, cert.ca)
        for i in range(24):  # 12 MiB of arguments in all
            got = client.calls([{"fn": "QWEN_CLASSIFY", "args": [f"{i}" + "x" * (512 << 10), "不是类别表"]}])
            assert got[0]["state"] in ("error", "done", "pending")
        kept = running.service._kept_bytes
        assert kept <= 4 << 20 and len(running.service._entries) < 24, kept
        assert client.calls([{"fn": "QWEN_STATUS", "args": []}])[0]["state"] == "done"  # still serving
    finally:
        running.stop()
        runtime.close()
