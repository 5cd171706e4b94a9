"""Peer benchmark (issue 11): cdc_sink against DuckDB, delta-rs, pyiceberg and pypaimon on
the same seeded data, systems interleaved by repeat.

Workload (benchmarks/peers/workload.py): a table of --rows rows x 20 columns (int64 key,
8 int64, 5 float64, 3 string, 2 decimal128(18, 2), 1 timestamp[us, UTC]) bulk-loaded,
then --batches micro-batches of --batch-events events: 90% updates of two columns (the
same two for a batch, drawn per batch) of existing keys, 5% inserts of new keys, 5%
deletes. ``--scale N`` multiplies rows and events per batch by N.

Every system runs in its own process in its own virtualenv (created by this script under
``.bench_venvs/`` with pinned versions from PyPI; cdc_sink runs in the project's
interpreter). Per system and repeat:

* ``write`` process: bulk load (k rows/s), then every micro-batch applied and committed
  (k events/s of the median batch), bytes on disk after the run;
* ``read`` process (fresh: nothing in memory): cold read of the whole table at the version
  after micro-batch --tt-batch (open + read, seconds), then full-content digests of that
  version and of the final version, which must equal the digests the generator computed
  from its own model of the table -- the script fails otherwise.

pyiceberg, pypaimon and Spark (``--systems spark_delta``: Delta MERGE through delta-spark,
not in the default set) need tens of seconds per micro-batch here, so they apply only the
first --slow-batches batches (their final-version digest is checked at their last batch);
their median is over the batches they ran. DuckDB keeps no old versions: its read is of
the latest version.

Run:  .venv/bin/python benchmarks/peers.py [--repeats 3] [--systems cdc_sink,duckdb,...]
      [--scale 1] [--rows 1000000] [--batches 20] [--batch-events 50000]
      [--work /tmp/cdc_peers] [--cdc-sink HEAD|tree|<commit>] [--json out.json]
      [--markdown out.md] [--plot docs/peers.png]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from typing import Any

import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKERS = os.path.join(HERE, "peers")
sys.path.insert(0, WORKERS)

from workload import generate  # noqa: E402  (benchmarks/peers/workload.py)

_ARROW = "pyarrow==22.0.0"
_NUMPY = "numpy==2.4.6"
#: system -> (label, worker module, pinned requirements; None: the project's interpreter)
SYSTEMS: dict[str, tuple[str, str, list[str] | None]] = {
    "cdc_sink": ("cdc_sink", "cdc_sink_worker.py", None),
    # not in the default --systems: the same with other page codecs (WORKER_ENV); zstd
    # pages and WAL are the default since 2026-11-28, "raw" the default before
    "cdc_sink_lz4": ("cdc_sink, lz4 pages", "cdc_sink_worker.py", None),
    "cdc_sink_zstd": ("cdc_sink, zstd pages and WAL", "cdc_sink_worker.py", None),
    "cdc_sink_raw": ("cdc_sink, uncompressed pages, lz4 WAL", "cdc_sink_worker.py", None),
    "duckdb": ("DuckDB ON CONFLICT", "duckdb_worker.py", ["duckdb==1.5.6", _ARROW, _NUMPY]),
    "delta": ("delta-rs MERGE", "delta_worker.py", ["deltalake==1.6.6", _ARROW, _NUMPY]),
    "paimon": (
        "Paimon PK (pypaimon)",
        "paimon_worker.py",
        # pypaimon 2.1.0 requires pyarrow < 20
        ["pypaimon==2.1.0", "pyarrow==19.0.1", _NUMPY],
    ),
    "iceberg": (
        "pyiceberg upsert",
        "iceberg_worker.py",
        ["pyiceberg[sql-sqlite,pyarrow]==0.12.0", "SQLAlchemy==2.1.9", _ARROW, _NUMPY],
    ),
    # not in the default --systems: needs Java 17+ and Delta's jars from Maven Central
    "spark_delta": (
        "Spark Delta MERGE",
        "spark_delta_worker.py",
        ["pyspark==4.2.0", "delta-spark==4.4.0", _ARROW, _NUMPY, "pandas==2.3.3"],
    ),
}
#: extra environment of a system's worker processes
WORKER_ENV = {
    "cdc_sink_lz4": {"CDC_SINK_BENCH_PAGE_COMPRESSION": "lz4"},
    "cdc_sink_zstd": {
        "CDC_SINK_BENCH_PAGE_COMPRESSION": "zstd",
        "CDC_SINK_BENCH_WAL_COMPRESSION": "zstd",
    },
    "cdc_sink_raw": {
        "CDC_SINK_BENCH_PAGE_COMPRESSION": "none",
        "CDC_SINK_BENCH_WAL_COMPRESSION": "lz4",
    },
}
DEFAULT_SYSTEMS = ["cdc_sink", "duckdb", "delta", "paimon", "iceberg"]
#: systems whose CPU seconds are not the work's (it runs in a JVM)
JVM = {"spark_delta"}
PLOT_REQUIREMENTS = ["matplotlib==3.10.7", _NUMPY]
SLOW = {"iceberg", "paimon", "spark_delta"}


def add_code_args(ap: argparse.ArgumentParser) -> None:
    """``--venvs`` (where the peers' virtual environments are kept) and ``--cdc-sink``
    (the code measured: a commit exported with git archive, or ``tree``), read by
    :func:`venv_python` and :func:`export_cdc_sink`."""
    ap.add_argument("--venvs", default=os.path.join(ROOT, ".bench_venvs"))
    ap.add_argument(
        "--cdc-sink",
        default="HEAD",
        help="the cdc_sink code measured: a commit (default HEAD, exported with "
        "git archive) or 'tree' (the working tree as it is)",
    )


def venv_python(name: str, requirements: list[str] | None, cache: str) -> str:
    """The interpreter of a virtualenv holding ``requirements`` (created on first use)."""
    if requirements is None:
        return sys.executable
    tag = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:10]
    path = os.path.join(cache, f"{name}-{tag}")
    python = os.path.join(path, "bin", "python")
    marker = os.path.join(path, ".installed")
    if not os.path.exists(marker):
        print(f"creating {path}: {' '.join(requirements)}", flush=True)
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", path], check=True)
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
            check=True,
        )
        with open(marker, "w") as f:
            f.write("\n".join(requirements))
    return python


def export_cdc_sink(rev: str, work: str) -> tuple[str, str]:
    """The directory to put first on ``PYTHONPATH`` for the cdc_sink worker, and a
    description of the code measured: ``rev`` ``tree`` is the working tree as it is;
    otherwise the package at that commit (``git archive``), so others' uncommitted edits
    are not measured."""
    head = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if rev == "tree":
        dirty = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "cdc_sink"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return ROOT, f"working tree at {head}" + (" (with uncommitted changes)" if dirty else "")
    commit = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    dest = os.path.join(work, "cdc_sink_src")
    os.makedirs(dest, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", ROOT, "archive", commit, "cdc_sink"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    built = build_extensions(dest, commit)
    return dest, f"commit {commit} (C extensions built: {', '.join(built) or 'none'})"


def build_extensions(dest: str, commit: str) -> list[str]:
    """Compiles the C extensions that ``pyproject.toml`` at ``commit`` declares into the
    package exported under ``dest`` (``git archive`` holds sources, not the built modules
    of the working tree; without this the measured code would run its numpy fallbacks).
    Returns the module names built; a failed compile raises."""
    text = subprocess.run(
        ["git", "-C", ROOT, "show", f"{commit}:pyproject.toml"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    modules = tomllib.loads(text).get("tool", {}).get("setuptools", {}).get("ext-modules", [])
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = []
    for ext in modules:
        out = os.path.join(dest, *ext["name"].split(".")) + suffix
        sources = [os.path.join(dest, src) for src in ext["sources"]]
        cmd = ["cc", "-shared", "-fPIC", *ext.get("extra-compile-args", []), f"-I{include}"]
        subprocess.run([*cmd, *sources, "-o", out], check=True)
        built.append(ext["name"].rsplit(".", 1)[-1])
    return built


def run(
    python: str, worker: str, args: list[str], out: str, path: str, env: dict[str, str]
) -> dict[str, Any]:
    """Runs one worker phase in its own process (``path`` first on ``PYTHONPATH``, ``env``
    added to the environment); its JSON result."""
    cmd = [python, os.path.join(WORKERS, worker), *args, "--out", out]
    env = dict(os.environ, PYTHONPATH=path, **env)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    with open(out) as f:
        return json.load(f)


def measure(
    system: str,
    python: str,
    data: str,
    work: str,
    expected: dict[str, Any],
    args: argparse.Namespace,
    path: str,
) -> dict[str, Any]:
    """One repeat of one system: the write process, then the read process."""
    _, worker, _ = SYSTEMS[system]
    tdir = os.path.join(work, "tables", system)
    shutil.rmtree(tdir, ignore_errors=True)
    load0 = os.getloadavg()[0]
    limit = min(args.slow_batches, args.batches) if system in SLOW else args.batches
    w = run(
        python,
        worker,
        ["write", "--data", data, "--dir", tdir, "--max-batches", str(limit)],
        os.path.join(work, f"{system}_write.json"),
        path,
        WORKER_ENV.get(system, {}),
    )
    tt_version = None if system == "duckdb" else w["versions"][args.tt_batch - 1]
    final = w["versions"][-1]
    read_args = ["read", "--data", data, "--dir", tdir]
    if tt_version is not None:
        read_args += ["--version", json.dumps(tt_version), "--digest-version", json.dumps(final)]
    r = run(
        python,
        worker,
        read_args,
        os.path.join(work, f"{system}_read.json"),
        path,
        WORKER_ENV.get(system, {}),
    )
    load1 = os.getloadavg()[0]
    shutil.rmtree(tdir, ignore_errors=True)
    batch_rates = [n / s for n, s in zip(w["batch_events"], w["batch_s"], strict=True)]
    cpu_rates = [n / max(s, 1e-9) for n, s in zip(w["batch_events"], w["batch_cpu_s"], strict=True)]
    checks = {}
    if tt_version is not None:
        checks[f"after batch {args.tt_batch}"] = (
            r["digests"][json.dumps(tt_version)] == expected["after_batch"][str(args.tt_batch)]
        )
    final_digest = r["digests"][json.dumps(None if tt_version is None else final)]
    checks[f"after batch {len(w['versions'])}"] = (
        final_digest == expected["after_batch"][str(len(w["versions"]))]
    )
    return {
        "load_rows_per_s": w["load_rows"] / w["load_s"],
        "load_s": w["load_s"],
        "apply_median_events_per_s": statistics.median(batch_rates),
        "apply_median_events_per_cpu_s": statistics.median(cpu_rates),
        "load_rows_per_cpu_s": w["load_rows"] / w["load_cpu_s"],
        "read_cpu_s": r["read_cpu_s"],
        "batch_s": w["batch_s"],
        "batches": len(w["versions"]),
        "read_s": r["read_s"],
        "read_rows": r["read_rows"],
        "time_travel": tt_version is not None,
        "disk_bytes": w["disk_bytes"],
        "checks": checks,
        "loadavg": [load0, load1],
    }


def summarize(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Medians over repeats, per system."""
    out = {}
    for system, runs in results.items():
        med = {
            k: statistics.median(r[k] for r in runs)
            for k in (
                "load_rows_per_s",
                "apply_median_events_per_s",
                "read_s",
                "disk_bytes",
                "load_rows_per_cpu_s",
                "apply_median_events_per_cpu_s",
                "read_cpu_s",
            )
        }
        med["batches"] = runs[0]["batches"]
        med["time_travel"] = runs[0]["time_travel"]
        med["checks_ok"] = all(all(r["checks"].values()) for r in runs)
        med["repeats"] = len(runs)
        med["jvm"] = system in JVM
        out[system] = med
    return out


def markdown(summary: dict[str, dict[str, Any]], batch_events: int) -> str:
    """The results as a markdown table (one column per system)."""
    systems = list(summary)
    head = "| per system | " + " | ".join(SYSTEMS[s][0] for s in systems) + " |"
    rows = [head, "|---|" + "---|" * len(systems)]

    def row(label: str, cell: Any) -> None:
        rows.append(f"| {label} | " + " | ".join(cell(summary[s]) for s in systems) + " |")

    row(
        f"apply + commit, k events/s (median batch of {batch_events:,})",
        lambda m: f"{m['apply_median_events_per_s'] / 1e3:,.1f}",
    )
    row("micro-batches applied", lambda m: str(m["batches"]))
    row("bulk load, k rows/s", lambda m: f"{m['load_rows_per_s'] / 1e3:,.0f}")
    row(
        "cold read of an older version (fresh process), s",
        lambda m: (
            f"{m['read_s']:.2f}"
            if m["time_travel"]
            else f"– (no time travel; latest: {m['read_s']:.2f})"
        ),
    )
    row(
        "apply, k events per CPU second (median batch)",
        lambda m: "– (JVM)" if m["jvm"] else f"{m['apply_median_events_per_cpu_s'] / 1e3:,.1f}",
    )
    row(
        "bulk load, k rows per CPU second",
        lambda m: "– (JVM)" if m["jvm"] else f"{m['load_rows_per_cpu_s'] / 1e3:,.0f}",
    )
    row("cold read, CPU s", lambda m: "– (JVM)" if m["jvm"] else f"{m['read_cpu_s']:.2f}")
    row("on disk after the run, MB", lambda m: f"{m['disk_bytes'] / 1e6:,.0f}")
    row("digests equal the model's", lambda m: "yes" if m["checks_ok"] else "**NO**")
    return "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--systems",
        default=",".join(DEFAULT_SYSTEMS),
        help=f"comma-separated, of {', '.join(SYSTEMS)}",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--scale",
        type=int,
        default=1,
        help="multiply --rows and --batch-events by this (a larger run)",
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-events", type=int, default=50_000)
    ap.add_argument(
        "--tt-batch",
        type=int,
        default=2,
        help="the time-travel read is of the version after this micro-batch",
    )
    ap.add_argument(
        "--slow-batches",
        type=int,
        default=3,
        help="micro-batches pyiceberg and pypaimon apply (slow)",
    )
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--work", default="/tmp/cdc_peers", help="data and tables (deleted after)")
    add_code_args(ap)
    ap.add_argument("--json", default=None, help="write every measurement here")
    ap.add_argument("--markdown", default=None, help="write the markdown table here")
    ap.add_argument("--plot", default=None, help="write the PNG plot here")
    args = ap.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown systems {sorted(unknown)}; known: {sorted(SYSTEMS)}")
    rows, events = args.rows * args.scale, args.batch_events * args.scale
    if not 1 <= args.tt_batch <= min(args.batches, args.slow_batches):
        ap.error("--tt-batch must be within the batches every system applies")

    pythons = {s: venv_python(s, SYSTEMS[s][2], args.venvs) for s in systems}
    data = os.path.join(args.work, "data")
    shutil.rmtree(args.work, ignore_errors=True)
    cdc_path, cdc_code = export_cdc_sink(args.cdc_sink, args.work)
    print(f"cdc_sink: {cdc_code}", flush=True)
    t0 = time.perf_counter()
    expected = json.loads(
        json.dumps(
            generate(
                data, rows, args.batches, events, args.tt_batch, args.seed, [args.slow_batches]
            )
        )
    )
    print(
        f"data: {rows:,} rows, {args.batches} x {events:,} events "
        f"({time.perf_counter() - t0:.1f}s to generate)",
        flush=True,
    )

    results: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    started = time.time()
    for rep in range(args.repeats):
        order = systems[rep % len(systems) :] + systems[: rep % len(systems)]
        for s in order:
            m = measure(
                s,
                pythons[s],
                data,
                args.work,
                expected,
                args,
                cdc_path if s.startswith("cdc_sink") else ROOT,
            )
            results[s].append(m)
            print(
                f"repeat {rep + 1} {s}: load {m['load_rows_per_s'] / 1e3:,.0f}k rows/s, "
                f"apply median {m['apply_median_events_per_s'] / 1e3:,.1f}k events/s "
                f"({m['batches']} batches), read {m['read_s']:.2f}s, "
                f"disk {m['disk_bytes'] / 1e6:,.0f} MB, checks {m['checks']}, "
                f"load average {m['loadavg'][0]:.2f} -> {m['loadavg'][1]:.2f}",
                flush=True,
            )
    summary = summarize(results)
    loads = [x for runs in results.values() for r in runs for x in r["loadavg"]]
    table = markdown(summary, events)
    info = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}",
        "command": " ".join([os.path.relpath(sys.executable, ROOT), *sys.argv]),
        "cdc_sink": cdc_code,
        "rows": rows,
        "batches": args.batches,
        "batch_events": events,
        "repeats": args.repeats,
        "wall_s": time.time() - started,
        "loadavg_1min": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
        "versions": {s: SYSTEMS[s][2] for s in systems},
    }
    print()
    print(table)
    print(
        f"load average (1 min) during the run: min {min(loads):.2f}, median "
        f"{statistics.median(loads):.2f}, max {max(loads):.2f}; wall {info['wall_s']:.0f}s"
    )
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    out_json = args.json or os.path.join(args.work, "results.json")
    with open(out_json, "w") as f:
        json.dump({"info": info, "summary": summary, "runs": results}, f, indent=1)
    if args.plot:
        plot_python = venv_python("plot", PLOT_REQUIREMENTS, args.venvs)
        subprocess.run(
            [
                plot_python,
                os.path.join(WORKERS, "plot.py"),
                out_json,
                args.plot,
                json.dumps({s: SYSTEMS[s][0] for s in systems}),
            ],
            check=True,
        )
        print(f"plot: {args.plot}")
    shutil.rmtree(os.path.join(args.work, "data"), ignore_errors=True)
    if not all(m["checks_ok"] for m in summary.values()):
        bad = [s for s, m in summary.items() if not m["checks_ok"]]
        sys.exit(f"FAILED: the content of {bad} differs from the model's")


if __name__ == "__main__":
    main()
