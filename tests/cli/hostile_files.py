"""Hostile generators for the data files a user hands the CLI (issue 56 part 1): GPU profiles on
``$PRIMUS_EXT_PROFILES`` (``profiles``), the validation / archs / hardware CSVs of ``validate`` (``csv``) and the
training logs of ``calibrate RECIPE LOG`` (``logfields``: the fields of the lines, where ``hostile_cases.logs`` varies
their count and shape). Each returns a ``hostile_cases.Case``; ``benchmarks/hostile_campaign.py --surface profiles``
runs one surface alone.

Structure (a list where a mapping goes, keys repeated or missing, ragged rows), sizes (100 000 keys or rows, a 3 MB
line, a sparse 1 TiB file), encodings (a BOM, UTF-16, Latin-1, NUL bytes, CR endings), numbers at every edge
(``.nan``, ``1e999``, 5 001 digits, ``-0.0``, booleans) and files that are not files (a FIFO, a folder, a symlink
loop, ``/proc/self/status``).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from hostile_cases import Case, _copy_recipe, _presets, log_text
from hostile_surfaces import HUGE_INT, _not_a_file

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "primus_ext" / "hardware" / "profiles" / "h100.yaml"
EDGE_YAML = (".nan", ".inf", "-.inf", "1e999", HUGE_INT, "-1", "0", "-0.0", "1e-320", "true", "null", "'fast'", "[]",
             "{}", "0x10", "1_000", "4.5e15", "~", "2024-01-01")
PROFILE_KEYS = ("bf16_dense_tflops", "fp8_dense_tflops", "hbm_gb", "hbm_tbps", "scaleup_gbps_per_direction",
                "scaleup_domain", "nic_gbit_per_gpu", "gpus_per_node", "tdp_w", "sfu_exp_per_s", "gemm_max",
                "attention", "scaleout_link", "moe_layer_overhead_s", "name", "family", "vendor", "measured")


def _encode(rng: random.Random, text: str) -> bytes:
    """``text`` in a hostile encoding (or UTF-8 with a twist)."""
    kind = rng.choice(("bom", "utf16", "latin1", "nul", "cr", "crlf", "invalid"))
    if kind == "bom":
        return "\ufeff".encode() + text.encode()
    if kind == "utf16":
        return text.encode("utf-16")
    if kind == "latin1":
        return (text + "# caf\xe9 \xb5s\n").encode("latin-1")
    if kind == "nul":
        at = rng.randrange(len(text))
        return text[:at].encode() + b"\x00" * rng.choice((1, 4096)) + text[at:].encode()
    if kind == "cr":
        return text.replace("\n", "\r").encode()
    if kind == "crlf":
        return text.replace("\n", "\r\n").encode()
    return text.encode() + b"\xff\xfe\xc3(\n"


def _profile_text(rng: random.Random, kind: str, name: str) -> str:
    text = PROFILE.read_text().replace("name: h100", f"name: {name}")
    if kind == "number":
        key = rng.choice(PROFILE_KEYS)
        text = re.sub(rf"^(\s*{key}:)[^\n#]*", lambda m: f"{m.group(1)} {rng.choice(EDGE_YAML)} ", text, count=1,
                      flags=re.M)
    elif kind == "missing":
        key = rng.choice(PROFILE_KEYS)
        text = re.sub(rf"^\s*{key}:[^\n]*\n", "", text, count=1, flags=re.M)
    elif kind == "structure":
        text = rng.choice(("[1, 2]\n", "null\n", "", "name: [a]\n", text + "efficiency: [1]\n",
                           text.replace("efficiency:", "efficiency: 3\nold:"), text + "\nbf16_dense_tflops: 1\n",
                           "a: &a [*a]\n" + text, "x: " + "[" * 10_000 + "]" * 10_000 + "\n" + text,
                           text + "\n---\nname: other\n", "!!python/object:os.system {}\n",
                           text.replace("efficiency:", "efficiency: &e\n  <<: *e\nold:")))
    elif kind == "size":
        text = rng.choice((text + "".join(f"zz_{i}: {i}\n" for i in range(100_000)),
                           "# " + "x" * 3_000_000 + "\n" + text, text + "efficiency:\n" + "  gemm_max: 0.5\n" * 50_000))
    return text


def profiles(rng: random.Random, folder: Path) -> Case:
    """``project`` / ``tune`` / ``compare`` on a cluster whose profile (a new name, or one shadowing a shipped one) on
    ``$PRIMUS_EXT_PROFILES`` is hostile, or with ``$PRIMUS_EXT_PROFILES`` itself odd."""
    recipe = _copy_recipe(folder)
    where = folder / "profiles"
    where.mkdir()
    name = rng.choice(("zz_gpu", "h100", "H100", "a" * 250))
    path = where / f"{name}.yaml"
    kind = rng.choice(("number", "number", "missing", "structure", "size", "encoding", "file", "variable"))
    variable = str(where)
    if kind == "encoding":
        path.write_bytes(_encode(rng, _profile_text(rng, "plain", name)))
    elif kind == "file":
        swapped = _not_a_file(rng, path)
        if swapped is None:
            path.symlink_to(path.name)  # a loop
        elif swapped != path:
            path.symlink_to(swapped)
    elif kind == "variable":
        path.write_text(_profile_text(rng, "plain", name))
        variable = rng.choice((str(path), str(folder / "nowhere"), ":::", "/proc", "/dev/null", "profiles",
                               ":".join([str(where)] * 5000), "\x7f\t ", str(where) + "/../profiles/"))
    else:
        path.write_text(_profile_text(rng, kind, name))
    command = rng.choice(("project", "project", "memory", "tune", "compare", "recipe"))
    argv = {"project": ["project", str(recipe), "--cluster", name, "--nodes", "1"],
            "memory": ["project", str(recipe), "--cluster", name, "--memory-only", "--json", "-"],
            "tune": ["tune", str(recipe), "--cluster", name, "--nodes", "1", "--budget", "2", "--no-regret"],
            "compare": ["compare", str(recipe), "micro_batch_size=1", "--cluster", name, "--nodes", "1"],
            "recipe": ["recipe", "show", str(recipe)]}[command]
    kept = [path] if path.is_file() and not path.is_symlink() else []
    return Case(f"profiles/{kind}-{command}", argv, folder, inputs=[recipe, *_presets(folder), *kept],
                env={"PRIMUS_EXT_PROFILES": variable})


ARCH_HEADER = ("name,num_layers,hidden,ffn_hidden,num_heads,num_kv_heads,vocab,num_experts,topk,moe_ffn_hidden,"
               "shared_experts,first_k_dense,mla(yes/no),notes\n")
ARCH_ROW = "M,8,1024,4096,16,4,32000,,,,,,no,\n"
RUN_HEADER = ("source,source_date,model,seq_len,precision,gpu,num_gpus,tp,pp,vpp,cp,ep,etp,dp,mbs,gbs,extra_flags,"
              "tokens_per_sec_per_gpu,tflops_per_gpu,mfu,step_time_s,notes\n")
RUN_ROW = "S,2025,M,4096,BF16,H100,16,1,1,,1,,,16,1,64,,20000,,,,\n"
HW_HEADER = ("gpu,bf16_dense_tflops,fp8_dense_tflops,fp4_dense_tflops,hbm_gb,hbm_tbps,scaleup_gbps_per_direction,"
             "scaleup_gbps_bidirectional,scaleup_domain,nic_gbps_per_gpu,tdp_w,sources,notes\n")
HW_ROW = "H100_SXM5_80GB,989,1979,,80,3.35,450,900,8,400,700,datasheet,\n"
EDGE_CSV = ("nan", "inf", "-inf", "1e999", HUGE_INT, "-1", "0", "-0.0", "1e-320", "true", "x", "", " 8 ", "1,5",
            "0x10", "8.5", "１６")


def _csv_text(rng: random.Random, header: str, row: str, kind: str) -> str:
    cells = row.rstrip("\n").split(",")
    if kind == "number":
        at = rng.randrange(len(cells))
        value = rng.choice(EDGE_CSV)
        cells[at] = f'"{value}"' if "," in value else value
        return header + ",".join(cells) + "\n"
    if kind == "structure":
        return rng.choice((header, "", row, header + row.replace(",", ";"), header + ",".join(cells[:3]) + "\n",
                           header + row.rstrip("\n") + ",extra,extra\n", header.replace("\n", ",gpu\n") + row,
                           header.rstrip("\n") + "," + ",".join(f"c{i}" for i in range(10_000)) + "\n" + row,
                           header + '"unclosed,' + row, header + row + '"a\nb",' + row,
                           header + "\n\n\n" + row, "\n".join(header.split(",")) + row))
    if kind == "size":
        return rng.choice((header + row * rng.choice((2_000, 20_001)),
                           header + row.replace(",", "," + "x" * 3_000_000, 1),
                           header + "".join(row.replace("M,", f"M{i},", 1) for i in range(5_000))))
    return header + row


def validation_csvs(rng: random.Random, folder: Path) -> Case:
    """``validate`` over a measurements CSV, its archs and its hardware CSV, one of them hostile."""
    runs, archs, hardware = folder / "runs.csv", folder / "archs.csv", folder / "hw.csv"
    files = {"runs": (runs, RUN_HEADER, RUN_ROW), "archs": (archs, ARCH_HEADER, ARCH_ROW),
             "hardware": (hardware, HW_HEADER, HW_ROW)}
    target = rng.choice(tuple(files))
    kind = rng.choice(("number", "number", "structure", "size", "encoding", "file"))
    for which, (path, header, row) in files.items():
        if which != target:
            path.write_text(header + row)
        elif kind == "encoding":
            path.write_bytes(_encode(rng, header + row))
        elif kind == "file":
            swapped = _not_a_file(rng, path)
            if swapped is None:
                path.symlink_to(path.name)
            elif swapped != path:
                path.symlink_to(swapped)
        else:
            path.write_text(_csv_text(rng, header, row, kind))
    argv = ["validate", str(runs), "--archs", str(archs), "--hardware", str(hardware), "--jobs", "1",
            *rng.choice(([], ["--json", str(folder / "v.json")], ["--json", "-"], ["--fit"], ["--worst", "0"]))]
    inputs = [p for p, _, _ in files.values() if p.is_file() and not p.is_symlink() and p.stat().st_size < 1 << 30]
    return Case(f"csv/{target}-{kind}", argv, folder, inputs=inputs)


LOG_FIELDS = {"elapsed time per iteration (ms)": r"\d+\.\d", "global batch size": r"\s*\d+",
              "consumed samples": r"\s*\d+", "throughput per GPU (TFLOP/s/GPU)": r"[\d.]+",
              "lm loss": r"[\dE+.-]+", "iteration": r"\s*\d+/\s*\d+"}


def log_fields(rng: random.Random, folder: Path) -> Case:
    """``calibrate RECIPE LOG`` over a log whose fields hold numbers at every edge, or in a hostile encoding."""
    recipe = _copy_recipe(folder)
    log = folder / "train.log"
    text = log_text(rng.choice((5, 50, 500)), rng=rng)
    kind = rng.choice(("field", "field", "field-all", "encoding", "interleaved"))
    if kind in ("field", "field-all"):
        field = rng.choice(tuple(LOG_FIELDS))
        value = rng.choice(("nan", "inf", "-1", "0", "0.0", "1e999", HUGE_INT, "-0.0", "1e-320", "x", "",
                            "1/0", "0/0", "5/3", "-5/-3", "١٢٣"))
        count = 0 if kind == "field-all" else rng.randint(1, 3)
        text = re.sub(rf"({re.escape(field)}: ){LOG_FIELDS[field]}", lambda m: m.group(1) + value, text, count=count)
        log.write_text(text)
    elif kind == "encoding":
        log.write_bytes(_encode(rng, text))
    else:
        lines = text.splitlines(keepends=True)
        log.write_text("".join(line[: len(line) // 2] + "\n" + line[len(line) // 2:] if i % 2 else line
                               for i, line in enumerate(lines)))
    argv = ["calibrate", str(recipe), str(log), "--analytic",
            *rng.choice((["--dry-run"], ["--dry-run", "--json", "-"], ["--json", str(folder / "c.json")]))]
    return Case(f"logfields/{kind}", argv, folder, inputs=[recipe, log, *_presets(folder)])


__all__ = ["log_fields", "profiles", "validation_csvs"]
