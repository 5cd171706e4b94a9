"""Crash injection: named fault points where a test can make the process die.

Nothing is on disk; the state lives in two environment variables, read once at import
(and again by :func:`reload_from_env`)::

    CDC_SINK_CRASH_AT=log.created          die the first time "log.created" is reached
    CDC_SINK_CRASH_AT=wal.fsynced:3        die the 3rd time "wal.fsynced" is reached
    CDC_SINK_CRASH_RANDOM=42:0.05          at every fault point, die with probability
                                           0.05, drawn from random.Random(42)

"Die" means ``SIGKILL`` to this very process, at once: no ``finally`` blocks, no
atexit handlers, no buffered output, exactly like a ``kill -9`` (the page cache
survives it; a power cut would not). A line naming the point is written to stderr
first, with a raw ``os.write``, so that a crash-test harness can tell where its child
died.

Engine modules call :func:`fault_point` at the instants whose crash they want tested
and :func:`register` the names at import, so that tests can iterate
:data:`KNOWN_POINTS`. With both variables unset and no hook a fault point is one global
lookup and one branch.

In-process tests may also :func:`set_hook` a function called at every fault point (with
the point's name and hit count): the power-loss simulation
(tests/durability/test_power_loss.py) builds there the on-disk state a power cut at that
instant would leave, and lets the process go on.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Callable

from cdc_sink.storage.hookslot import HookSlot

__all__ = [
    "CRASH_AT_ENV",
    "CRASH_RANDOM_ENV",
    "KNOWN_POINTS",
    "fault_point",
    "register",
    "reload_from_env",
    "set_hook",
]

CRASH_AT_ENV = "CDC_SINK_CRASH_AT"
"""Environment variable naming the fault point to die at (``name`` or ``name:N``)."""

CRASH_RANDOM_ENV = "CDC_SINK_CRASH_RANDOM"
"""Environment variable ``<seed>:<probability>`` for dying at a random fault point."""

KNOWN_POINTS: list[str] = []
"""Every fault point name registered by an imported module, in registration order."""

_enabled = False
_crash_name: str | None = None
_crash_nth = 1
_rng: random.Random | None = None
_probability = 0.0
_hits: dict[str, int] = {}
_lock = threading.RLock()
_hook: HookSlot[Callable[[str, int], None]] = HookSlot()


def register(*names: str) -> None:
    """Add fault point names to :data:`KNOWN_POINTS` (once each).

    Args:
        *names: The names, conventionally ``<module>.<instant>`` (``wal.fsynced``).
    """
    for name in names:
        if name not in KNOWN_POINTS:
            KNOWN_POINTS.append(name)


def _parse_crash_at(value: str) -> tuple[str, int]:
    name, sep, count = value.rpartition(":")
    if sep and count.isdigit() and name:
        nth = int(count)
        if nth < 1:
            raise ValueError(f"{CRASH_AT_ENV}={value!r}: the count is 1-based")
        return name, nth
    return value, 1


def _parse_random(value: str) -> tuple[int, float]:
    seed, sep, prob = value.partition(":")
    try:
        if not sep:
            raise ValueError
        parsed = (int(seed), float(prob))
    except ValueError:
        raise ValueError(
            f"{CRASH_RANDOM_ENV}={value!r}: expected <int seed>:<probability>"
        ) from None
    if not 0.0 <= parsed[1] <= 1.0:
        raise ValueError(f"{CRASH_RANDOM_ENV}={value!r}: probability must be in [0, 1]")
    return parsed


def reload_from_env() -> None:
    """Re-read the environment variables and reset the per-point hit counters.

    Raises:
        ValueError: A variable is set but malformed.
    """
    global _enabled, _crash_name, _crash_nth, _rng, _probability
    at = os.environ.get(CRASH_AT_ENV, "").strip()
    rnd = os.environ.get(CRASH_RANDOM_ENV, "").strip()
    _crash_name, _crash_nth = _parse_crash_at(at) if at else (None, 1)
    if rnd:
        seed, _probability = _parse_random(rnd)
        _rng = random.Random(seed)
    else:
        _rng, _probability = None, 0.0
    _hits.clear()
    _enabled = _crash_name is not None or _rng is not None or _hook.current is not None


def set_hook(hook: Callable[[str, int], None] | None) -> Callable[[str, int], None] | None:
    """Install (``None``: remove) a function called at every fault point (tests only).

    The hook gets the point's name and its hit count (1-based, counted since the hook
    was installed); it runs before any crash the environment asks for at that point.

    Args:
        hook: The function, or ``None``.

    Returns:
        The hook installed before.
    """
    previous = _hook.install(hook)
    reload_from_env()
    return previous


def _die(name: str, hit: int) -> None:
    try:
        os.write(2, f"cdc_sink: crash injected at fault point {name} (hit {hit})\n".encode())
    finally:
        os.kill(os.getpid(), signal.SIGKILL)


def fault_point(name: str) -> None:
    """Die here by SIGKILL if the environment asks for a crash at this point.

    Args:
        name: The fault point's name.
    """
    if not _enabled:
        return
    with _lock:  # the buckets of a batch are prepared in several threads
        hit = _hits.get(name, 0) + 1
        _hits[name] = hit
        hook = _hook.current
        if hook is not None:
            hook(name, hit)
        if name == _crash_name and hit == _crash_nth:
            _die(name, hit)
        if _rng is not None and _rng.random() < _probability:
            _die(name, hit)


reload_from_env()
