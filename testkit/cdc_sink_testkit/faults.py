"""Fault injection for object stores, as a wrapper: no hook in the product's code.

:class:`FaultStore` wraps any :class:`~cdc_sink.storage.objectstore.ObjectStore` (a
:class:`~cdc_sink.storage.objectstore.local.LocalStore` or an
:class:`~cdc_sink.storage.objectstore.cloud.ObstoreStore`) and passes every call through,
except those a *fault* chooses - by operation name, by key (exact, or a predicate), and
by count (from the ``nth`` matching call on, ``times`` times) - which it makes:

=========  ==========================================================================
fail       raise instead of calling the inner store (nothing happens there); with
           ``after=True`` the call goes through and *then* raises: the caller cannot
           tell whether it happened (a lost response, a timeout)
tear       a write stores only the first ``keep`` bytes (an int, or a fraction of the
           data) and raises, as a crash in the middle of a non-atomic write leaves it;
           a read returns only the first ``keep`` bytes of what it read
delay      run ``wait()`` (an ``Event.wait``, a ``Barrier.wait``) and/or sleep
           ``seconds`` before the call, to force an interleaving
=========  ==========================================================================

The store's capabilities are the inner store's (``wants_object_cache``,
``trusts_mtime_for_orphans``, ``abandoned_temporaries``, ordered deletes), except those
that would take a call around the wrapper: :meth:`~FaultStore.local_path` is None (a
memory-mapped file would read past every fault) and :meth:`~FaultStore.open_new` is the
interface's default (the object is assembled and goes through ``put_new``, where faults
apply).

The model is LevelDB's ``FaultInjectionTestEnv`` over ``EnvWrapper``: the code under
test runs unchanged on a store that misbehaves on cue. Every call is logged in
:attr:`FaultStore.calls` (operation, key or prefix), so a test can also assert which
objects an operation touched.

::

    store = FaultStore(LocalStore(tmp))
    store.fail("put_if_absent", key=lambda k: k.startswith("_log/"))   # next commit fails
    store.tear("put", keep=0.5, nth=2)                                 # 2nd put torn
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

from cdc_sink.storage.objectstore import ObjectInfo, ObjectStore, StoreIOError, check_prefix

__all__ = ["OPS", "Call", "Fault", "FaultStore", "Op"]

Op = Literal[
    "get", "get_range", "put", "put_if_absent", "put_new", "list", "delete", "delete_many", "head"
]
"""The calls of the interface a fault can choose."""

OPS: tuple[Op, ...] = get_args(Op)
"""Every :data:`Op`."""

_WRITES = ("put", "put_if_absent", "put_new")
_READS = ("get", "get_range")

KeyMatch = str | Callable[[str], bool] | None
"""Which keys a fault chooses: one key, a predicate, or every key (None)."""

ErrorSpec = BaseException | Callable[[str, str], BaseException] | None
"""What a fault raises: an exception, a factory ``(op, key) -> exception``, or None for
a :class:`~cdc_sink.storage.objectstore.StoreIOError` naming the fault."""


@dataclass(frozen=True)
class Call:
    """One call made through a :class:`FaultStore`."""

    op: Op
    key: str
    """The key (the prefix for ``list``; the first key for ``delete_many``)."""


@dataclass(eq=False)
class Fault:
    """One fault of a :class:`FaultStore` (made by its :meth:`~FaultStore.fail`,
    :meth:`~FaultStore.tear`, :meth:`~FaultStore.delay`)."""

    ops: frozenset[Op]
    action: Literal["fail", "tear", "delay"]
    key: KeyMatch = None
    nth: int = 1
    times: int | None = 1
    error: ErrorSpec = None
    after: bool = False
    keep: int | float = 0
    seconds: float = 0.0
    wait: Callable[[], object] | None = None
    seen: int = 0
    """Matching calls so far."""
    fired: int = 0
    """Calls this fault acted on so far."""
    keys: list[str] = field(default_factory=list)
    """The keys of the calls it acted on."""

    def matches(self, op: Op, keys: list[str]) -> bool:
        if op not in self.ops:
            return False
        if self.key is None:
            return True
        if isinstance(self.key, str):
            return self.key in keys
        return any(self.key(k) for k in keys)

    def due(self) -> bool:
        """Counts one matching call; whether the fault acts on it."""
        self.seen += 1
        if self.seen < self.nth or (self.times is not None and self.fired >= self.times):
            return False
        self.fired += 1
        return True

    def exception(self, op: Op, key: str) -> BaseException:
        if self.error is None:
            return StoreIOError(f"injected fault: {self.action} of {op} {key}")
        if isinstance(self.error, BaseException):
            return self.error
        return self.error(op, key)

    def kept(self, n: int) -> int:
        """How many of ``n`` bytes a tear keeps."""
        if isinstance(self.keep, float):
            return int(n * self.keep)
        return min(self.keep, n)


def _ops(op: Op | tuple[Op, ...]) -> frozenset[Op]:
    ops = frozenset((op,) if isinstance(op, str) else op)
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        raise ValueError(f"unknown operations {unknown}; expected some of {OPS}")
    return ops


def _counts(nth: int, times: int | None) -> None:
    if nth < 1 or (times is not None and times < 1):
        raise ValueError(f"nth must be >= 1 and times >= 1 or None, got {nth}, {times}")


class FaultStore(ObjectStore):
    """An object store that misbehaves on cue (see the module docstring)."""

    def __init__(self, inner: ObjectStore) -> None:
        """Args:
        inner: The store every call goes to (it keeps its own counters).
        """
        super().__init__(inner.url)
        self.inner = inner
        self.faults: list[Fault] = []
        """The faults installed, oldest first."""
        self.calls: list[Call] = []
        """Every call made through this store, in order."""
        self._lock = threading.Lock()

    # ------------------------------------------------------------ choosing faults

    def fail(
        self,
        op: Op | tuple[Op, ...],
        *,
        key: KeyMatch = None,
        nth: int = 1,
        times: int | None = 1,
        error: ErrorSpec = None,
        after: bool = False,
    ) -> Fault:
        """Makes matching calls raise ``error`` (``after``: once the call went through)."""
        _counts(nth, times)
        return self._add(Fault(_ops(op), "fail", key, nth, times, error, after))

    def tear(
        self,
        op: Op | tuple[Op, ...],
        *,
        keep: int | float,
        key: KeyMatch = None,
        nth: int = 1,
        times: int | None = 1,
        error: ErrorSpec = None,
    ) -> Fault:
        """Makes matching writes store only ``keep`` bytes (an int, or a fraction in
        [0, 1) of the data) and raise ``error``; matching reads return only ``keep`` bytes.

        Raises:
            ValueError: ``op`` names neither a write nor a read, or ``keep`` is negative.
        """
        ops = _ops(op)
        if not ops <= set(_WRITES + _READS):
            raise ValueError(f"only {_WRITES + _READS} can be torn, not {sorted(ops)}")
        if keep < 0 or (isinstance(keep, float) and keep >= 1):
            raise ValueError(f"keep must be bytes >= 0 or a fraction in [0, 1), got {keep}")
        _counts(nth, times)
        return self._add(Fault(ops, "tear", key, nth, times, error, keep=keep))

    def delay(
        self,
        op: Op | tuple[Op, ...],
        *,
        seconds: float = 0.0,
        wait: Callable[[], object] | None = None,
        key: KeyMatch = None,
        nth: int = 1,
        times: int | None = 1,
    ) -> Fault:
        """Makes matching calls first run ``wait()`` and/or sleep ``seconds``."""
        _counts(nth, times)
        return self._add(Fault(_ops(op), "delay", key, nth, times, seconds=seconds, wait=wait))

    def clear(self) -> None:
        """Removes every fault (the call log stays)."""
        with self._lock:
            self.faults.clear()

    def _add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    # ------------------------------------------------------------ applying them

    def _due(self, op: Op, keys: list[str]) -> list[Fault]:
        """Logs the call; the faults that act on it (delays run here, outside the lock)."""
        with self._lock:
            self.calls.append(Call(op, keys[0] if keys else ""))
            acting = [f for f in self.faults if f.matches(op, keys) and f.due()]
            for f in acting:
                f.keys.append(keys[0] if keys else "")
        for f in acting:
            if f.action == "delay":
                if f.wait is not None:
                    f.wait()
                if f.seconds:
                    time.sleep(f.seconds)
        return [f for f in acting if f.action != "delay"]

    def _around(self, op: Op, keys: list[str], call: Callable[[], object]) -> object:
        faults = self._due(op, keys)
        key = keys[0] if keys else ""
        before = [f for f in faults if f.action == "fail" and not f.after]
        if before:
            raise before[0].exception(op, key)
        result = call()
        after = [f for f in faults if f.action == "fail" and f.after]
        if after:
            raise after[0].exception(op, key)
        return result

    def _write(
        self, op: Op, key: str, data: bytes | bytearray | memoryview, write: Callable[..., None]
    ) -> None:
        faults = self._due(op, [key])
        fail = [f for f in faults if f.action == "fail" and not f.after]
        if fail:
            raise fail[0].exception(op, key)
        torn = [f for f in faults if f.action == "tear"]
        if torn:
            view = memoryview(data).cast("B")
            write(key, bytes(view[: torn[0].kept(len(view))]))
            raise torn[0].exception(op, key)
        write(key, data)
        after = [f for f in faults if f.action == "fail" and f.after]
        if after:
            raise after[0].exception(op, key)

    def _read(self, op: Op, key: str, read: Callable[[], bytes]) -> bytes:
        faults = self._due(op, [key])
        fail = [f for f in faults if f.action == "fail" and not f.after]
        if fail:
            raise fail[0].exception(op, key)
        data = read()
        after = [f for f in faults if f.action == "fail" and f.after]
        if after:
            raise after[0].exception(op, key)
        torn = [f for f in faults if f.action == "tear"]
        return data[: torn[0].kept(len(data))] if torn else data

    # ------------------------------------------------------------ the interface

    def _get(self, key: str) -> bytes:
        return self._read("get", key, lambda: self.inner.get(key))

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        return self._read("get_range", key, lambda: self.inner.get_range(key, start, length))

    def _put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self._write("put", key, data, self.inner.put)

    def _put_if_absent(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self._write("put_if_absent", key, data, self.inner.put_if_absent)

    def _put_new(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self._write("put_new", key, data, self.inner.put_new)

    def location(self, key: str) -> str:
        """Where the inner store keeps ``key``."""
        return self.inner.location(key)

    def check_conditional_writes(self) -> None:
        """The inner store's probe (once per inner store)."""
        self.inner.ensure_conditional_writes()

    @property
    def wants_object_cache(self) -> bool:  # type: ignore[override]
        """The inner store's."""
        return self.inner.wants_object_cache

    @property
    def trusts_mtime_for_orphans(self) -> bool:  # type: ignore[override]
        """The inner store's."""
        return self.inner.trusts_mtime_for_orphans

    def local_path(self, key: str) -> str | None:
        """None: a reader that mapped the inner store's file would pass every fault by."""
        return None

    def abandoned_temporaries(self, prefix: str, *, min_age: float) -> list[str]:
        """The inner store's."""
        return self.inner.abandoned_temporaries(check_prefix(prefix), min_age=min_age)

    def _list(self, prefix: str) -> tuple[list[ObjectInfo], int]:
        infos = self._around("list", [prefix], lambda: self.inner.list(prefix))
        assert isinstance(infos, list)
        return infos, 1

    def _delete(self, key: str) -> None:
        self._around("delete", [key], lambda: self.inner.delete(key))

    def _delete_many(self, keys: list[str]) -> int:
        self._around("delete_many", keys, lambda: self.inner.delete_many(keys))
        return 1

    def _delete_each(
        self, keys: list[str], ordered: bool, before_each: Callable[[str], None]
    ) -> int:
        def delete() -> None:
            self.inner.delete_many(keys, ordered=ordered, before_each=before_each)

        self._around("delete_many", keys, delete)
        return 1

    def _head(self, key: str) -> ObjectInfo:
        info = self._around("head", [key], lambda: self.inner.head(key))
        assert isinstance(info, ObjectInfo)
        return info
