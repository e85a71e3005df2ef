"""The cell service's connections through real TLS on real sockets: those still in their TLS handshake count
toward the bound from the moment they are accepted, the bound stays below the process's open-file limit,
one address beyond this machine holds at most its share, and a stream whose reader takes nothing is
dropped. Slow clients (never a ClientHello, or half a request's headers) are held while a normal request
is served."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import subprocess
import sys

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("cryptography")

from conftest import tiny_settings  # noqa: E402
from kit import free_port, wait_until  # noqa: E402
from test_cells import Client, _closed_within, _tls_socket, start  # noqa: E402

from xladdin.cells import certs, service  # noqa: E402
from xladdin.core.batcher import Batcher  # noqa: E402
from xladdin.errors import ConfigError  # noqa: E402
from xladdin.sheet.functions import CellRuntime  # noqa: E402
from xladdin.testing import ScriptedEngine, screen_answer  # noqa: E402

STATUS = [{"fn": "QWEN_STATUS", "args": []}]
HALF = b"POST /api/calls HTTP/1.1\r\nHost: localhost\r\n"  # a request's headers, unfinished
REST = b'Content-Type: application/json\r\nContent-Length: 12\r\nConnection: close\r\n\r\n{"calls":[]}'

# Slow clients in a process of their own (its own open files): HALF on the first ones after their handshake,
# nothing at all on the others (connected, never a ClientHello); "held" once all are, then open till stdin ends.
SLOW = r"""
import resource, select, socket, ssl, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
except (ValueError, OSError):
    pass
port, ca, half, raw = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
context = ssl.create_default_context(cafile=ca)
held = []
for _ in range(half):
    s = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30), server_hostname="localhost")
    s.sendall(HALF)
    held.append(s)
waiting = []
for _ in range(raw):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    waiting.append(s)
held += waiting
while waiting:
    _, done, _ = select.select([], waiting, [], 10)
    if not done:
        break
    waiting = [s for s in waiting if s not in done]
print("held", len(held), flush=True)
sys.stdin.read()
""".replace("HALF", repr(HALF))


@pytest.fixture
def runtime(tmp_path):
    engine = ScriptedEngine(lambda m: screen_answer())
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    yield runtime
    runtime.close()


@pytest.fixture
def slow_handshakes(monkeypatch):
    """Handshakes and idle connections given far longer than the tests take: only the bounds close them."""
    monkeypatch.setattr(service, "HANDSHAKE_TIMEOUT", 120.0)


def _raw(port: int, source: str = "127.0.0.1", host: str = "127.0.0.1") -> socket.socket:
    """A connection that never sends its ClientHello."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect((host, port))
    return sock


def _half(url: str, ca) -> ssl.SSLSocket:
    sock = _tls_socket(url, ca)
    sock.sendall(HALF)
    return sock


