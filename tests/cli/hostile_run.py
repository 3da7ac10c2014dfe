"""Running a hostile case (``hostile_cases.Case``) in forked children with bounds on CPU time, wall time and memory,
and checking what must never happen: a traceback, an input changed, a secret shown, a temporary file left."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from hostile_cases import Case


@dataclass
class Result:
    case: Case
    exit_codes: list[int | None]
    seconds: float
    """Wall-clock seconds until the last child ended."""
    cpu_seconds: float
    """CPU seconds of the busiest child (user + system): the work, whatever else the machine runs."""
    peak_bytes: int
    failures: list[str]
    stderr: str


MAX_DIGEST_BYTES = 64 << 20
"""Larger inputs (sparse files) are compared by size and modification time."""
MAX_SCAN_BYTES = 16 << 20
"""Bytes of each written file searched for a secret."""


def _digest(path: Path) -> str | None:
    try:
        info = path.stat()
    except OSError:
        return None
    if not path.is_file():
        return None
    if info.st_size > MAX_DIGEST_BYTES:
        return f"{info.st_size}:{info.st_mtime_ns}"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(folder: Path) -> dict[Path, tuple[int, int]]:
    out = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            try:
                info = path.lstat()
            except OSError:
                continue
            out[path] = (info.st_size, info.st_mtime_ns)
    return out


def _child(case: Case, out_fd: int, err_fd: int, limit_bytes: int, base_vm: int) -> None:
    """The forked child: never returns."""
    from recipe_mutations import run_cli_child

    run_cli_child(case.argv, out_fd, err_fd, base_vm + limit_bytes, folder=case.folder,
                  env={"PRIMUS_EXT_CACHE": str(case.folder / "cache"), **case.env}, streams=case.streams,
                  encoding=case.encoding)


def run_case(case: Case, *, limit_s: float = 5.0, limit_bytes: int = 1 << 30, wall_s: float | None = None) -> Result:
    """Run ``case`` (``case.concurrent`` copies at once) in forked children; every check of the module docstring.
    ``limit_s`` bounds each child's CPU time (user + system: the machine may be shared), ``wall_s`` (default
    4 x ``limit_s``) its wall-clock time: a child still running then is killed, a hang (a blocked read spends no
    CPU)."""
    wall = 4 * limit_s if wall_s is None else wall_s
    import tempfile
    import time

    from recipe_mutations import _rss_bytes, _vm_bytes

    before = {p: _digest(p) for p in case.inputs}
    tree = _tree(case.folder)
    outs = [tempfile.TemporaryFile() for _ in range(case.concurrent)]  # noqa: SIM115 (closed below)
    errs = [tempfile.TemporaryFile() for _ in range(case.concurrent)]  # noqa: SIM115
    base_rss, base_vm = _rss_bytes(), _vm_bytes()
    start = time.monotonic()
    pids = []
    for out, err in zip(outs, errs, strict=True):
        pid = os.fork()
        if pid == 0:
            _child(case, out.fileno(), err.fileno(), limit_bytes, base_vm)
        pids.append(pid)
    codes: list[int | None] = []
    peak, cpu, timed_out = 0, 0.0, False
    for pid in pids:
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() - start > wall:
                os.kill(pid, 9)
                _, status, usage = os.wait4(pid, 0)
                timed_out = True
                break
            time.sleep(0.005)
        code = os.waitstatus_to_exitcode(status)
        codes.append(code if code >= 0 and not timed_out else None)
        peak = max(peak, usage.ru_maxrss * 1024 - base_rss)
        cpu = max(cpu, usage.ru_utime + usage.ru_stime)
    seconds = time.monotonic() - start
    texts = []
    for handle in (*outs, *errs):
        handle.seek(0)
        texts.append(handle.read(MAX_SCAN_BYTES).decode("utf-8", "replace"))
        handle.close()
    stdout, stderr = "".join(texts[: case.concurrent]), "".join(texts[case.concurrent:])
    failures = []
    if "Traceback (most recent call last)" in stderr:
        failures.append("traceback")
    if timed_out:
        failures.append(f"hang: still running after {wall:g} s")
    elif cpu > limit_s:
        failures.append(f"over {limit_s:g} s")
    if peak > limit_bytes or "MemoryError" in stderr:
        failures.append(f"over {limit_bytes / 2**30:g} GiB")
    if any(c not in (0, 1, 2, 3, 4, *case.exits) for c in codes):  # 4: over capacity, within the memory model's error
        failures.append(f"exit {codes}")
    changed = [p.name for p, digest in before.items() if digest is not None and _digest(p) != digest]
    if changed:
        failures.append(f"input changed: {changed}")
    written = [p for p, stamp in _tree(case.folder).items() if tree.get(p) != stamp and p not in before]
    if any(".primus-ext-" in p.name for p in written):
        failures.append("temporary file left")
    for secret in case.secrets:
        where = ["stdout"] * (secret in stdout) + ["stderr"] * (secret in stderr) + [
            p.name for p in written if p.is_file() and not p.is_symlink()
            and secret.encode() in p.open("rb").read(MAX_SCAN_BYTES)]
        if where:
            failures.append(f"secret shown in {where}")
    if case.after is not None:
        failures += case.after(case)
    return Result(case=case, exit_codes=codes, seconds=seconds, cpu_seconds=cpu, peak_bytes=max(0, peak),
                  failures=failures,
                  stderr=stderr[-3000:])


__all__ = ["Result", "run_case"]
