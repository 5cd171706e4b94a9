"""A local Spark Connect server run as a child process (``start-connect-server.sh``).

pyspark ships the server: ``pyspark/jars/spark-connect_2.13-<v>.jar`` and
``pyspark/sbin/start-connect-server.sh``. :class:`ConnectServer` runs that script in the
foreground (``--wait``) with ``SPARK_HOME`` set to pyspark's directory, in a process group
of its own (:class:`~cdc_sink_testkit.process.ChildServer`, so a watchdog stops it should
this process die first), with:

- ``local[2]`` master, the gRPC endpoint bound to ``127.0.0.1`` on a free port;
- Spark's Kafka source on ``spark.jars`` (:func:`cdc_sink.kafka.jars.spark_kafka_conf`);
- its own directory for logs, pid file, ``spark.local.dir`` and the warehouse, removed at
  :meth:`ConnectServer.stop`;
- this interpreter as the Python of its workers and of ``foreachBatch`` functions.

Clients connect with ``SparkSession.builder.remote(server.url)``.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from cdc_sink_testkit.kafka.probes import free_port
from cdc_sink_testkit.process import ChildServer, ServedProcess, tail

__all__ = ["ConnectServer", "ConnectStartError", "start_connect_server"]

logger = logging.getLogger(__name__)


class ConnectStartError(RuntimeError):
    """The Connect server did not start (the message ends with the tail of its log)."""


def spark_home() -> Path:
    """pyspark's directory, which holds ``sbin/start-connect-server.sh`` and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class ConnectServer(ServedProcess):
    """A Spark Connect server on ``127.0.0.1`` (``sc://127.0.0.1:<port>``).

    Args:
        master: The server's Spark master.
        with_kafka: Put Spark's Kafka source on the server's classpath.
        startup_timeout: Seconds :meth:`start` waits for the endpoint.
        stop_timeout: Seconds :meth:`stop` waits after SIGTERM before SIGKILL.
        conf: More Spark settings of the server.

    Use as a context manager, or :meth:`start` / :meth:`stop`.
    """

    LOG_NAME = "connect.log"

    def __init__(
        self,
        *,
        master: str = "local[2]",
        with_kafka: bool = True,
        startup_timeout: float = 180.0,
        stop_timeout: float = 20.0,
        conf: dict[str, str] | None = None,
    ) -> None:
        self.master = master
        self.with_kafka = with_kafka
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.extra_conf = dict(conf or {})
        self.host = "127.0.0.1"
        self.port: int | None = None
        self.workdir: Path | None = None
        self._child = ChildServer()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The client URL, ``sc://127.0.0.1:<port>``."""
        if self.port is None:
            raise RuntimeError("ConnectServer is not started: call start() first")
        return f"sc://{self.host}:{self.port}"

    def conf(self) -> dict[str, str]:
        """The Spark settings the server is started with."""
        assert self.workdir is not None and self.port is not None
        conf = {
            "spark.connect.grpc.binding.address": self.host,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": self.host,
            "spark.driver.bindAddress": self.host,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "1g",
            "spark.local.dir": str(self.workdir / "local"),
            "spark.sql.warehouse.dir": str(self.workdir / "warehouse"),
            "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={self.workdir / 'tmp'}",
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        }
        if self.with_kafka:
            from cdc_sink.kafka.jars import spark_kafka_conf

            conf.update(spark_kafka_conf())
        conf.update(self.extra_conf)
        return conf

    def start(self) -> ConnectServer:
        """Starts the server and waits until its endpoint accepts connections; returns self.

        Raises:
            ConnectStartError: It exited or did not answer in time.
        """
        with self._lock:
            if self.is_running:
                return self
            self.workdir = Path(tempfile.mkdtemp(prefix="cdc_sink-connect-"))
            for sub in ("logs", "local", "warehouse", "tmp"):
                (self.workdir / sub).mkdir()
            last: ConnectStartError | None = None
            for _attempt in range(3):  # a free port can be taken between probe and bind
                self.port = free_port(self.host)
                try:
                    self._spawn()
                    self._wait_ready()
                    logger.info("Spark Connect server up at %s", self.url)
                    return self
                except ConnectStartError as exc:
                    last = exc
                    self._child.stop(self.stop_timeout)
                    if "Address already in use" not in str(exc):
                        break
                except BaseException:
                    self._teardown()
                    raise
            self._teardown()
            assert last is not None
            raise last

    def stop(self) -> None:
        """Stops the server (SIGTERM to its group, SIGKILL after the grace) and removes
        its directory (idempotent)."""
        with self._lock:
            self._teardown()

    # -- internals ---------------------------------------------------------------------
    def _command(self) -> list[str]:
        cmd = [
            "bash",
            str(spark_home() / "sbin" / "start-connect-server.sh"),
            "--wait",  # the foreground: the group ChildServer stops is the server
            "--master",
            self.master,
        ]
        for key, value in self.conf().items():
            cmd += ["--conf", f"{key}={value}"]
        return cmd

    def _env(self) -> dict[str, str]:
        """The variables the server runs with (on top of this process's)."""
        assert self.workdir is not None
        return dict(
            SPARK_HOME=str(spark_home()),
            SPARK_LOG_DIR=str(self.workdir / "logs"),
            SPARK_PID_DIR=str(self.workdir),
            SPARK_IDENT_STRING=f"cdc_sink-{os.getpid()}",
            SPARK_LOCAL_IP=self.host,
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            TMPDIR=str(self.workdir / "tmp"),
        )

    def _spawn(self) -> None:
        assert self.workdir is not None
        env = [f"{k}={v}" for k, v in self._env().items()]
        self._child.launch(
            ["env", *env, *self._command()],
            cwd=self.workdir,
            log=self.workdir / "connect.log",
            grace=self.stop_timeout,
            workdir=self.workdir,
        )

    def _wait_ready(self) -> None:
        assert self.port is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self._child.exit_code()
            if code is not None:
                self._fail(f"the Connect server exited with code {code} while starting")
            if _port_open(self.host, self.port):
                return
            if time.monotonic() > deadline:
                self._fail(f"the Connect server did not listen within {self.startup_timeout}s")
            time.sleep(0.25)

    def _fail(self, why: str) -> None:
        log = self.log_path
        text = tail(log, 60) if log is not None else ""
        raise ConnectStartError(f"{why}.\n--- tail of {log} ---\n{text}")

    def _teardown(self) -> None:
        self._child.stop(self.stop_timeout)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        self.port = None


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def start_connect_server(**kwargs: object) -> ConnectServer:
    """A started :class:`ConnectServer` (keyword arguments as its constructor's)."""
    return ConnectServer(**kwargs).start()  # type: ignore[arg-type]
