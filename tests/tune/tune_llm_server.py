"""A scripted OpenAI-compatible chat server on 127.0.0.1 (stdlib only), for the LLM strategy tests.

    with FakeLLM([reply("{...}"), sleep(5), status(401, "bad key")]) as server:
        server.api_base          # http://127.0.0.1:PORT/v1
        server.requests          # [(headers, body)] received

Each request to ``/v1/chat/completions`` consumes the next scripted step (the last one repeats).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def reply(content: str) -> dict[str, Any]:
    return {"kind": "reply", "content": content}


def sleep(seconds: float) -> dict[str, Any]:
    return {"kind": "sleep", "seconds": seconds}


def status(code: int, message: str) -> dict[str, Any]:
    return {"kind": "status", "code": code, "message": message}


def drip(seconds_per_byte: float) -> dict[str, Any]:
    """A valid reply sent one byte every ``seconds_per_byte`` (each socket read succeeds; the call never ends)."""
    return {"kind": "drip", "interval": seconds_per_byte}


def reset() -> dict[str, Any]:
    """The connection closed with a TCP reset before any reply."""
    return {"kind": "reset"}


def content_list(text: str) -> dict[str, Any]:
    """A reply whose message content is a list of parts (as some OpenAI-compatible servers send)."""
    return {"kind": "reply", "content": [{"type": "text", "text": text}]}


class FakeLLM:
    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = list(script)
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.closing = threading.Event()
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with owner._lock:
                    owner.requests.append((dict(self.headers), body))
                    step = owner.script.pop(0) if len(owner.script) > 1 else owner.script[0]
                if step["kind"] == "sleep":
                    time.sleep(step["seconds"])
                    step = {"kind": "reply", "content": "{}"}
                if step["kind"] == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                if step["kind"] == "drip":
                    self._drip(step["interval"])
                    return
                if step["kind"] == "status":
                    payload = {"error": {"message": step["message"], "type": "invalid_request_error"}}
                    self._send(step["code"], payload)
                    return
                self._send(200, {
                    "id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": step["content"]}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                })

            def _drip(self, interval: float) -> None:
                data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "fake",
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": "{}"}}]}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.flush()
                    for i in range(len(data)):
                        if owner.closing.is_set():
                            return
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                        time.sleep(interval)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (time-out tests)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def prompts(self) -> list[str]:
        return [body["messages"][-1]["content"] for _, body in self.requests]

    def __enter__(self) -> FakeLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
