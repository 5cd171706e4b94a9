"""A Spark standalone cluster on this machine, for tests and benchmarks.

:class:`StandaloneCluster` starts a master and ``workers`` workers from pyspark's own
``spark-class`` (no Spark download), all bound to ``127.0.0.1`` on free ports:

* each process - the master and every worker - is a :class:`~cdc_sink_testkit.process.ChildServer`:
  a process group of its own with a watchdog, so that should this Python die first, the
  cluster is stopped anyway. A worker starts its executors (JVMs) in its group, and
  they their Python workers in its session (pyspark's daemon takes a process group of
  its own), so :meth:`StandaloneCluster.kill_worker` (SIGKILL of the group and of the
  rest of the session) takes a worker down with everything it ran, as a lost machine
  would;
* each worker has a directory of its own under the cluster's: ``work/`` (``--work-dir``:
  the applications' jars and the executors' logs), ``local/`` (``SPARK_LOCAL_DIRS``:
  shuffle and block files of its executors) and ``tmp/`` (``TMPDIR`` and the JVMs'
  ``java.io.tmpdir``), so that no two workers share scratch space;
* :meth:`StandaloneCluster.app_conf` is the Spark configuration of an application
  that runs on the cluster (master URL, one executor per worker, their memory, extra
  jars such as the Kafka source or ``hadoop-aws``, the kit's and the product's
  ``PYTHONPATH`` for the executors' Python workers).

Use as a context manager, or :meth:`~StandaloneCluster.start` /
:meth:`~StandaloneCluster.stop`; the cluster's directory is removed at the stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cdc_sink_testkit.kafka.probes import free_port
from cdc_sink_testkit.process import ChildServer, StartStop, tail

__all__ = ["ClusterStartError", "StandaloneCluster", "session_pids", "spark_class"]

_HOST = "127.0.0.1"


class ClusterStartError(RuntimeError):
    """The cluster (or a worker) did not come up; the message ends with a log's tail."""


def spark_class() -> Path:
    """pyspark's ``bin/spark-class`` (it runs a Spark main class in the foreground)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"


def session_pids(sid: int) -> list[int]:
    """The processes of session ``sid`` (Linux ``/proc``; empty elsewhere)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            fields = text[text.rindex(")") + 2 :].split()  # after the command's name
            if int(fields[3]) == sid:
                out.append(int(stat.parent.name))
    return out


def _kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


