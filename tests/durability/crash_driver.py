"""Child process of the crash tests: applies the workload's batches to a table.

Usage::

    python crash_driver.py <table path> <seed> <num batches> [--count-hits]
    python crash_driver.py --serve


Opens the table (the test process created it), then for each batch ``i`` calls
``apply(batch(seed, i), app_id="job", batch_id=i)`` and, after a batch it committed (not
skipped), the workload's maintenance (``compact()``, ``gc(dry_run=False)``). Each step
prints one JSON line, flushed, so that a parent sees how far a killed child got::

    {"i": 3, "version": 5, "skipped": false}
    {"compact": 6}
    {"gc": 4}
    {"done": true, "hits": {...}}      hits: fault points reached (--count-hits)

Crashes are injected by the environment (``CDC_SINK_CRASH_AT``/``CDC_SINK_CRASH_RANDOM``,
see cdc_sink/storage/faults.py); without them the run completes.

``--serve`` makes a fork server, so that hundreds of crash runs do not each pay for
importing numpy and pyarrow: it reads one JSON request per line from stdin
(``{"args": [path, seed, n, ...], "env": {...}, "stdout": file, "stderr": file}``),
forks a child that sets the crash variables, re-reads them and runs the driver with its
output redirected to the two files, waits for it, and answers ``{"returncode": rc}``
(``-9`` when it died by SIGKILL). The server itself never opens a table, so each child
starts from a process that has imported the modules and done nothing else.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cdc_sink.storage import faults
from cdc_sink.table import open_table
from tests.durability import workload


def _emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def run(path: str, seed: int, n: int, *, count_hits: bool = False) -> None:
    """Applies batches ``0 .. n-1`` of ``seed`` (see the module docstring)."""
    table = open_table(path, options=workload.options())
    for i in range(n):
        res = table.apply(workload.batch(seed, i), app_id=workload.APP_ID, batch_id=i)
        _emit({"i": i, "version": res.version, "skipped": res.skipped})
        if res.skipped:
            continue
        for op in workload.maintenance(i):
            if op == "compact":
                _emit({"compact": table.compact()})
            else:
                _emit({"gc": len(table.gc(dry_run=False))})
    done: dict[str, object] = {"done": True}
    if count_hits:
        done["hits"] = dict(faults._hits)
    _emit(done)


def _main(argv: list[str]) -> None:
    run(argv[0], int(argv[1]), int(argv[2]), count_hits="--count-hits" in argv)


def _forked_child(req: dict[str, object]) -> None:
    code = 1
    try:
        for fd, name in ((1, req["stdout"]), (2, req["stderr"])):
            f = os.open(str(name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for var in (faults.CRASH_AT_ENV, faults.CRASH_RANDOM_ENV):
            os.environ.pop(var, None)
        os.environ.update({str(k): str(v) for k, v in dict(req["env"]).items()})  # type: ignore[call-overload]
        faults.reload_from_env()
        _main([str(a) for a in req["args"]])  # type: ignore[attr-defined]
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _warm_up() -> None:
    """One small run in a scratch table, so that lazy imports and one-time set-ups
    (pyarrow compute kernels, ...) happen here once and not in every forked child."""
    import contextlib
    import io
    import shutil
    import tempfile

    from cdc_sink.table import create_table

    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    scratch = tempfile.mkdtemp(prefix="cdc_sink_warm_up_", dir=shm)
    try:
        path = os.path.join(scratch, "table")
        create_table(path, workload.schema(), options=workload.options())
        with contextlib.redirect_stdout(io.StringIO()):
            run(path, 0, 6)
            table = open_table(path, options=workload.options())
            table.read(version=table.oldest_version)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def serve() -> None:
    """The fork server (see the module docstring)."""
    _warm_up()
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _forked_child(req)
        _, status = os.waitpid(pid, 0)
        _emit({"returncode": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        _main(sys.argv[1:])
