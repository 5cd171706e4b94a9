"""Process-tree helpers of the tests that run the real job under spark-submit."""

from __future__ import annotations

from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Pids of the processes below ``pid``, nearest first (read from /proc)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out: list[int] = []
    frontier = [pid]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier]
        out += frontier
    return out
