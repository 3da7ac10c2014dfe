"""Mutations of the shipped recipes for the fuzz test and the fuzz benchmark (a uniquely named module).

    rng = random.Random(7)
    name, text, argv_extra = mutate(rng)      # a mutated recipe's YAML text and command-line overrides

Each mutation is one of the ways the issue-32 fuzz run broke the promise (types, sizes, unicode, YAML aliases,
layouts, extreme batch sizes, templates, truncation, raw bytes), applied to one of the shipped recipes. The
randomness comes from ``rng`` only (hypothesis hands the test a seeded ``random.Random``), so every case can be
replayed from its seed.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))

KEYS = (
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size", "virtual_pipeline_model_parallel_size",
    "num_layers_per_virtual_pipeline_stage", "micro_batch_size", "global_batch_size", "seq_length",
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "num_experts",
    "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_layer_freq",
    "moe_expert_capacity_factor", "recompute_granularity", "recompute_method", "recompute_num_layers",
    "recompute_modules", "pipeline_model_parallel_layout", "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers", "fp8", "bf16", "use_torch_fsdp2", "use_distributed_optimizer",
    "overlap_grad_reduce", "overlap_param_gather", "sequence_parallel", "vocab_size", "window_size",
    "tokenizer_model", "mtp_num_layers", "cpu_offloading_num_layers", "extends", "model", "config",
)
"""Keys the loader validates (and a few it follows: extends, model, config)."""

_ODD_STRINGS = (
    "", " ", "null", "~", "yes", "0x1F", "1_000", "1e3", "١٢", "８", "\u202e8", "\x00", "\x1b[31m", "😀" * 50,
    "${PRIMUS_TP}", "${UNSET_VAR}", "${OPENAI_API_KEY}", "${X:}", "../../../etc/passwd", "a" * 5000,
    "([0]*3+[1]*5)", "([1]*999999999)", "(" * 500 + "1" + ")" * 500,
)
_LAYOUTS = ("Et|tL", "Et*3|(tt|)*29,m|L", "(t*99999)*99999", "t*99999999999999999999999", "E|(t|)*8000L",
            "E(t|)*7tL", "|||", "", "Et|m|L*0", "(tt)*-1", "E" + "t" * 20000 + "L")
_BATCHES = (0, -1, 1, 7, 2**31 - 8, 2147483640, 2**62, 10**30)


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(10 if depth < 2 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice((True, False))
    if kind == 2:
        return rng.choice((0, 1, -1, 3, 8, 64, 2**31, 2**63, 10**40, -(10**20)))
    if kind == 3:
        return rng.choice((0.5, -0.0, 1e308, float("nan"), float("inf"), float("-inf"), 1e-320))
    if kind in (4, 5):
        return rng.choice(_ODD_STRINGS)
    if kind == 6:
        return "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(1, 40)))
    if kind == 7:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    if kind == 8:
        return {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randrange(0, 4))}
    return rng.choice(_LAYOUTS)


def _overrides(data: dict[str, Any]) -> dict[str, Any]:
    modules = data.get("modules")
    if isinstance(modules, dict):
        module = modules.get("pre_trainer")
        if isinstance(module, dict):
            return module.setdefault("overrides", {}) if isinstance(module.get("overrides", {}), dict) else {}
    return data


def _alias_chain(levels: int, key: str) -> str:
    lines = ["x0: &x0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\n{key}: *x{levels}\n"


def mutate(rng: random.Random) -> tuple[str, str | bytes, list[str]]:
    """(recipe name, mutated text or bytes, extra ``key=value`` overrides for the command line)."""
    path = rng.choice(RECIPES)
    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    extra: list[str] = []
    kind = rng.randrange(12)
    over = _overrides(data)
    if kind <= 3:  # types and sizes of validated keys
        for _ in range(rng.randrange(1, 4)):
            over[rng.choice(KEYS)] = _value(rng)
    elif kind == 4:  # extreme batch sizes
        over["global_batch_size"] = rng.choice(_BATCHES)
        over["micro_batch_size"] = rng.choice((1, 2, 0, 2**20))
    elif kind == 5:  # layouts
        over["pipeline_model_parallel_layout"] = rng.choice(_LAYOUTS)
        over["pipeline_model_parallel_size"] = rng.choice((1, 2, 4, 8, 16))
    elif kind == 6:  # unicode keys and values
        over["".join(chr(rng.randrange(0x80, 0x3000)) for _ in range(rng.randrange(1, 12)))] = _value(rng)
    elif kind == 7:  # command-line overrides instead of the file
        extra = [f"{rng.choice(KEYS)}={rng.choice((*_ODD_STRINGS[:18], '8', '-3', '1.5', 'nan', '[1,2]'))}"
                 for _ in range(rng.randrange(1, 3))]
    elif kind == 8:  # deleted keys
        for key in rng.sample(sorted(over), min(len(over), rng.randrange(1, 5))):
            del over[key]
    dumped = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    if kind == 9:  # YAML aliases feeding a validated key
        dumped += _alias_chain(rng.randrange(1, 10), rng.choice(KEYS))
    elif kind == 10:  # truncated file / raw bytes
        raw = dumped.encode("utf-8")
        cut = rng.randrange(len(raw))
        if rng.random() < 0.5:
            return path.name, raw[:cut], extra
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
        return path.name, raw[:cut] + noise + raw[cut:], extra
    elif kind == 11:  # the text as written, with template and target-comment edits
        dumped = text.replace("${PRIMUS_TP:1}", rng.choice(("${PRIMUS_TP}", "${PRIMUS_TP:x}", "${:1}", "$${A}")))
        dumped = dumped.replace("nodes: 8", f"nodes: {rng.choice(('0', '-1', '1e9', 'x', '[8]', '99999999'))}")
    return path.name, dumped, extra


__all__ = ["KEYS", "RECIPES", "mutate"]


# ------------------------------------------------------------------------------------------ running one case
from dataclasses import dataclass  # noqa: E402


@dataclass(frozen=True)
class Outcome:
    """One command run in a forked child with a time and a memory bound."""

    exit_code: int | None
    """None when the child was killed (time bound) or died of a signal."""
    seconds: float
    peak_bytes: int
    """The child's peak resident memory above what it inherited from the parent at fork."""
    stderr: str
    timed_out: bool
    """Over ``limit_s`` of CPU time (user + system), or killed at the wall-clock bound."""
    cpu_s: float = 0.0

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.stderr

    @property
    def over_memory(self) -> bool:
        return "MemoryError" in self.stderr

    @property
    def clean(self) -> bool:
        """Exit 0 (fits), 2 (a clear refusal), 3 (out of memory) or 4 (over capacity within the memory model's
        error), no traceback, within the bounds."""
        return self.exit_code in (0, 2, 3, 4) and not self.traceback and not self.timed_out