class StandaloneCluster(StartStop):
    """A Spark standalone master and workers on ``127.0.0.1``.

    Args:
        workers: How many workers (each runs one executor per application).
        cores: Cores each worker offers.
        memory: Memory each worker offers (``"1g"``); executors get ``executor_memory``.
        executor_memory: ``spark.executor.memory`` of :meth:`app_conf`.
        workdir: The cluster's directory (default: a new temporary one, removed at stop).
        startup_timeout: Seconds :meth:`start` waits for the workers to register.
        stop_timeout: Seconds a stop waits after SIGTERM before SIGKILL.
        python_path: Directories the executors' Python workers import from (default:
            the product's and the kit's source trees, where they are not installed).
        env: More environment variables of every process of the cluster, hence of the
            executors and their Python workers (an object store's credentials, as a
            machine's environment would hold them). Written to the cluster's
            ``conf/spark-env.sh`` (mode 0600, read by ``spark-class``), never on a
            command line.
    """

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        *,
        executor_memory: str = "512m",
        workdir: Path | None = None,
        startup_timeout: float = 120.0,
        stop_timeout: float = 20.0,
        python_path: Iterable[Path] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if workers < 1 or cores < 1:
            raise ValueError(f"need at least one worker and one core: {workers=} {cores=}")
        self.workers, self.cores, self.memory = workers, cores, memory
        self.executor_memory = executor_memory
        self.startup_timeout, self.stop_timeout = startup_timeout, stop_timeout
        self.python_path = [str(p) for p in python_path] if python_path is not None else None
        self.extra_env = dict(env or {})
        self._own_workdir = workdir is None
        self.workdir: Path | None = workdir
        self.port: int | None = None
        self.ui_port: int | None = None
        self._master = ChildServer()
        self._workers = [ChildServer() for _ in range(workers)]

    # -- what it tells ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The master URL, ``spark://127.0.0.1:<port>``."""
        if self.port is None:
            raise RuntimeError("StandaloneCluster is not started: call start() first")
        return f"spark://{_HOST}:{self.port}"

    @property
    def master_pid(self) -> int | None:
        """The master's pid while it runs."""
        return self._master.pid

    @property
    def worker_pids(self) -> list[int | None]:
        """Each worker's pid (None for a killed or stopped worker), by index."""
        return [w.pid if w.running else None for w in self._workers]

    def worker_dir(self, i: int) -> Path:
        """Worker ``i``'s directory (``work/``, ``local/``, ``tmp/`` and its log)."""
        assert self.workdir is not None
        return self.workdir / f"worker-{i}"

    def worker_log(self, i: int) -> Path:
        """Worker ``i``'s log (its executors' logs are under ``work/<app>/<id>/``)."""
        return self.worker_dir(i) / "worker.log"

    @property
    def master_log(self) -> Path:
        """The master's log."""
        assert self.workdir is not None
        return self.workdir / "master.log"

    def state(self) -> dict[str, Any]:
        """The master's view (its ``/json/`` page: workers, applications, their states).

        Raises:
            OSError: The master did not answer.
        """
        with urllib.request.urlopen(f"http://{_HOST}:{self.ui_port}/json/", timeout=5) as r:
            data = json.loads(r.read())
        if not isinstance(data, dict):
            raise OSError(f"the master's /json/ is not an object: {data!r}")
        return data

    def alive_workers(self) -> int:
        """How many workers the master holds ALIVE (0 when it does not answer)."""
        try:
            state = self.state()
        except (OSError, ValueError):
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def app_conf(
        self, jars: Iterable[Path | str] = (), extra: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The Spark configuration of an application on this cluster.

        One executor per worker (``spark.executor.cores`` = the worker's cores,
        ``spark.cores.max`` = all of them), the driver reachable on ``127.0.0.1``, this
        interpreter as the workers' Python, and ``jars`` on ``spark.jars`` (shipped to
        every executor by the driver).

        Args:
            jars: Extra jars (the Kafka source, ``hadoop-aws``, ...).
            extra: More settings, applied last.
        """
        conf = {
            "spark.master": self.url,
            "spark.driver.host": _HOST,
            "spark.driver.bindAddress": _HOST,
            "spark.executor.cores": str(self.cores),
            "spark.cores.max": str(self.cores * self.workers),
            "spark.executor.memory": self.executor_memory,
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": os.pathsep.join(self._python_path()),
        }
        names = [str(j) for j in jars]
        if names:
            conf["spark.jars"] = ",".join(names)
        conf.update(extra or {})
        return conf

    # -- start, kill, stop ----------------------------------------------------------------

    def start(self) -> StandaloneCluster:
        """Starts the master and every worker; returns once all are ALIVE at the master.

        Raises:
            ClusterStartError: A process exited, or the workers did not register in time.
        """
        if self._master.running:
            return self
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="cdc_sink-cluster-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._write_spark_env()
            self._start_master()
            for i in range(self.workers):
                self._launch_worker(i)
            self.wait_for_workers(self.workers)
        except BaseException:
            self.stop()
            raise
        return self

    def worker_session(self, i: int) -> list[int]:
        """The processes of worker ``i``'s session: the worker, its executors and their
        Python workers (pyspark's daemon leaves the worker's process group for one of its
        own, not the session). Empty once it is stopped or killed."""
        pid = self._workers[i].pid
        return [] if pid is None else session_pids(pid)

    def kill_worker(self, i: int) -> None:
        """SIGKILLs worker ``i`` with everything it started: its process group (the
        worker, its executors) and the rest of its session (the executors' Python
        workers), at once, as on a lost machine (the master and the drivers see their
        connections drop)."""
        rest = self.worker_session(i)
        self._workers[i].kill()
        _kill_all(rest)

    def start_worker(self, i: int, *, wait: bool = True) -> None:
        """Starts worker ``i`` again (after :meth:`kill_worker`), with the same
        directories; with ``wait``, returns once the master holds every live worker ALIVE.

        Raises:
            ClusterStartError: It did not register in time.
        """
        if self._workers[i].running:
            raise RuntimeError(f"worker {i} is running")
        self._launch_worker(i)
        if wait:
            self.wait_for_workers(sum(w.running for w in self._workers))

    def wait_for_workers(self, count: int, timeout: float | None = None) -> None:
        """Waits until the master holds ``count`` workers ALIVE.

        Raises:
            ClusterStartError: A process of the cluster exited, or time ran out.
        """
        deadline = time.monotonic() + (self.startup_timeout if timeout is None else timeout)
        while True:
            if self.alive_workers() >= count:
                return
            if not self._master.running:
                self._fail("the Spark master exited", self.master_log)
            if time.monotonic() > deadline:
                self._fail(f"{count} workers were not ALIVE at {self.url}", self.master_log)
            time.sleep(0.25)

    def stop(self) -> None:
        """Stops the workers, then the master (SIGTERM, SIGKILL after the grace), and
        removes the cluster's directory if this object made it. Idempotent."""
        for i, worker in enumerate(self._workers):
            rest = self.worker_session(i)
            worker.stop(self.stop_timeout)
            _kill_all(rest)  # Python workers whose executor did not stop them
        self._master.stop(self.stop_timeout)
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        self.port = self.ui_port = None

    # -- internals ------------------------------------------------------------------------

    def _python_path(self) -> list[str]:
        if self.python_path is not None:
            return self.python_path
        import cdc_sink
        import cdc_sink_testkit

        roots = [Path(m.__file__ or "").resolve().parents[1] for m in (cdc_sink, cdc_sink_testkit)]
        return list(dict.fromkeys(str(r) for r in roots))

    def _env(self, scratch: Path) -> list[str]:
        """``env`` assignments of a cluster process whose scratch space is ``scratch``."""
        import pyspark

        tmp = scratch / "tmp"
        assert self.workdir is not None
        env = {
            "SPARK_HOME": str(Path(pyspark.__file__).resolve().parent),
            "SPARK_CONF_DIR": str(self.workdir / "conf"),
            "SPARK_LOCAL_IP": _HOST,
            "SPARK_MASTER_HOST": _HOST,
            "SPARK_LOCAL_DIRS": str(scratch / "local"),
            "TMPDIR": str(tmp),
            # the daemon JVM and (inherited) its executors' JVMs
            "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={tmp}",
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(self._python_path()),
        }
        # -u: spark-class reads conf/spark-env.sh unless told it was read already
        return ["-u", "SPARK_ENV_LOADED", *(f"{k}={v}" for k, v in env.items())]

    def _write_spark_env(self) -> None:
        """``conf/spark-env.sh``: the ``env`` variables, readable by this user only."""
        assert self.workdir is not None
        conf = self.workdir / "conf"
        conf.mkdir(exist_ok=True)
        path = conf / "spark-env.sh"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            for key, value in self.extra_env.items():
                if not key.isidentifier():
                    raise ValueError(f"env: {key!r} is not a variable name")
                f.write(f"{key}={shlex.quote(value)}\n")

    def _start_master(self) -> None:
        assert self.workdir is not None
        scratch = self.workdir / "master"
        for sub in ("local", "tmp"):
            (scratch / sub).mkdir(parents=True, exist_ok=True)
        last: ClusterStartError | None = None
        for _attempt in range(3):  # a free port can be taken between probe and bind
            self.port, self.ui_port = free_port(_HOST), free_port(_HOST)
            self._master.launch(
                [
                    "env",
                    *self._env(scratch),
                    str(spark_class()),
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    _HOST,
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.ui_port),
                ],
                cwd=self.workdir,
                log=self.master_log,
                grace=self.stop_timeout,
                workdir=self.workdir if self._own_workdir else None,
            )
            try:
                self._wait_master()
                return
            except ClusterStartError as exc:
                last = exc
                self._master.stop(self.stop_timeout)
                if "Address already in use" not in str(exc):
                    break
        assert last is not None
        raise last

    def _wait_master(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            with contextlib.suppress(OSError, ValueError):
                if self.state().get("status") == "ALIVE":
                    return
            if not self._master.running:
                self._fail("the Spark master exited while starting", self.master_log)
            if time.monotonic() > deadline:
                self._fail("the Spark master did not answer", self.master_log)
            time.sleep(0.25)

    def _launch_worker(self, i: int) -> None:
        wd = self.worker_dir(i)
        for sub in ("work", "local", "tmp"):
            (wd / sub).mkdir(parents=True, exist_ok=True)
        self._workers[i].launch(
            [
                "env",
                *self._env(wd),
                str(spark_class()),
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                _HOST,
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--webui-port",
                "0",
                "--work-dir",
                str(wd / "work"),
            ],
            cwd=wd,
            log=self.worker_log(i),
            grace=self.stop_timeout,
            workdir=None,  # the master's watchdog removes the cluster's directory
        )

    def _fail(self, why: str, log: Path) -> None:
        raise ClusterStartError(f"{why}.\n--- tail of {log} ---\n{tail(log, 40)}")
