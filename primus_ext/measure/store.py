"""The timing store: measured layer costs and fabric sweeps, persisted in SQLite, shareable as JSON lines.

Usage::

    store = TimingStore()                                   # $PRIMUS_EXT_CACHE/timings.sqlite
    store.record(measurement)                               # from primus_ext.measure.runner
    store.cost(shape)                                       # CostProvider: LayerCost | None
    TimingStore(device="NVIDIA H200").cost(shape)           # another machine's entries
    store.export("h200.jsonl"); TimingStore(other).import_("h200.jsonl")

Key of a layer entry: kind + measured shape key (``RankShape.key()``, which includes precision and
recompute) + target shape key + dtype + device name + library versions (torch, megatron-core, TE).
Shapes are stored as measured, eagerly with the framework's fused attention: a CUDA-graphed shape reads
its eager entry, a FlashAttention-2 shape none (``_as_run``).
``scale`` < 1 entries are CPU-sized stand-ins for their target: ``cost(target)`` returns them only
with ``accept_scaled=True``, and their ``source`` always says ``@scale=``. Each entry records how
and where it was measured (host, date, reps, spread, world, per-rank/distributed, notes); a
failed layer is stored with its reason (``status='failed'``) and never returned as a cost.

Torch-free: the projection and the tuner read stores without importing torch (give ``device``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from primus_ext.measure.store_open import add_missing_columns, open_database, store_errors
from primus_ext.model.costs import STAND_IN_SPEC, CostOrigin, LayerCost
from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.rank_shape import KIND_TRAITS, LayerArch, RankShape, shape_dict

MAX_IMPORT_BYTES = 256 << 20
"""256 MiB: an export holds one ~1-2 kB line per measured layer shape (~150 000 of them); a larger --import or
--store export is refused unread (it is read into an in-memory store)."""
MAX_IMPORT_LINE = 1 << 20
"""An export line longer than 1 MiB is not an export's (a sparse or binary file): refused, not read whole."""

if TYPE_CHECKING:
    from primus_ext.measure.single import Measurement

CACHE_ENV = "PRIMUS_EXT_CACHE"
STORE_FILE = "timings.sqlite"

_LAYER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("kind", "TEXT NOT NULL"), ("shape_key", "TEXT NOT NULL"), ("target_key", "TEXT NOT NULL"),
    ("dtype", "TEXT NOT NULL"), ("device", "TEXT NOT NULL"), ("versions", "TEXT NOT NULL"),
    ("scale", "REAL NOT NULL"), ("status", "TEXT NOT NULL"), ("reason", "TEXT"),
    ("fwd_ms", "REAL"), ("bwd_ms", "REAL"), ("wgrad_ms", "REAL"), ("recompute_ms", "REAL"),
    ("params", "INTEGER"), ("saved_bytes", "INTEGER"), ("peak_bytes", "INTEGER"),
    ("fwd_spread", "REAL"), ("bwd_spread", "REAL"), ("source", "TEXT"),
    ("host", "TEXT"), ("date", "TEXT"), ("reps", "INTEGER"), ("warmup", "INTEGER"),
    ("world", "INTEGER"), ("mode", "TEXT"), ("spec", "TEXT"), ("notes", "TEXT"),
    ("shape_json", "TEXT"), ("target_json", "TEXT"),
)
_LAYER_KEY = ("kind", "shape_key", "target_key", "dtype", "device", "versions")
_FABRIC_COLUMNS: tuple[tuple[str, str], ...] = (
    ("device", "TEXT NOT NULL"), ("world", "INTEGER NOT NULL"), ("backend", "TEXT NOT NULL"),
    ("op", "TEXT NOT NULL"), ("nbytes", "INTEGER NOT NULL"), ("versions", "TEXT NOT NULL"),
    ("time_ms", "REAL"), ("busbw_gbps", "REAL"), ("spread", "REAL"), ("reps", "INTEGER"),
    ("host", "TEXT"), ("date", "TEXT"),
)
_FABRIC_KEY = ("device", "world", "backend", "op", "nbytes", "versions")
_CALIBRATION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("key", "TEXT NOT NULL"), ("model", "TEXT NOT NULL"), ("gpu", "TEXT NOT NULL"), ("precision", "TEXT NOT NULL"),
    ("date", "TEXT"), ("host", "TEXT"), ("record", "TEXT NOT NULL"),
)
"""Calibration records from real runs (``primus_ext.calibration``): one per workload, its JSON in ``record``."""
_CLUSTER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("profile", "TEXT NOT NULL"), ("label", "TEXT NOT NULL"), ("date", "TEXT"), ("host", "TEXT"),
    ("record", "TEXT NOT NULL"),
)
"""Cluster calibration records (``primus_ext.calibration.cluster``): one per hardware profile and cluster label."""
_TABLES = {"layer_costs": (_LAYER_COLUMNS, _LAYER_KEY), "fabric": (_FABRIC_COLUMNS, _FABRIC_KEY),
           "calibrations": (_CALIBRATION_COLUMNS, ("key",)),
           "cluster_calibrations": (_CLUSTER_COLUMNS, ("profile", "label"))}
