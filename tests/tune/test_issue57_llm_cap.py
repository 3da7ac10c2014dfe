"""Issue 57, part 8: the LLM endpoint's reply is read with a byte cap, before the whole body is in memory.

A 1 GiB reply took the process to 4.8 GiB: the 50 000-character cap was applied after the read. Here a server on
127.0.0.1 sends a 64 MiB reply (with and without a Content-Length) to a child process that calls the endpoint as
``--strategy llm`` does; its peak RSS (``ru_maxrss``) may grow by far less than the body.

    python -m pytest -q tests/tune/test_issue57_llm_cap.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("litellm")

REPO = Path(__file__).resolve().parents[2]
BODY_MIB = 64
CHILD = """
import os, resource, sys
os.environ["OPENAI_API_KEY"] = "sk-test-not-a-key"
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
from primus_ext.tune.strategies.llm import LLMUnavailable, litellm_completion
call = litellm_completion("openai/fake", api_base=sys.argv[1], timeout_s=120)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    text = call([{"role": "user", "content": "propose"}])
    print("READ", len(text))
except LLMUnavailable as err:
    print("REFUSED", str(err)[:300])
print("DELTA_KIB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def _server(declared: bool) -> ThreadingHTTPServer:
    head = b'{"id": "x", "object": "chat.completion", "created": 0, "model": "fake", "choices": [{"index": 0, ' \
           b'"finish_reason": "stop", "message": {"role": "assistant", "content": "'
    tail = b'"}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}'
    block = b"x" * (1 << 20)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if declared:
                    self.send_header("Content-Length", str(len(head) + BODY_MIB * len(block) + len(tail)))
                self.end_headers()
                self.wfile.write(head)
                for _ in range(BODY_MIB):
                    self.wfile.write(block)
                self.wfile.write(tail)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading: the cap

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "read-to-close"])
def test_a_64_mib_reply_is_refused_without_being_read(declared: bool) -> None:
    server = _server(declared)
    try:
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        run = subprocess.run([sys.executable, "-c", CHILD, url], capture_output=True, text=True, env=env,
                             timeout=300)
    finally:
        server.shutdown()
    assert run.returncode == 0, run.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
    assert "REFUSED" in lines and "READ" not in lines, run.stdout
    assert "larger than" in lines["REFUSED"] or "more than" in lines["REFUSED"]
    assert int(lines["DELTA_KIB"]) < 24 * 1024, lines  # the 64 MiB body was never held (read whole: > 64 MiB)
