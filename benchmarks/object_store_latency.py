"""Tables on object storage at a real store's latency (issue 50): cdc_sink and delta-rs on
the same S3 endpoint through the same latency-injecting proxy.

Starts a SeaweedFS S3 server on 127.0.0.1 (the test kit's ``s3`` module, as
``benchmarks/object_store.py`` does) and, for each --latencies value, puts the test kit's
:class:`~cdc_sink_testkit.s3.LatencyProxy` in front of it: every byte is forwarded
``latency`` ms after it arrived, in each direction (Toxiproxy's ``latency`` toxic), so a
request costs one round trip of ``2 x latency`` more than on the bare server. The
proxy also counts the HTTP requests per kind, which gives requests per commit the same
way for both systems.

Workload: the peer benchmark's (``benchmarks/peers/workload.py``: --rows rows x 20
columns bulk-loaded, then --batches micro-batches of --batch-events events, 90% updates of
two columns, 5% inserts, 5% deletes, a key at most once per batch), written once as Arrow
files. Each system runs in a fresh process of its own (cdc_sink in the project's
interpreter; delta-rs in the virtualenv ``benchmarks/peers.py`` pins, ``deltalake``
1.6.6), on a new table per repeat and latency:

  * ``cdc_sink``: the peer worker's ``Table.apply`` of each batch (partial updates), one
    bucket, default options;
  * ``delta_merge``: the peer worker's ``MERGE`` on ``id`` (matched updates set the two
    columns, matched deletes delete, unmatched inserts insert);
  * ``delta_append``: ``write_deltalake(table, mode="append")`` of each batch's rows to
    the ``DeltaTable`` the writer holds (no key lookup: the cheapest commit delta-rs has,
    not the same table content).

Figures per system and latency (medians of --repeat repeats): commit latency p50/p99
over the micro-batches and requests per commit (mean; the proxy's count); the open of
the table by a fresh process (``open_table`` / ``DeltaTable(uri)``), its seconds and
requests; a cold read of the newest version and of the version after micro-batch
--old-batch, each by a fresh open then a full read (``read(version=...)`` /
``DeltaTable(uri, version=v).to_pyarrow_table()``), seconds and requests. The newest and
the old version read back must equal the workload model's digests (cdc_sink, delta_merge).
Connecting is not delayed (as with Toxiproxy), so a new connection costs no round trip:
a real store adds a TCP and TLS handshake per connection.

Run:  .venv/bin/python benchmarks/object_store_latency.py [--latencies 0,10,30]
      [--systems cdc_sink,delta_merge,delta_append] [--rows 50000] [--batches 12]
      [--batch-events 2000] [--old-batch 3] [--repeat 3] [--venvs .bench_venvs]
      [--cdc-sink HEAD|tree|<commit>] [--proxy testkit|toxiproxy] [--json out.json]

``--proxy toxiproxy`` builds Toxiproxy's server with ``go install`` (from the Go module
proxy, into ``<venvs>/toxiproxy``) and puts it in front instead, with a ``latency`` toxic
on each direction, and the test kit's proxy at 0 ms behind it to count the requests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKERS = os.path.join(HERE, "peers")
sys.path.insert(0, HERE)
sys.path.insert(0, WORKERS)

SYSTEMS = ("cdc_sink", "delta_merge", "delta_append")
STEPS = ("open", "read_newest", "read_old")
"""The one-off steps a worker marks (besides ``load`` and each ``commit``)."""
KINDS = ("GET", "PUT", "POST", "DELETE", "HEAD", "LIST")
"""The request kinds the proxy counts (:data:`cdc_sink_testkit.s3.REQUEST_KINDS`)."""


# ---------------------------------------------------------------- worker (own process)


def _worker_system(system: str, uri: str, options: dict[str, str]) -> Any:
    """The peer worker's system class for ``system``, bound to ``uri`` on S3 (imports
    only what that system's virtualenv has)."""
    if system == "cdc_sink":
        import numpy as np
        import pyarrow as pa
        from cdc_sink_worker import OP_INSERT, CdcSink, _schema

        from cdc_sink import create_table, open_table

        class OnS3(CdcSink):
            def load(self, table: pa.Table) -> Any:
                self.table = create_table(self.path, _schema(), storage_options=options)
                ops = pa.array(np.full(table.num_rows, OP_INSERT, np.int8))
                return self.table.apply(table.add_column(0, "__op", ops)).version

            def open(self) -> Any:
                return open_table(self.path, storage_options=options)

            def read(self, version: Any) -> pa.Table:
                return self.open().read(version=version)

        return OnS3(uri)
    import pyarrow as pa
    from delta_worker import Delta
    from deltalake import DeltaTable, write_deltalake

    class DeltaOnS3(Delta):
        def load(self, table: pa.Table) -> Any:
            write_deltalake(self.path, table, mode="error", storage_options=options)
            self.dt = DeltaTable(self.path, storage_options=options)
            return self.dt.version()

        def apply(self, batch: pa.Table) -> Any:
            if system == "delta_merge":
                return super().apply(batch)
            write_deltalake(self.dt, batch.drop_columns(["op"]), mode="append")
            return self.dt.version()

        def open(self) -> Any:
            return DeltaTable(self.path, storage_options=options)

        def read(self, version: Any) -> pa.Table:
            dt = DeltaTable(self.path, version=version, storage_options=options)
            return dt.to_pyarrow_table()

    return DeltaOnS3(uri)