_COST_FIELDS = ("fwd_ms", "bwd_ms", "wgrad_ms", "recompute_ms", "params", "saved_bytes", "peak_bytes",
                "fwd_spread", "bwd_spread")
"""``LayerCost`` fields stored as columns of their own; its origin is the ``source`` column (``CostOrigin.label``)."""


_PRECISION_OF_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "fp8": "fp8", "fp4": "fp4"}
"""An entry's ``dtype`` (torch's name, or ``fp8`` / ``fp4`` under TE) as a ``RankShape.precision``."""


def _layer_cost(row: dict[str, Any], precision: str, target: RankShape | None = None) -> LayerCost:
    """An entry as a ``LayerCost`` whose source says what the projection must know of how a GPU ran it: in
    another precision than the shape's (``MEASURED_AS_TAG``), or with PyTorch stand-ins for TE
    (``STAND_IN_TAG``). A reduced-scale CPU entry standing in for ``target`` has its times carried from the shape
    it ran to ``target`` by the analytic ratio on the CPU profile (the measured fraction of the roofline is kept;
    read as they are, a 1/8-width layer's times gave MFUs of thousands of per cent)."""
    cost = LayerCost(**{f: row[f] for f in _COST_FIELDS}, origin=CostOrigin.parse(row["source"] or ""))
    if str(row.get("device", "")).startswith("cpu"):
        if target is not None and row.get("shape_key") != _as_run(target).key() and row.get("shape_json"):
            return _carried_to_target(cost, shape_from_dict(json.loads(row["shape_json"])), target)
        return cost  # its saved bytes are the local spec's (the memory model rescales them by origin.scale)
    ran = _PRECISION_OF_DTYPE.get(str(row.get("dtype")), precision)
    origin = replace(cost.origin, measured_as=ran if ran != precision else None,
                     stand_ins=row.get("spec") == STAND_IN_SPEC)
    return cost if origin == cost.origin else replace(cost, origin=origin)


def _carried_to_target(cost: LayerCost, measured: RankShape, target: RankShape) -> LayerCost:
    from primus_ext.hardware import load_gpu
    from primus_ext.model.analytic import analytic_cost
    from primus_ext.model.carry import scaled_by_ratio

    cpu = load_gpu("cpu")
    old, new = analytic_cost(replace(measured, precision=target.precision), cpu), analytic_cost(target, cpu)
    return scaled_by_ratio(cost, old, new, ";times carried to the full shape by the analytic ratio")


def default_store_path() -> Path:
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "primus-ext")
    return Path(root) / STORE_FILE


