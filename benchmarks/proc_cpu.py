"""CPU seconds of processes and process trees, from ``/proc`` (Linux; benchmarks only)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def is_jvm(pid: int) -> bool:
    """Whether process ``pid`` runs a JVM (its executable is ``java``)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """The live child processes of ``pid``."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def descendants(roots: Iterable[int]) -> list[int]:
    """Every live process under ``roots`` (not the roots themselves)."""
    out: list[int] = []
    todo = [c for r in roots for c in children(r)]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children(pid)
    return out


def tree_cpu_s(roots: Iterable[int], *, with_roots: bool = True) -> dict[int, float]:
    """CPU seconds of each live process under ``roots`` (and of the roots), by pid.

    Compare two samples pid by pid: a process that started between them counts from
    zero; one that ended between them is missing from the second (its last seconds are
    lost), so sample processes that live through the interval.
    """
    roots = list(roots)
    pids = (roots if with_roots else []) + descendants(roots)
    got = {pid: cpu_s(pid) for pid in pids}
    return {pid: s for pid, s in got.items() if s is not None}


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the processes of ``after`` spent since ``before`` was sampled."""
    return sum(s - before.get(pid, 0.0) for pid, s in after.items())


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of the threads of process ``pid``, summed by thread name with its
    digits dropped (``GC Thread#0`` and ``GC Thread#1`` both count as ``GC Thread#``)."""
    got: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            with open(task / "stat", encoding="ascii", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        name = "".join(c for c in text[text.index("(") + 1 : text.rindex(")")] if not c.isdigit())
        fields = text.rsplit(")", 1)[1].split()
        secs = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        got[name] = got.get(name, 0.0) + secs
    return got