def _rss_bytes() -> int:
    import os

    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _vm_bytes() -> int:
    import os

    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _shape_stream(fd: int, shape: str) -> None:
    """Make descriptor ``fd`` (1 or 2) ``closed``, ``full`` (/dev/full: every write ENOSPC) or ``pipe-gone`` (a pipe
    whose reader has left: every write EPIPE); ``file`` leaves it."""
    import os

    if shape == "closed":
        os.close(fd)
    elif shape == "full":
        os.dup2(os.open("/dev/full", os.O_WRONLY), fd)
    elif shape == "pipe-gone":
        read_end, write_end = os.pipe()
        os.close(read_end)
        os.dup2(write_end, fd)
        os.close(write_end)


def _text_stream(fd: int, encoding: str, shape: str) -> object:
    """What Python gives a program for descriptor ``fd``: None when it is closed (as at interpreter start)."""
    if shape == "closed":
        return None
    errors = "surrogateescape" if encoding == "ascii-c-locale" else "strict"  # LC_ALL=C without coercion: PEP 540
    return open(fd, "w", encoding=encoding.replace("-c-locale", ""), errors=errors, closefd=False)


def run_cli_child(argv: list[str], out_fd: int, err_fd: int, address_space: int, *, folder: object,
                  env: dict[str, str] | None = None, streams: tuple[str, str] = ("file", "file"),
                  encoding: str = "utf-8") -> None:
    """In a forked child: ``primus_ext.cli.main(argv)`` in ``folder`` with ``env`` added to the environment, stdout /
    stderr on ``out_fd`` / ``err_fd`` and the address space capped at ``address_space`` bytes; exits with its code (1
    and the traceback on stderr for an exception), never returns. ``streams``: the shapes of stdout and stderr
    (``_shape_stream``: the traceback of an exception still reaches ``err_fd``); ``encoding``: theirs (``ascii``:
    what ``PYTHONIOENCODING=ascii`` gives, ``ascii-c-locale``: ``LC_ALL=C`` without locale coercion)."""
    import os
    import resource
    import sys
    import traceback

    code = 1
    witness = None
    try:
        os.chdir(folder)
        os.environ.update(env or {})
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        witness = open(os.dup(err_fd), "w", encoding="utf-8")  # noqa: SIM115 - the traceback's way out
        for fd, shape in zip((1, 2), streams, strict=True):
            _shape_stream(fd, shape)
        # the streams on the new descriptors (under pytest, sys.stderr is its capture object, not fd 2)
        sys.stdout = _text_stream(1, encoding, streams[0])
        sys.stderr = _text_stream(2, encoding, streams[1])
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        from primus_ext.cli import main

        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc(file=witness)
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr, witness):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass  # a hostile stream: its failure is the command's to report
        os._exit(code)