def shape_from_dict(data: dict[str, Any]) -> RankShape:
    """Inverse of ``rank_shape.shape_dict(shape)`` and ``dataclasses.asdict(shape)`` (also after a JSON round trip):
    the kind's traits the shape carries (``rank_shape.KIND_TRAITS``) come from its registered kind."""
    arch = dict(data["arch"])
    if arch.get("window_size") is not None:
        arch["window_size"] = tuple(arch["window_size"])
    fields = {k: v for k, v in data.items() if k not in ("arch", *KIND_TRAITS)}
    fields["recompute_modules"] = tuple(fields.get("recompute_modules", ()))
    fields["lora_targets"] = tuple(fields.get("lora_targets", ()))
    kind = get_kind(fields["kind"])
    arch["dims"] = kind.dims_from(arch.get("dims"))
    return RankShape(arch=LayerArch(**arch), attention=kind.attention, **fields)


@dataclass(frozen=True, kw_only=True)
class FabricPoint:
    """One collective at one message size on one device group."""

    device: str
    world: int
    backend: str
    op: str
    nbytes: int
    time_ms: float
    busbw_gbps: float
    versions: str = ""
    spread: float = 0.0
    reps: int = 0
    host: str = ""
    date: str = ""


def _as_run(shape: RankShape) -> RankShape:
    """The shape as the measurement runs it: eagerly (a store entry of a graphed shape is its eager cost, as
    the projection's notes say) with the framework's fused attention."""
    if shape.cuda_graph == "none" and shape.attention_kernel == "fused":
        return shape
    return replace(shape, cuda_graph="none", attention_kernel="fused")