def worker(spec_path: str) -> None:
    """One system's run (``--worker spec.json``): the load, the micro-batches, the opens
    and the cold reads, each followed by a mark on stdout (``mark <step>``) that the
    parent answers on stdin once it has read the proxy's counts."""
    from workload import _batches, digest, read_ipc

    with open(spec_path) as f:
        spec = json.load(f)

    def mark(step: str) -> None:
        print(f"mark {step}", flush=True)
        sys.stdin.readline()

    system = _worker_system(spec["system"], spec["uri"], spec["options"])
    out: dict[str, Any] = {"commit_s": [], "versions": []}
    mark("start")
    t0 = time.perf_counter()
    system.load(read_ipc(os.path.join(spec["data"], "load.arrow")))
    out["load_s"] = time.perf_counter() - t0
    mark("load")
    for batch in _batches(spec["data"], None):
        t0 = time.perf_counter()
        out["versions"].append(system.apply(batch))
        out["commit_s"].append(time.perf_counter() - t0)
        mark("commit")
    t0 = time.perf_counter()
    system.open()
    out["open_s"] = time.perf_counter() - t0
    mark("open")
    for step, version in (
        ("read_newest", None),
        ("read_old", out["versions"][spec["old_batch"] - 1]),
    ):
        t0 = time.perf_counter()
        table = system.read(version)
        out[f"{step}_s"] = time.perf_counter() - t0
        mark(step)
        out[f"{step}_rows"] = table.num_rows
        out[f"{step}_digest"] = digest(table)
    with open(spec["out"], "w") as f:
        json.dump(out, f)


# ---------------------------------------------------------------- parent


def parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    import peers  # here, as in main(): imported when the command line is read

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--latencies", default="0,10,30", help="ms added per direction")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--batch-events", type=int, default=2_000)
    ap.add_argument("--old-batch", type=int, default=3, help="the old version read cold")
    ap.add_argument("--repeat", type=int, default=3)
    peers.add_code_args(ap)
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    ap.add_argument(
        "--proxy",
        default="testkit",
        choices=["testkit", "toxiproxy"],
        help="the latency proxy: the test kit's LatencyProxy, or Toxiproxy (needs go)",
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return ap


TOXIPROXY = "github.com/Shopify/toxiproxy/v2/cmd/server@latest"
"""What ``go install`` builds for ``--proxy toxiproxy``."""


def toxiproxy_server(cache: str) -> str:
    """Toxiproxy's server binary, built from the Go module proxy into ``cache`` on first
    use (``GOPATH=<cache>/go go install ...``).

    Raises:
        SystemExit: No ``go`` on ``PATH``.
    """
    binary = os.path.join(cache, "go", "bin", "server")
    if not os.path.exists(binary):
        go = shutil.which("go")
        if go is None:
            raise SystemExit("--proxy toxiproxy needs go on PATH (or use --proxy testkit)")
        print(f"building Toxiproxy into {cache}", flush=True)
        env = dict(
            os.environ,
            GOPATH=os.path.join(cache, "go"),
            GOCACHE=os.path.join(cache, "go-build"),
            GOFLAGS="-modcacherw",
        )
        subprocess.run([go, "install", TOXIPROXY], check=True, env=env)
    return binary


class Toxiproxy:
    """A Toxiproxy server on 127.0.0.1 with one proxy to ``upstream_host:upstream_port``
    and a ``latency`` toxic of ``delay_ms`` on each direction (``.endpoint``), in front of
    a :class:`~cdc_sink_testkit.s3.LatencyProxy` of 0 ms that counts the requests
    (``.requests()``), so both proxies give the same counts."""

    def __init__(self, binary: str, upstream_host: str, upstream_port: int, delay_ms: int):
        from cdc_sink_testkit.s3 import LatencyProxy
        from cdc_sink_testkit.s3.server import _free_ports

        self.counter = LatencyProxy(upstream_host, upstream_port, 0)
        self.requests = self.counter.requests
        self.delay_ms = delay_ms
        self.binary = binary
        self.api = f"http://127.0.0.1:{_free_ports('127.0.0.1', 1)[0]}"
        self.endpoint = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.api + path, data=data, method=method)
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read()
        return json.loads(text) if text.startswith((b"{", b"[")) else text

    def __enter__(self) -> Toxiproxy:
        self.counter.start()
        port = self.api.rsplit(":", 1)[1]
        self._proc = subprocess.Popen(
            [self.binary, "-host", "127.0.0.1", "-port", port],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                self._call("GET", "/version")
                break
            except OSError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    self.__exit__(None, None, None)
                    raise
                time.sleep(0.1)
        try:
            self._configure()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _configure(self) -> None:
        """Creates the proxy and its two toxics."""
        proxy = self._call(
            "POST",
            "/proxies",
            {"name": "s3", "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{self.counter.port}"},
        )
        self.endpoint = "http://" + proxy["listen"]
        for stream in ("upstream", "downstream"):
            self._call(
                "POST",
                "/proxies/s3/toxics",
                {
                    "name": f"latency_{stream}",
                    "type": "latency",
                    "stream": stream,
                    "attributes": {"latency": self.delay_ms, "jitter": 0},
                },
            )

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        self.counter.stop()


def _delta_options(endpoint: str, s3: Any) -> dict[str, str]:
    """delta-rs's storage options for the server behind ``endpoint`` (conditional
    creates of log entries, as SeaweedFS honours ``If-None-Match: *``)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": s3.region,
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        "AWS_ALLOW_HTTP": "true",
        "AWS_CONDITIONAL_PUT": "etag",
    }


def run_system(
    python: str, spec: dict[str, Any], requests: Callable[[], dict[str, int]], path: str
) -> tuple[dict[str, Any], list[tuple[str, dict[str, int]]]]:
    """Runs one worker (``path``: where its ``cdc_sink`` package is); its figures and the
    proxy's requests of each step it marked."""
    spec_path = spec["out"] + ".spec.json"
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([path, WORKERS]))
    proc = subprocess.Popen(
        [python, os.path.abspath(__file__), "--worker", spec_path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    steps: list[tuple[str, dict[str, int]]] = []
    last = requests()
    for line in proc.stdout:
        if line.startswith("mark "):
            now = requests()
            steps.append((line.split()[1], {k: now[k] - last[k] for k in KINDS}))
            last = now
            proc.stdin.write("\n")
            proc.stdin.flush()
    if proc.wait() != 0:
        raise RuntimeError(f"{spec['system']} worker failed with code {proc.returncode}")
    with open(spec["out"]) as f:
        return json.load(f), steps


def summary(fig: dict[str, Any], steps: list[tuple[str, dict[str, int]]]) -> dict[str, Any]:
    """One run's figures: commit latencies, seconds and requests of each step."""
    import numpy as np

    commit_s = np.asarray(fig["commit_s"])
    commits = [r for s, r in steps if s == "commit"]
    out: dict[str, Any] = {
        "commit_p50_ms": float(np.percentile(commit_s, 50) * 1000),
        "commit_p99_ms": float(np.percentile(commit_s, 99) * 1000),
        "commit_requests": statistics.fmean(sum(r.values()) for r in commits),
        "commit": {k: statistics.fmean(r[k] for r in commits) for k in KINDS},
        "load_s": fig["load_s"],
    }
    for step, req in steps:
        if step in STEPS:
            out[f"{step}_ms"] = fig[f"{step}_s"] * 1000
            out[f"{step}_requests"] = float(sum(req.values()))
            out[step] = {k: float(req[k]) for k in KINDS}
    out["rows_read"] = fig["read_newest_rows"]
    return out


def _print(results: dict[int, dict[str, dict[str, Any]]]) -> None:
    rows = [
        ("commit p50 (ms)", "commit_p50_ms", "{:.0f}"),
        ("commit p99 (ms)", "commit_p99_ms", "{:.0f}"),
        ("requests per commit", "commit_requests", "{:.1f}"),
        ("open (ms)", "open_ms", "{:.0f}"),
        ("requests per open", "open_requests", "{:.0f}"),
        ("cold read, newest (ms)", "read_newest_ms", "{:.0f}"),
        ("requests, cold read newest", "read_newest_requests", "{:.0f}"),
        ("cold read, old version (ms)", "read_old_ms", "{:.0f}"),
        ("requests, cold read old", "read_old_requests", "{:.0f}"),
    ]
    cols = [(lat, sys_) for lat in results for sys_ in results[lat]]
    print("| figure | " + " | ".join(f"{s} @{lat} ms" for lat, s in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for label, key, fmt in rows:
        cells = [fmt.format(results[lat][s][key]) for lat, s in cols]
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    print("| system @latency | step | " + " | ".join(KINDS) + " |")
    print("|---|---|" + "---:|" * len(KINDS))
    for lat, s in cols:
        for step in ("commit", *STEPS):
            c = results[lat][s][step]
            cells = [f"{c[k]:.1f}".removesuffix(".0") for k in KINDS]
            print(f"| {s} @{lat} ms | {step} | " + " | ".join(cells) + " |")


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    from object_store import _median as median_of_runs

    return median_of_runs(runs)


def main() -> None:
    args = parser().parse_args()
    if args.worker:
        worker(args.worker)
        return
    import peers
    from workload import generate

    from cdc_sink_testkit.s3 import LatencyProxy, SeaweedS3

    latencies = [int(x) for x in args.latencies.split(",") if x.strip()]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}: choose from {', '.join(SYSTEMS)}")
    delta_python = peers.venv_python("delta", peers.SYSTEMS["delta"][2], args.venvs)
    toxiproxy = (
        toxiproxy_server(os.path.join(args.venvs, "toxiproxy"))
        if args.proxy == "toxiproxy"
        else None
    )
    work = tempfile.mkdtemp(prefix="cdc_latency_bench_")
    data = os.path.join(work, "data")
    expected = generate(data, args.rows, args.batches, args.batch_events, args.old_batch, 11)
    digests = {
        "read_newest": expected["after_batch"][args.batches],
        "read_old": expected["after_batch"][args.old_batch],
    }
    cdc_path, head = peers.export_cdc_sink(args.cdc_sink, work)
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {
        lat: {s: [] for s in systems} for lat in latencies
    }
    loads = []
    server = SeaweedS3().start()
    try:
        for r in range(args.repeat):
            for lat in latencies:
                with (
                    LatencyProxy(server.host, server.ports["s3"], lat)
                    if toxiproxy is None
                    else Toxiproxy(toxiproxy, server.host, server.ports["s3"], lat)
                ) as proxy:
                    order = systems if (r + lat) % 2 == 0 else systems[::-1]
                    for s in order:
                        name = f"{s}-r{r}-l{lat}-{uuid.uuid4().hex[:8]}"
                        options = (
                            server.storage_options(endpoint=proxy.endpoint)
                            if s == "cdc_sink"
                            else _delta_options(proxy.endpoint, server)
                        )
                        spec = {
                            "system": s,
                            "uri": server.url(name),
                            "options": options,
                            "data": data,
                            "old_batch": args.old_batch,
                            "out": os.path.join(work, f"{name}.json"),
                        }
                        python = sys.executable if s == "cdc_sink" else delta_python
                        fig, steps = run_system(python, spec, proxy.requests, cdc_path)
                        if s != "delta_append":
                            for step, want in digests.items():
                                if fig[f"{step}_digest"] != want:
                                    raise SystemExit(f"{s}: {step} read back wrong content")
                        one = summary(fig, steps)
                        runs[lat][s].append(one)
                        loads.append(os.getloadavg()[0])
                        print(
                            f"repeat {r} @{lat} ms {s}: commit p50 {one['commit_p50_ms']:.0f} "
                            f"ms p99 {one['commit_p99_ms']:.0f} ms, "
                            f"{one['commit_requests']:.1f} req/commit, open "
                            f"{one['open_ms']:.0f} ms ({one['open_requests']:.0f} req), "
                            f"cold read newest {one['read_newest_ms']:.0f} ms, old "
                            f"{one['read_old_ms']:.0f} ms",
                            flush=True,
                        )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    results = {lat: {s: _median(runs[lat][s]) for s in systems} for lat in latencies}
    print(
        f"\ncdc_sink: {head}; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, proxy {args.proxy}, load average during the runs "
        f"{statistics.median(loads):.1f} "
        f"(max {max(loads):.1f}); rows={args.rows} batches={args.batches}x"
        f"{args.batch_events} old version after batch {args.old_batch}, "
        f"repeats={args.repeat} (medians)\n"
    )
    _print(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"args": vars(args), "commit": head, "results": results, "runs": runs},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