def run_forked(argv: list[str], *, limit_s: float, limit_bytes: int, workdir: str) -> Outcome:
    """``primus_ext.cli.main(argv)`` in a forked child (this process's imports stay warm): address space capped at
    what the parent maps plus ``limit_bytes``; over ``limit_s`` of CPU time (user + system: the machine may be
    shared) it is timed out, and killed once 4 x ``limit_s`` of wall-clock time pass; stdout discarded, stderr
    kept."""
    import os
    import signal
    import tempfile
    import time

    err_file = tempfile.TemporaryFile(dir=workdir)  # noqa: SIM115 - read after the child exits, closed below
    base_rss, base_vm = _rss_bytes(), _vm_bytes()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        run_cli_child(argv, os.open(os.devnull, os.O_WRONLY), err_file.fileno(), base_vm + limit_bytes, folder=workdir)
    timed_out, status, usage = False, 0, None
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - start > 4 * limit_s:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            timed_out = True
            break
        time.sleep(0.005)
    seconds = time.monotonic() - start
    err_file.seek(0)
    stderr = err_file.read().decode("utf-8", "replace")
    err_file.close()
    code = os.waitstatus_to_exitcode(status)
    peak = max(0, usage.ru_maxrss * 1024 - base_rss) if usage is not None else 0
    cpu = usage.ru_utime + usage.ru_stime if usage is not None else 0.0
    return Outcome(exit_code=code if code >= 0 and not timed_out else None, seconds=seconds, peak_bytes=peak,
                   stderr=stderr, timed_out=timed_out or cpu > limit_s, cpu_s=cpu)


COMMANDS = (("recipe", "show"), ("project",), ("project", "--memory-only"))
"""What each mutated recipe is run through (analytic projection: no measurement)."""


def case_argv(rng: random.Random, recipe_path: str, extra: list[str]) -> list[str]:
    command = rng.choice(COMMANDS)
    if command[0] == "recipe":
        return ["recipe", "show", recipe_path, *extra]
    return [command[0], recipe_path, *command[1:], *extra]