class TimingStore:
    """SQLite-backed store of measured layer costs; implements ``CostProvider``.

    ``device``: whose entries ``cost`` returns (default: this machine's). ``versions``: the library
    versions preferred among several entries (default: this process's; ``"any"``: no preference,
    and no torch import). ``cost`` answers are memoised until the next write. ``reading``: opened read-only,
    nothing created or migrated (a command that only reads a store leaves its file as it was). Every SQLite failure
    is a ``store_open.StoreError`` naming the file and the fix (``store_open``).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, device: str | None = None,
                 accept_scaled: bool = False, versions: str | None = None, reading: bool = False):
        from primus_ext.files import note_in_place, note_input

        self.path = Path(path) if path is not None else default_store_path()
        self._device = device
        self._versions = versions
        self.accept_scaled = accept_scaled
        self._memo: dict[str, LayerCost | None] = {}
        if str(self.path) != ":memory:":
            note_input(self.path)  # no report of this command may be written over it
        # every SQLite failure a StoreError naming the file and the fix; an unreadable default store moved aside
        self._db, self.read_only = open_database(self.path, _TABLES, default=self.path == default_store_path(),
                                                 reading=reading)
        if not self.read_only and str(self.path) != ":memory:":
            note_in_place(self.path)  # written in place on purpose (bench --out): the output plan does not refuse it
        self._migrated: set[str] = set()

    # --- identity of this machine (lazy: importing torch only when no device was named) ---------
    @property
    def device(self) -> str:
        if self._device is None:
            from primus_ext.measure.shims import resolve_device
            from primus_ext.measure.single import device_name

            self._device = device_name(resolve_device())
        return self._device

    @property
    def versions(self) -> str:
        if self._versions is None:
            from primus_ext.measure.single import library_versions

            self._versions = library_versions()
        return self._versions

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> TimingStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- writing ----------------------------------------------------------------------------------
    def _put(self, table: str, row: dict[str, Any]) -> None:
        columns = [name for name, _ in _TABLES[table][0]]
        placeholders = ", ".join("?" for _ in columns)
        with store_errors(self.path):
            if table not in self._migrated:  # an older store gains the columns it lacks, on its first write
                add_missing_columns(self._db, table, _TABLES[table][0])
                self._migrated.add(table)
            self._db.execute(f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) VALUES ({placeholders})",
                             [row.get(c) for c in columns])

    def _commit(self) -> None:
        with store_errors(self.path):
            self._db.commit()

    def record(self, m: Measurement) -> None:
        """Store a ``single.Measurement`` (success or failure), replacing an entry with the same key."""
        cost = m.cost
        row: dict[str, Any] = dict(
            kind=m.target.kind, shape_key=_as_run(m.shape).key(), target_key=_as_run(m.target).key(), dtype=m.dtype,
            device=m.device, versions=m.versions, scale=m.scale, status="ok" if cost else "failed",
            reason=m.error, host=m.host, date=m.date, reps=m.reps, warmup=m.warmup, world=m.world,
            mode=m.mode, spec=m.spec, notes=json.dumps(list(m.notes)),
            shape_json=json.dumps(shape_dict(m.shape), sort_keys=True),
            target_json=json.dumps(shape_dict(m.target), sort_keys=True))
        if cost is not None:
            row.update({f: getattr(cost, f) for f in _COST_FIELDS}, source=cost.source)
        self._put("layer_costs", row)
        self._commit()
        self._memo.clear()

    def record_fabric(self, points: list[FabricPoint]) -> None:
        for p in points:
            self._put("fabric", asdict(p))
        self._commit()

    def record_calibration(self, *, key: str, model: str, gpu: str, precision: str, record: dict[str, Any],
                           date: str = "", host: str = "") -> None:
        """Store one calibration record (``primus_ext.calibration.CalibrationRecord.to_dict()``), replacing the
        workload's previous one."""
        self._put("calibrations", dict(key=key, model=model, gpu=gpu, precision=precision, date=date, host=host,
                                       record=json.dumps(record, sort_keys=True)))
        self._commit()

    def calibrations(self, *, model: str | None = None, gpu: str | None = None) -> list[dict[str, Any]]:
        """Calibration records (their JSON, parsed), optionally of one model fingerprint / GPU name."""
        where, args = ["1"], []
        for column, value in (("model", model), ("gpu", gpu)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        out = []
        for row in self._rows("calibrations", " AND ".join(where), tuple(args)):
            try:
                out.append(json.loads(row["record"], parse_constant=_refuse_constant))
            except (TypeError, ValueError) as err:  # a record edited or cut by hand: the others still apply
                print(f"warning: {self.path}: calibration record {row.get('key')!r} is not JSON ({err}); skipped "
                      f"(primus-ext calibrate --forget removes it)", file=sys.stderr)
        return out

    def forget_calibrations(self, *, model: str | None = None) -> int:
        """Remove calibration records (all, or one model's); returns how many."""
        with store_errors(self.path):
            cur = self._db.execute("DELETE FROM calibrations" + (" WHERE model = ?" if model else ""),
                                   (model,) if model else ())
        self._commit()
        return cur.rowcount

    def record_cluster(self, *, profile: str, label: str, record: dict[str, Any], date: str = "",
                       host: str = "") -> None:
        """Store one cluster record (``ClusterRecord.to_dict()``), replacing that profile and label's previous one."""
        self._put("cluster_calibrations", dict(profile=profile, label=label, date=date, host=host,
                                               record=json.dumps(record, sort_keys=True)))
        self._db.commit()

    def clusters(self, *, profile: str | None = None) -> list[dict[str, Any]]:
        """Cluster records (their JSON, parsed), optionally of one hardware profile."""
        rows = self._rows("cluster_calibrations", "profile = ?" if profile else "1", (profile,) if profile else ())
        return [json.loads(row["record"], parse_constant=_refuse_constant) for row in rows]

    def forget_clusters(self, *, profile: str | None = None, label: str | None = None) -> int:
        """Remove cluster records (all, one profile's, or one profile and label's); returns how many."""
        where = [(c, v) for c, v in (("profile", profile), ("label", label)) if v is not None]
        cur = self._db.execute("DELETE FROM cluster_calibrations" + (
            " WHERE " + " AND ".join(f"{c} = ?" for c, _ in where) if where else ""), tuple(v for _, v in where))
        self._db.commit()
        return cur.rowcount

    # --- reading ----------------------------------------------------------------------------------
    def _rows(self, table: str, where: str = "1", args: tuple[Any, ...] = ()) -> Iterator[dict[str, Any]]:
        with store_errors(self.path):
            try:
                cur = self._db.execute(f"SELECT * FROM {table} WHERE {where}", args)
            except sqlite3.OperationalError as err:
                if self.read_only and "no such table" in str(err):
                    return  # a read-only store without this table holds none of its rows
                raise
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        absent = dict.fromkeys(name for name, _ in _TABLES[table][0])  # an older store's missing columns read None
        for values in rows:
            yield {**absent, **dict(zip(names, values, strict=True))}

    def _best(self, rows: list[dict[str, Any]], precision: str) -> dict[str, Any] | None:
        """Prefer this process's library versions, then an entry that ran in the shape's precision on the real
        spec (a TE measurement over a bf16 stand-in run of an FP8 shape), then the largest scale, then the
        newest."""
        if not rows:
            return None
        return max(rows, key=lambda r: (r["versions"] == self._versions,
                                        _PRECISION_OF_DTYPE.get(str(r.get("dtype")), precision) == precision,
                                        r.get("spec") != STAND_IN_SPEC, r["scale"], r["date"] or ""))

    def entry(self, target: RankShape, *, scale: float = 1.0, ok_only: bool = True) -> dict[str, Any] | None:
        """This machine's row (device and library versions) for ``target`` measured at ``scale``."""
        where = "target_key = ? AND scale = ? AND device = ?" + (" AND status = 'ok'" if ok_only else "")
        args: tuple[Any, ...] = (_as_run(target).key(), scale, self.device)
        if self._versions != "any":
            where, args = where + " AND versions = ?", (*args, self.versions)
        rows = list(self._rows("layer_costs", where, args))
        return max(rows, key=lambda r: r["date"] or "") if rows else None

    def cost(self, shape: RankShape) -> LayerCost | None:
        """``CostProvider``: the cost of exactly ``shape`` on this store's device (see module doc); ``None``
        for a FlashAttention-2 shape (the measurement runs the framework's fused attention)."""
        if shape.attention_kernel != "fused":
            return None
        key = _as_run(shape).key()
        if key not in self._memo:
            rows = list(self._rows("layer_costs", "shape_key = ? AND device = ? AND status = 'ok'",
                                   (key, self.device)))
            if not rows and self.accept_scaled:
                rows = list(self._rows("layer_costs", "target_key = ? AND device = ? AND status = 'ok'",
                                       (key, self.device)))
            best = self._best(rows, shape.precision)
            self._memo[key] = None if best is None else _layer_cost(best, shape.precision, shape)
        return self._memo[key]

    def layer_rows(self) -> list[dict[str, Any]]:
        return list(self._rows("layer_costs"))

    def failures(self) -> list[dict[str, Any]]:
        return list(self._rows("layer_costs", "status = 'failed'"))

    def fabric(self, *, device: str | None = None, op: str | None = None) -> list[FabricPoint]:
        rows = self._rows("fabric", "device = ?" + (" AND op = ?" if op else ""),
                          (device or self.device, op) if op else (device or self.device,))
        return sorted((FabricPoint(**r) for r in rows), key=lambda p: (p.op, p.world, p.nbytes))

    # --- moving between machines ------------------------------------------------------------------
    def export(self, path: str | os.PathLike[str]) -> int:
        """Write every entry (both tables) as JSON lines, atomically (``files.atomic_output``: a killed or failed
        export leaves the old file whole); returns the number of lines."""
        from primus_ext.files import atomic_output

        n = 0
        with atomic_output(path, label="--export") as f:
            for table in _TABLES:
                for row in self._rows(table):
                    f.write(json.dumps({"table": table, **row}, sort_keys=True) + "\n")
                    n += 1
        return n

    def import_(self, path: str | os.PathLike[str]) -> int:
        """Read an ``export`` file, replacing entries with the same keys; returns the count. The file is read through
        ``files.open_input`` (a regular file of at most ``MAX_IMPORT_BYTES``)."""
        import io

        from primus_ext.files import load_json, open_input

        n = 0
        with io.TextIOWrapper(open_input(path, max_bytes=MAX_IMPORT_BYTES, what="--import file"),
                              encoding="utf-8") as f:
            while line := f.readline(MAX_IMPORT_LINE + 1):
                if len(line) > MAX_IMPORT_LINE:
                    raise ValueError(f"{path}: line {n + 1} is longer than {MAX_IMPORT_LINE:,} characters: not an "
                                     "export of a timing store")
                if line.strip():
                    row = load_json(line, parse_constant=_refuse_constant)
                    if not isinstance(row, dict):
                        raise ValueError(f"{path}: line {n + 1}: not a JSON object")
                    table = row.pop("table", None)
                    if table not in _TABLES:
                        raise ValueError(f"{path}: line {n + 1}: unknown table {table!r}")
                    self._put(table, row)
                    n += 1
        self._commit()
        self._memo.clear()
        return n


def _refuse_constant(name: str) -> float:
    """``json``'s hook for NaN / Infinity: a timing that is not a number is not a timing."""
    raise ValueError(f"{name} is not a finite number")


def _squash(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def device_for(store: TimingStore, gpu_name: str) -> str | None:
    """The store device whose entries describe the target GPU profile ``gpu_name`` (``h200`` matches
    ``NVIDIA H200``; ``cpu`` matches ``cpu:<model>``), or ``None``: a projection for an H200 must not
    read a CPU's (or another GPU's) timings just because this machine measured them."""
    devices = sorted({row["device"] for row in store.layer_rows()})
    return next((device for device in devices if device_matches(device, gpu_name)), None)


def device_matches(device: str, gpu_name: str) -> bool:
    """Whether timings of the store device ``device`` (``NVIDIA H200``, ``cpu:<model>``) describe the target GPU
    profile ``gpu_name`` (``h200``, ``cpu``)."""
    target, squashed = _squash(gpu_name), _squash(device)
    return (target == "cpu" and squashed.startswith("cpu")) or (target != "cpu" and target in squashed)


SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file (sqlite.org/fileformat.html, 1.3)."""


def open_store_file(path: str | os.PathLike[str], **kwargs: Any) -> TimingStore:
    """``TimingStore(path, **kwargs)`` over an SQLite store, or over a JSON-lines ``export`` read into memory
    (what a GPU machine sends back). A file that is neither is a ``PrimusExtError``."""
    from primus_ext.errors import PrimusExtError
    from primus_ext.files import InputRefused, open_input

    try:  # a regular file only (a FIFO would block the open), of any size (SQLite pages what it reads)
        with open_input(path, max_bytes=1 << 62, what="--store") as fh:
            sqlite = fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except InputRefused as err:
        raise PrimusExtError(str(err)) from None
    except OSError as err:
        raise PrimusExtError(f"--store {os.fspath(path)}: cannot be read ({err.strerror or err})") from None
    if not sqlite and Path(path) == default_store_path():  # the user's cache, not an export: moved aside if unreadable
        return TimingStore(path, **kwargs)
    store = TimingStore(path if sqlite else ":memory:", **(kwargs if sqlite else {**kwargs, "reading": False}))
    if not sqlite:
        try:
            store.import_(path)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, sqlite3.Error) as err:
            store.close()
            raise PrimusExtError(f"--store {os.fspath(path)}: not a timing store or its JSON-lines export "
                                 f"({type(err).__name__}: {err})") from None
    return store


def store_for_target(path: str | os.PathLike[str], gpu_name: str, *, device: str | None = None,
                     accept_scaled: bool = False) -> TimingStore | None:
    """A ``CostProvider`` over ``path`` (a store or its export) restricted to the target GPU's entries
    (``device`` given explicitly wins); ``None`` when the store holds nothing measured on that GPU. Reading
    only: a missing file is a ``PrimusExtError``, never a new empty store under a mistyped name."""
    if not os.path.isfile(path):
        from primus_ext.errors import PrimusExtError

        if os.path.exists(path):
            raise PrimusExtError(f"--store {os.fspath(path)}: not a regular file (a folder, a named pipe or a device); "
                                 "give a timing store written by `primus-ext bench`")
        raise PrimusExtError(f"--store {os.fspath(path)}: no such file (a timing store written by `primus-ext bench`)")
    store = open_store_file(path, device=device or "?", accept_scaled=accept_scaled, reading=True)
    if device is None:
        store._device = device_for(store, gpu_name)  # an export lives in this one in-memory store: no reopening
        if store._device is None:
            store.close()
            return None
    return store
