"""A stand-in for a model server's HTTP side, for measuring the client's own cost (``bench client``):
it answers ``/v1/models`` and ``/v1/chat/completions`` over HTTP/1.1 keep-alive, each completion
after a random delay, with one fixed valid screen answer. No model, no batching: only time and
sockets. Run in its own process, so its CPU is not the client's. ``GET /arrivals``: when each
completion request arrived, on the machine's monotonic clock (``time.monotonic``, the same in every
process: ``bench ramp``)."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time

from xladdin.testing import screen_answer

MODEL = "answer-server"


def _response(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def _serve(sock: socket.socket, low: float, high: float, seed: int) -> None:
    rng = random.Random(seed)
    answer = screen_answer()
    completion = {"id": "c", "object": "chat.completion", "created": 0, "model": MODEL,
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                               "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": 400, "completion_tokens": 40, "total_tokens": 440}}
    body = json.dumps(completion, ensure_ascii=False).encode()
    arrivals: list[float] = []
    models = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "root": MODEL,
                                                     "max_model_len": 8192}]}).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                length = next((int(v) for k, _, v in (x.partition(":") for x in lines[1:])
                               if k.strip().lower() == "content-length"), 0)
                if length:
                    await reader.readexactly(length)
                path = lines[0].split(" ")[1]
                if path.endswith("/chat/completions"):
                    arrivals.append(time.monotonic())
                    await asyncio.sleep(rng.uniform(low, high))
                    writer.write(_response("200 OK", body))
                elif path.endswith("/models"):
                    writer.write(_response("200 OK", models))
                elif path.endswith("/arrivals"):
                    writer.write(_response("200 OK", json.dumps(arrivals).encode()))
                else:
                    writer.write(_response("404 Not Found", b"{}"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, sock=sock, backlog=4096)
    async with server:
        await server.serve_forever()


def serve(sock: socket.socket, low: float, high: float, seed: int) -> None:
    """Serve on the bound socket ``sock`` until killed (the target of a ``multiprocessing.Process``)."""
    asyncio.run(_serve(sock, low, high, seed))