def _answered(sock: ssl.SSLSocket) -> bytes:
    """The rest of HALF's request sent, and the service's answer read to its end."""
    sock.sendall(REST)
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def test_a_request_is_served_while_slow_connections_outnumber_the_open_files_left(tmp_path, runtime,
                                                                                   slow_handshakes, caplog):
    """300 slow connections (100 with half a request's headers, 200 that never send a ClientHello) against a
    service with 250 open files to spare: it never runs out of them (so it still accepts), holds at most its
    bound, and a normal request is served while they hang on."""
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    spare = 250
    if soft != resource.RLIM_INFINITY and soft < service._files_open() + spare:
        pytest.skip(f"the open-file limit {soft} leaves too few to lower")
    caplog.set_level(logging.ERROR, logger="asyncio")
    resource.setrlimit(resource.RLIMIT_NOFILE, (service._files_open() + spare, hard))
    slow = None
    try:
        running, cert = start(runtime, tmp_path, idle_timeout=120)
        try:
            slow = subprocess.Popen([sys.executable, "-c", SLOW, str(running.service.port), str(cert.ca), "100", "200"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert slow.stdout.readline().split() == ["held", "300"]
            assert Client(running.url, cert.ca).calls(STATUS)[0]["state"] == "done"
            assert len(running.site.holding()) <= running.site.limit <= service.MAX_CONNECTIONS
            assert not [r for r in caplog.records if "out of system resource" in r.getMessage()]
        finally:
            if slow is not None:
                slow.stdin.close()
                slow.wait(30)
            running.stop()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_connections_in_their_handshake_count_toward_the_bound_and_are_closed_first(tmp_path, runtime,
                                                                                    slow_handshakes):
    """At a bound of 4: two connections with half a request's headers, then ten that never send a
    ClientHello. Each over the bound closes the oldest still in its handshake, so the service holds 4, the
    half requests are still there to be finished, and a normal request is served."""
    running, cert = start(runtime, tmp_path, max_connections=4, idle_timeout=120)
    try:
        port = running.service.port
        halves = [_half(running.url, cert.ca) for _ in range(2)]
        raws = [_raw(port) for _ in range(10)]
        wait_until(lambda: len([s for s in raws if _closed_within(s, 0.01)]) >= 8, 30,
                   message="more connections than the bound stayed open")
        assert all(_closed_within(s, 0.01) for s in raws[:8])  # the oldest first
        assert Client(running.url, cert.ca).calls(STATUS)[0]["state"] == "done"
        for sock in halves:  # never closed for the others: their requests are answered
            assert _answered(sock).startswith(b"HTTP/1.1 200")
        assert running.site.refused == 0
    finally:
        running.stop()


def _beyond_loopback() -> str:
    """This machine's address on its network (not loopback), or a skip where it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 9))  # no packet is sent: the route's source address is read
            address = s.getsockname()[0]
        except OSError:
            address = ""
    if not address or address.startswith("127.") or address == "0.0.0.0":
        pytest.skip("this machine has no address beyond loopback")
    return address


def test_one_address_beyond_this_machine_holds_at_most_its_share(tmp_path, runtime, slow_handshakes, monkeypatch):
    """Bound to every address (with a key), at a share of 4 a client: one address's fifth connection closes
    its own oldest (never another client's), so it holds 4; that address's own request still gets through,
    and so does this machine's."""
    monkeypatch.setattr(service, "MAX_PER_CLIENT", 4)
    address = _beyond_loopback()
    cert = certs.ensure(tmp_path / "cert")
    svc = service.CellService(runtime, host="0.0.0.0", port=free_port(), key="the-key", max_connections=50,
                              idle_timeout=120)
    running = service.Running(svc, service.tls(cert.cert, cert.key))
    try:
        port = svc.port
        local = _half(running.url, cert.ca)  # this machine's, half a request
        theirs = [_raw(port, source=address, host=address) for _ in range(10)]
        wait_until(lambda: len([s for s in theirs if _closed_within(s, 0.01)]) >= 6, 30,
                   message="one address held more than its share")
        assert all(_closed_within(s, 0.01) for s in theirs[:6])  # its oldest
        context = ssl.create_default_context(cafile=str(cert.ca))
        with context.wrap_socket(socket.create_connection((address, port), timeout=30),
                                 server_hostname="localhost") as own:
            own.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            got = b""
            while chunk := own.recv(65536):
                got += chunk
        assert got.startswith(b"HTTP/1.1 200")
        assert _answered(local).startswith(b"HTTP/1.1 ")  # this machine's connection was never taken
        assert Client(running.url, cert.ca, key="the-key").calls(STATUS)[0]["state"] == "done"
    finally:
        running.stop()


def test_a_stream_whose_reader_takes_nothing_is_dropped_and_the_service_serves_on(tmp_path, runtime, monkeypatch):
    """A client with a small receive buffer asks two settles on one connection and reads nothing: the first
    answer (8 MB, every id it asked echoed unknown) fills the socket's buffers, so the stream asked next
    stalls on its first part, and past ``STALL_S`` the service drops it and closes its connection, then
    answers the next request."""
    monkeypatch.setattr(service, "STALL_S", 0.5)
    running, cert = start(runtime, tmp_path, max_request_bytes=32 << 20)
    try:
        def settle(count: int, stream: bool) -> bytes:
            ids = [f"{i:06d}" + "x" * 4090 for i in range(count)]
            body = json.dumps({"ids": ids, "wait": 5, "stream": stream}).encode()
            return (b"POST /api/settle HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body)) + body

        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window stays small
        raw.connect(("127.0.0.1", running.service.port))
        sock = ssl.create_default_context(cafile=str(cert.ca)).wrap_socket(raw, server_hostname="localhost")
        sock.sendall(settle(2000, stream=False) + settle(250, stream=True))
        server = running.site._runner.server
        wait_until(lambda: running.service.counts["streams_dropped"] == 1, 30, message="the stalled stream was kept")
        wait_until(lambda: not any(h.transport is not None for h in server.connections), 30,
                   message="the stalled stream's connection stayed open")
        assert _closed_within(sock, 30)
        assert Client(running.url, cert.ca).calls(STATUS)[0]["state"] == "done"
    finally:
        running.stop()


def test_a_stream_whose_one_part_is_never_taken_is_dropped(tmp_path, runtime, monkeypatch):
    """A settle stream whose first part alone is larger than the socket's buffers (8 MB: every id it asked
    echoed unknown), to a client that reads nothing: the transport takes the part whole, so the stream is
    seen stalled by what it leaves unsent, dropped past ``STALL_S`` and its connection closed."""
    monkeypatch.setattr(service, "STALL_S", 0.5)
    running, cert = start(runtime, tmp_path, max_request_bytes=32 << 20)
    try:
        ids = [f"{i:06d}" + "x" * 4090 for i in range(2000)]
        body = json.dumps({"ids": ids, "wait": 5, "stream": True}).encode()
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window stays small
        raw.connect(("127.0.0.1", running.service.port))
        sock = ssl.create_default_context(cafile=str(cert.ca)).wrap_socket(raw, server_hostname="localhost")
        sock.sendall(b"POST /api/settle HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        wait_until(lambda: running.service.counts["streams_dropped"] == 1, 30, message="the stalled stream was kept")
        assert _closed_within(sock, 30)
        assert Client(running.url, cert.ca).calls(STATUS)[0]["state"] == "done"
    finally:
        running.stop()


def test_the_connection_settings_are_bounded(runtime):
    with pytest.raises(ConfigError, match="connections"):
        service.CellService(runtime, max_connections=0)
    with pytest.raises(ConfigError, match="idle timeout"):
        service.CellService(runtime, idle_timeout=0)
