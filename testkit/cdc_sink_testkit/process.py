"""A server process group that never outlives this Python process.

Each server the kit starts (the Kafka broker JVM, the schema registry JVM, SeaweedFS) is a
:class:`ChildServer`: a process group of its own (``start_new_session=True``), stopped by
:func:`terminate_group` and - should Python die without doing so (SIGKILL, SIGTERM) - by a
watchdog (:func:`start_watchdog`): a small Python process holding the read end of a pipe
whose write end only this process has; at EOF it stops the group and removes the
server's directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, TypeVar

__all__ = [
    "WAIT_FOR_PARENT",
    "ChildServer",
    "StartStop",
    "start_group_watchdog",
    "start_watchdog",
    "stop_watchdog",
    "tail",
    "terminate_group",
]

# Runs in its own process: waits for EOF on stdin (the parent closed the pipe or died),
# then stops the broker's process group (SIGTERM, and SIGKILL after a grace period) and
# removes the broker's directory (argv[3], empty to keep it).
WAIT_FOR_PARENT = """
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    while sys.stdin.buffer.read(4096):
        pass
except Exception:
    pass
"""
"""The opening of a watchdog script: returns once the parent closes stdin or dies."""

_WATCHDOG = (
    WAIT_FOR_PARENT
    + """
import os, shutil, time
pgid, grace, workdir = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
def alive():
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False
if alive():
    try:
        os.killpg(pgid, signal.SIGTERM)
    except OSError:
        pass
    end = time.monotonic() + grace
    while alive() and time.monotonic() < end:
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    time.sleep(0.5)
if workdir:
    shutil.rmtree(workdir, ignore_errors=True)
"""
)


def start_watchdog(script: str, *args: str) -> subprocess.Popen[bytes]:
    """Runs ``script`` (Python source) with ``args`` in its own session, stdin a pipe
    from this process (close-on-exec: only this process holds the write end)."""
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def start_group_watchdog(pgid: int, grace: float, workdir: Path | None) -> subprocess.Popen[bytes]:
    """The watchdog of a broker's process group ``pgid`` (``workdir`` None: keep it)."""
    return start_watchdog(_WATCHDOG, str(pgid), str(grace), "" if workdir is None else str(workdir))


def stop_watchdog(watchdog: subprocess.Popen[bytes] | None) -> None:
    """Kills a group watchdog first: it must not signal the group after the broker is gone."""
    if watchdog is None:
        return
    with contextlib.suppress(OSError):
        watchdog.kill()
    with contextlib.suppress(Exception):
        watchdog.wait(timeout=5)
    if watchdog.stdin is not None:
        with contextlib.suppress(OSError):
            watchdog.stdin.close()


def terminate_group(proc: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM the process group ``proc`` leads, SIGKILL whatever is left after ``grace``."""
    pgid = proc.pid  # start_new_session=True: the broker leads its own group
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    # Whatever is left in the group (the JVM is alone in it, but be thorough).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log file (a note when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no {path.name})"
    return "\n".join(text.splitlines()[-lines:])


class ChildServer:
    """One server process this process launched, with its group's watchdog.

    Attributes:
        proc: The server's process (None before :meth:`launch` and after a stop).
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The server's pid while it is launched."""
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the server process runs."""
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        """The server's exit code once it exited (None while it runs)."""
        assert self.proc is not None
        return self.proc.poll()

    def launch(
        self, cmd: list[str], *, cwd: Path, log: Path, grace: float, workdir: Path | None
    ) -> None:
        """Starts ``cmd`` in a process group of its own, its output appended to ``log``,
        and its watchdog (which stops the group after ``grace`` seconds of SIGTERM and
        removes ``workdir``, None: keeps it, should this process die first)."""
        out = open(log, "ab")  # noqa: SIM115 - owned by the child
        try:
            self.proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group, stopped as one
            )
        finally:
            out.close()
        self._watchdog = start_group_watchdog(self.proc.pid, grace, workdir)

    def stop(self, grace: float) -> None:
        """Stops the watchdog, then the group (SIGTERM, SIGKILL after ``grace``). Idempotent."""
        proc, self.proc = self.proc, None
        self.stop_watchdog()
        if proc is not None:
            terminate_group(proc, grace)

    def kill(self) -> None:
        """SIGKILLs the group at once (a crash, for tests). Idempotent."""
        proc, self.proc = self.proc, None
        self.stop_watchdog()
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)

    def stop_watchdog(self) -> None:
        """Stops only the watchdog (the server keeps running)."""
        watchdog, self._watchdog = self._watchdog, None
        stop_watchdog(watchdog)


_S = TypeVar("_S", bound="StartStop")


class StartStop:
    """A kit server as a context manager: ``with Server(...) as s`` starts it (its
    ``start()`` returns it) and stops it on the way out, also on an exception."""

    def start(self: _S) -> _S:
        """Starts the server; returns it."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stops the server."""
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ServedProcess(StartStop):
    """What a kit server that runs one :class:`ChildServer` (``_child``) in a working
    directory (``workdir``) tells of it: its pid, whether it runs, where its log is
    (``workdir / LOG_NAME``)."""

    LOG_NAME: ClassVar[str]
    _child: ChildServer
    workdir: Path | None

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs."""
        return self._child.pid

    @property
    def is_running(self) -> bool:
        """Whether the server runs."""
        return self._child.running

    @property
    def log_path(self) -> Path | None:
        """The server's log."""
        return None if self.workdir is None else self.workdir / self.LOG_NAME
