"""Hostile generators for what surrounds a command (issue 56 part 1): the environment (``env``: PATH, HOME, TMPDIR,
PYTHONPATH, the locale, values of a recipe's ``${VAR}`` templates, secrets among them), the standard streams
(``streams``: closed, full, a pipe whose reader left, an ASCII locale), the output paths (``outpaths``: a folder,
/dev/full, a FIFO, a dangling symlink, a read-only file or folder, a path under a file) and the LLM endpoint
(``llm``: a local HTTP server answering garbage, a huge or slow body, wrong JSON, code in the reply, redirects).
Each returns a ``hostile_cases.Case``; ``benchmarks/hostile_campaign.py --surface env`` runs one surface alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import threading
import time
from pathlib import Path

from hostile_cases import Case, _copy_recipe, _override, _presets, _secret, _variable

STREAM_FAILED = 74  # primus_ext.cli._streams.STREAM_FAILED: a standard stream refused a write (sysexits EX_IOERR)


def _command(rng: random.Random, recipe: Path, folder: Path) -> list[str]:
    return rng.choice((["project", str(recipe)], ["project", str(recipe), "--json", "-"],
                       ["project", str(recipe), "--html", str(folder / "p.html")], ["recipe", "show", str(recipe)],
                       ["tune", str(recipe), "--budget", "2", "--no-regret"], ["train", "--config", str(recipe),
                                                                               "--projection-only", "--analytic"],
                       ["compare", str(recipe), "micro_batch_size=1"], ["project", str(recipe), "--timeline"]))


def environment(rng: random.Random, folder: Path) -> Case:
    """A command under an odd environment; a secret always rides along in a ``${VAR}`` the recipe reads."""
    recipe = _copy_recipe(folder)
    name, value = _variable(rng), _secret(rng)
    _override(recipe, f"{rng.choice(('data_path', 'exp_tag', 'zz_conn'))}: ${{{name}}}")
    env = {name: value}
    kind = rng.choice(("path", "home", "tmpdir", "pythonpath", "locale", "template", "template", "secret-shape"))
    secrets = [value]
    if kind == "path":
        env["PATH"] = rng.choice(("", "/nonexistent", str(folder), ":" * 1000, "x" * 100_000))
    elif kind == "home":
        (folder / "home-file").write_text("x")
        env["HOME"] = rng.choice(("", "/nonexistent", str(folder / "home-file"), "/proc", "~"))
    elif kind == "tmpdir":
        ro = folder / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        env["TMPDIR"] = rng.choice(("/nonexistent", str(ro), str(recipe), "/dev/full", ""))
    elif kind == "pythonpath":
        env["PYTHONPATH"] = rng.choice(("", str(folder), "/nonexistent", ":" * 500))
    elif kind == "locale":
        env.update(rng.choice(({"LANG": "C", "LC_ALL": "C"}, {"LC_ALL": "xx_YY.UTF-8"}, {"LANG": "tr_TR.UTF-8"},
                               {"LC_ALL": "POSIX", "LANGUAGE": "fr"}, {"LC_NUMERIC": "de_DE.UTF-8"})))
    elif kind == "template":
        other = f"{name}_B"
        _override(recipe, f"zz_other: ${{{other}:{rng.choice(('x', '', '${' + name + '}', '9' * 400))}}}")
        env[other] = rng.choice(("${" + name + "}", "${" + other + "}", "x" * 1_000_000, "a\nb: 1", "\x1b[2J\x1b[31m",
                                 "'; rm -rf ~ #", "é" * 1000, "{a: 1}", "[1, 2]", "*a", "!!python/object:x {}"))
    else:  # a secret of every shape: short, multi-line, with YAML in it, URL-encoded
        value = rng.choice(("hunter2!", "a\nb\nsecret-line-3", "p: w", "%73%65%63ret-" + value, value * 200))
        env[name] = value
        secrets = [v for v in (value, *value.splitlines()) if len(v) >= 6]
    command = _command(rng, recipe, folder)
    return Case(f"env/{kind}-{command[0]}", command, folder, inputs=[recipe, *_presets(folder)], secrets=secrets,
                env=env)


def standard_streams(rng: random.Random, folder: Path) -> Case:
    """A command whose stdout and / or stderr is closed, full or a pipe whose reader left, or ASCII-only."""
    recipe = _copy_recipe(folder)
    shapes = ("file", "closed", "full", "pipe-gone")
    streams = (rng.choice(shapes), rng.choice(shapes))
    encoding = rng.choice(("utf-8", "utf-8", "ascii", "ascii-c-locale"))
    command = rng.choice((_command(rng, recipe, folder), ["recipe", "list"], ["--help"], ["project", "--help"],
                          ["project", str(folder / "nowhere.yaml")], ["validate", str(folder / "nowhere.csv")],
                          ["recipe", "show", str(recipe), "--json"]))
    return Case(f"streams/{'+'.join(streams)}-{encoding}-{command[0]}", command, folder,
                inputs=[recipe, *_presets(folder)], streams=streams, encoding=encoding, exits=(STREAM_FAILED,))


OUTPUT_FLAGS = (("project", "--json"), ("project", "--html"), ("project", "--trace"), ("ci", "--junit"),
                ("ci", "--json"), ("tune", "--json"), ("tune", "--log"), ("calibrate", "--json"),
                ("validate", "--json"), ("compare", "--html"))


def _odd_output(rng: random.Random, folder: Path) -> tuple[str, Path]:
    kind = rng.choice(("folder", "dev-full", "fifo", "dangling", "read-only-file", "read-only-folder", "under-file",
                       "no-parent", "long-name", "newline", "proc", "dev-null"))
    out = folder / "out"
    if kind == "folder":
        out.mkdir()
    elif kind == "dev-full":
        out = Path("/dev/full")
    elif kind == "fifo":
        os.mkfifo(out)
    elif kind == "dangling":
        out.symlink_to(folder / "gone" / "target.json")
    elif kind == "read-only-file":
        out.write_text("keep me\n")
        out.chmod(0o444)
    elif kind == "read-only-folder":
        (folder / "ro").mkdir()
        out = folder / "ro" / "out.json"
        out.parent.chmod(0o555)
    elif kind == "under-file":
        (folder / "plain").write_text("x")
        out = folder / "plain" / "out.json"
    elif kind == "no-parent":
        out = folder / "a" / "b" / "c" / "out.json"
    elif kind == "long-name":
        out = folder / ("x" * 300)
    elif kind == "newline":
        out = folder / "a\nb.json"
    elif kind == "proc":
        out = Path("/proc/self/status")
    else:
        out = Path("/dev/null")
    return kind, out


SWEEP_ROW = {"op": "attention", "backend": "cudnn", "heads": 32, "kv_heads": 32, "dim": 128, "vdim": 128, "seq": 4096,
             "pass": "fwd+bwd", "ms": 1.0, "tflops": 400.0}


def _profile_writer(rng: random.Random, folder: Path, runs: Path) -> Case:
    """The profile writers (``validate --fit --write-profiles DIR``, ``profile pin --out DIR``) at an odd folder, or
    at a folder whose ``h100.yaml`` leads (symlink or hard link) to the command's own CSV or sweep: a profile is
    rewritten on purpose, no other input may be (issue 56)."""
    from hostile_files import RUN_HEADER, RUN_ROW

    runs.write_text(RUN_HEADER + RUN_ROW * 8)  # a family needs rows to fit
    sweep = folder / "sweep.json"
    sweep.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "attention": [SWEEP_ROW]}))
    command = rng.choice(("validate", "profile"))
    argv = (["validate", str(runs), "--archs", str(folder / "archs.csv"), "--jobs", "1", "--fit", "--write-profiles"]
            if command == "validate" else ["profile", "pin", str(sweep), "--out"])
    kind = rng.choice(("input-symlink", "input-hardlink", "fresh", "odd"))
    out = folder / "profiles"
    if kind == "odd":
        kind, out = _odd_output(rng, folder)
    elif kind != "fresh":
        out.mkdir()
        read = [runs, folder / "archs.csv"] if command == "validate" else [sweep]  # what the command reads
        victim = rng.choice(read)
        (out / "h100.yaml").symlink_to(victim) if kind == "input-symlink" else (out / "h100.yaml").hardlink_to(victim)
    inputs = ([runs, folder / "archs.csv"] if command == "validate" else [sweep]) + (
        [out] if kind == "read-only-file" else [])
    return Case(f"outpaths/{command}-profiles-{kind}", [*argv, str(out)], folder, inputs=inputs)


def output_paths(rng: random.Random, folder: Path) -> Case:
    """Every output flag at an odd place; nothing half-written, no input touched, no temporary file left."""
    recipe = _copy_recipe(folder)
    log = folder / "train.log"
    from hostile_cases import log_text

    log.write_text(log_text(20, rng=rng))
    suite = folder / "suite.yaml"
    suite.write_text(f"suite: s\nentries:\n  - recipe: {recipe.name}\n")
    runs = folder / "runs.csv"
    from hostile_files import ARCH_HEADER, ARCH_ROW, RUN_HEADER, RUN_ROW

    runs.write_text(RUN_HEADER + RUN_ROW)
    (folder / "archs.csv").write_text(ARCH_HEADER + ARCH_ROW)
    if rng.random() < 0.25:
        return _profile_writer(rng, folder, runs)
    kind, out = _odd_output(rng, folder)
    command, flag = rng.choice(OUTPUT_FLAGS)
    argv = {"project": ["project", str(recipe)], "compare": ["compare", str(recipe), "micro_batch_size=1"],
            "ci": ["ci", str(suite), "--update-baseline", "--baseline", str(folder / "b.json")],
            "tune": ["tune", str(recipe), "--budget", "2", "--no-regret"],
            "calibrate": ["calibrate", str(recipe), str(log), "--analytic", "--dry-run"],
            "validate": ["validate", str(runs), "--archs", str(folder / "archs.csv"), "--jobs", "1"]}[command]
    inputs = [recipe, log, suite, runs, *_presets(folder)] + ([out] if kind == "read-only-file" else [])
    return Case(f"outpaths/{command}{flag}-{kind}", [*argv, flag, str(out)], folder, inputs=inputs)


# --------------------------------------------------------------------------------------------------- LLM endpoint
def _chat(content: object) -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}]}).encode()


def _reply(kind: str, rng: random.Random, folder: Path) -> bytes:
    """The bytes the server sends back (status line included) for one request."""
    def http(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
        return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}"
                "Connection: close\r\n\r\n").encode() + body
    pwned = folder / "PWNED"
    if kind == "garbage":
        return bytes(rng.randrange(256) for _ in range(rng.choice((1, 100, 10_000))))
    if kind == "not-json":
        return http(rng.choice((b"<html>502 Bad Gateway</html>", b"", b"{", b"\xff\xfe", b"null", b"[]")))
    if kind == "wrong-json":
        return http(rng.choice((b'{"choices": []}', b'{"choices": [{}]}', b'{"choices": null}',
                                _chat(None), _chat(7), _chat({"a": 1}), _chat([{"type": "image"}]),
                                b'{"choices": [{"message": {"content": "' + b"[" * 100_000 + b'"}}]}')))
    if kind == "code":
        return http(_chat(rng.choice((
            f"```python\nimport os; os.system('touch {pwned}')\n```",
            json.dumps({"rationale": "x", "configs": [{"tensor_model_parallel_size": f"__import__('os').system("
                                                       f"'touch {pwned}')"}]}),
            json.dumps({"rationale": "{{7*7}} ${HOME} $(touch " + str(pwned) + ")",
                        "configs": [{"micro_batch_size": "1; touch " + str(pwned)}]}),
            "!!python/object/apply:os.system ['touch " + str(pwned) + "']",
            json.dumps({"configs": [{"micro_batch_size": 10 ** 400}]}).replace('"', '"', 1)))))
    if kind == "huge":
        body = b"{" + b" " * (64 << 20) + b"}"
        return http(body) if rng.random() < 0.5 else (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body)
    if kind == "status":
        return http(b'{"error": {"message": "' + b"x" * 100_000 + b'"}}', rng.choice(("429 Too Many", "500 Oops",
                                                                                       "401 No", "999 What")),
                    "Retry-After: 99999\r\n")
    if kind == "redirect":
        return http(b"", "302 Found", rng.choice(("Location: /v1/chat/completions\r\n", "Location: file:///etc/passwd\r\n",
                                                  "Location: http://127.0.0.1:1/\r\n")))
    return b""  # "slow": handled by the server


class HostileServer:
    """A one-thread TCP server on 127.0.0.1 answering every connection with ``_reply(kind)`` (``slow``: a byte a
    second, ``silent``: nothing, ``close``: the connection closed at once)."""

    def __init__(self, kind: str, rng: random.Random, folder: Path) -> None:
        self.kind, self.payload = kind, _reply(kind, rng, folder)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.hits = 0
        """Connections answered: a case that never reached the endpoint tested nothing."""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(1.0)
            with contextlib.suppress(OSError):
                conn.recv(1 << 16)
            if self.kind == "slow":
                for byte in _chat("{}"):
                    if self.stop.wait(1.0):
                        break
                    conn.sendall(bytes([byte]))
            elif self.kind == "silent":
                self.stop.wait(30)
            elif self.kind != "close":
                conn.sendall(self.payload)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self, case: Case) -> list[str]:
        self.stop.set()
        self.sock.close()
        problems = ["the reply's code ran: PWNED exists"] if (case.folder / "PWNED").exists() else []
        return problems + ([] if self.hits else ["other: the LLM endpoint was never asked"])


def llm_endpoint(rng: random.Random, folder: Path) -> Case:
    """``tune --strategy llm`` against a hostile local endpoint; its API key is a secret never shown."""
    recipe = _copy_recipe(folder)
    kind = rng.choice(("garbage", "not-json", "wrong-json", "code", "code", "huge", "status", "redirect", "slow",
                       "silent", "close"))
    server = HostileServer(kind, rng, folder)
    key = "sk-" + _secret(rng).replace("/", "x")[-20:]
    argv = ["tune", str(recipe), "--strategy", "llm", "--llm", "openai/m", "--llm-api-base", server.api_base,
            "--llm-timeout", "2", "--llm-total", "4", "--budget", "3", "--no-regret",
            *rng.choice(([], ["--json", str(folder / "t.json")], ["--log", str(folder / "t.jsonl")]))]
    time.sleep(0)  # the server thread is listening: bind + listen happened above
    return Case(f"llm/{kind}", argv, folder, inputs=[recipe, *_presets(folder)], secrets=[key],
                env={"OPENAI_API_KEY": key, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, after=server.close)


__all__ = ["environment", "llm_endpoint", "output_paths", "standard_streams"]
