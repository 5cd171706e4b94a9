"""The records of the version log: log entries, bucket references and checkpoints.

A :class:`LogEntry` is one committed version (what it changed, per bucket: a WAL segment
and/or a snapshot, the writer's ``app_id``/``batch_id``, commit time, schema id, stats,
rejects file and source offsets); a :class:`Checkpoint` is what GC keeps of the entries it
deletes. Both serialize to the JSON payload of one framed record
(:mod:`cdc_sink.storage.version_log` draws the files). Parsing validates every field's
type, so a record with a valid CRC but wrong content is refused with ``ValueError``
(the log turns that into :class:`~cdc_sink.errors.WalCorruption`). The paths a record
names are checked by ``check_paths`` (:func:`cdc_sink.storage.layout.checked`), which the
log calls on every record it reads from disk before anything uses them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from cdc_sink.storage.layout import checked

__all__ = ["BucketRef", "Checkpoint", "LogEntry"]

# ---------------------------------------------------------------- typed JSON helpers


def _int(value: object, what: str) -> int:
    if type(value) is not int:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return value


def _opt_int(value: object, what: str) -> int | None:
    return None if value is None else _int(value, what)


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def _opt_str(value: object, what: str) -> str | None:
    return None if value is None else _str(value, what)


def _dict(value: object, what: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be a dict, not {type(value).__name__}")
    return value


def _bucket_key(key: object, what: str) -> int:
    """A bucket id: an int in memory, a decimal string in JSON."""
    if isinstance(key, str) and key.isdigit():
        return int(key)
    bucket = _int(key, what)
    if bucket < 0:
        raise ValueError(f"{what} must be >= 0, got {bucket}")
    return bucket


_V = TypeVar("_V")


def _by_bucket(d: dict[str, Any], key: str, value: Callable[[Any], _V]) -> dict[int, _V]:
    """``d[key]``, a JSON object keyed by bucket id, with int keys and ``value`` of each value."""
    return {_bucket_key(b, "bucket id"): value(v) for b, v in _dict(d[key], key).items()}


def _loads(text: str | bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from None
    return _dict(obj, what)


# ---------------------------------------------------------------- entries

_J = TypeVar("_J", bound="_JsonRecord")


class _JsonRecord:
    """What the log's JSON records share: parsing (``_from_dict`` and ``_WHAT`` per class)."""

    _WHAT: ClassVar[str] = "record"

    @classmethod
    def from_json(cls: type[_J], text: str | bytes) -> _J:
        """Parse :meth:`to_json` output; unknown keys are ignored.

        Raises:
            ValueError: Not JSON, or a field is missing or of the wrong type.
        """
        return _parse(text, cls._WHAT, cls._from_dict)

    @classmethod
    def _from_dict(cls: type[_J], d: dict[str, Any]) -> _J:
        raise NotImplementedError


def _dumps(obj: dict[str, Any]) -> str:
    """Compact, key-sorted JSON (no NaN)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class BucketRef:
    """What one bucket contributes to a version (paths relative to the table root).

    Attributes:
        segment: The WAL segment holding the bucket's transaction, if any.
        snapshot: A snapshot of the bucket written at this version, if any.
        images: The pre-images of the keys the segment's events name, written with it
            for the change feed (``TableOptions.change_images``), if any.
    """

    segment: str | None
    snapshot: str | None = None
    images: str | None = None

    def __post_init__(self) -> None:
        _opt_str(self.segment, "BucketRef.segment")
        _opt_str(self.snapshot, "BucketRef.snapshot")
        _opt_str(self.images, "BucketRef.images")

    def to_dict(self) -> dict[str, str | None]:
        """The JSON object form (``images`` only when set: entries without it read as
        before)."""
        d = {"segment": self.segment, "snapshot": self.snapshot}
        if self.images is not None:
            d["images"] = self.images
        return d

    @classmethod
    def from_dict(cls, obj: object) -> BucketRef:
        """Parse the JSON object form.

        Raises:
            TypeError: A field has the wrong type.
            KeyError: A field is missing.
        """
        d = _dict(obj, "bucket ref")
        return cls(segment=d["segment"], snapshot=d["snapshot"], images=d.get("images"))


@dataclass(frozen=True)
class LogEntry(_JsonRecord):
    """The log entry of one version: what the commit wrote and who wrote it.

    Attributes:
        version: The version this entry commits.
        app_id: The writing application (streaming query) for idempotency, or ``None``.
        batch_id: The application's micro-batch id; set exactly when ``app_id`` is.
        commit_time_ms: Commit time, milliseconds since the epoch (time travel).
        schema_id: The schema the version is written under.
        buckets: Per touched bucket, its WAL segment and/or snapshot.
        stats: Counters of the commit (rows inserted, rejected, ...).
        kind: ``"data"`` for a micro-batch; other kinds are the table layer's.
        rejects: The file holding the events this version refused (storage/rejects.py),
            written before the entry; ``None`` when it refused none.
        source_offsets: Where the batch ended in its source: per Kafka topic, per
            partition (decimal string), the offset after the batch's last record there.
            Lets a version be checked against its input from the table alone.
    """

    _WHAT: ClassVar[str] = "log entry"

    version: int
    app_id: str | None
    batch_id: int | None
    commit_time_ms: int
    schema_id: int
    buckets: dict[int, BucketRef] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    kind: str = "data"
    rejects: str | None = None
    source_offsets: dict[str, dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if _int(self.version, "version") < 0:
            raise ValueError(f"version must be >= 0, got {self.version}")
        _opt_str(self.app_id, "app_id")
        _opt_int(self.batch_id, "batch_id")
        if (self.app_id is None) != (self.batch_id is None):
            raise ValueError("app_id and batch_id are given together or not at all")
        _int(self.commit_time_ms, "commit_time_ms")
        _int(self.schema_id, "schema_id")
        for bucket, ref in _dict(self.buckets, "buckets").items():
            _bucket_key(bucket, "bucket id")
            if not isinstance(ref, BucketRef):
                raise TypeError(f"buckets[{bucket}] must be a BucketRef")
        for name, value in _dict(self.stats, "stats").items():
            _str(name, "stats key")
            _int(value, f"stats[{name!r}]")
        if not _str(self.kind, "kind"):
            raise ValueError("kind must not be empty")
        _opt_str(self.rejects, "rejects")
        for topic, parts in _dict(self.source_offsets, "source_offsets").items():
            _str(topic, "source topic")
            for part, off in _dict(parts, f"source_offsets[{topic!r}]").items():
                _str(part, "source partition")
                _int(off, f"source_offsets[{topic!r}][{part!r}]")

    def check_paths(self, source: str) -> None:
        """Checks that every path the entry names is a file of its kind inside the table.

        Args:
            source: The entry's file (named by the error).

        Raises:
            WalCorruption: A segment, snapshot, images or rejects path is not one
                (:func:`cdc_sink.storage.layout.checked`).
        """
        for bucket, ref in self.buckets.items():
            if ref.segment is not None:
                checked("segment", ref.segment, source=source, ref=f"bucket {bucket} segment")
            if ref.snapshot is not None:
                checked("snapshot", ref.snapshot, source=source, ref=f"bucket {bucket} snapshot")
            if ref.images is not None:
                checked("images", ref.images, source=source, ref=f"bucket {bucket} images")
        if self.rejects is not None:
            checked("rejects", self.rejects, source=source, ref="rejects")

    def summary(self) -> dict[str, Any]:
        """What :meth:`Table.versions <cdc_sink.table.Table.versions>` lists of it."""
        return {
            "version": self.version,
            "kind": self.kind,
            "app_id": self.app_id,
            "batch_id": self.batch_id,
            "commit_time_ms": self.commit_time_ms,
            "schema_id": self.schema_id,
            "buckets": sorted(int(b) for b in self.buckets),
            "stats": dict(self.stats),
        }

    def to_json(self) -> str:
        """Compact, key-sorted JSON (bucket ids become decimal strings)."""
        obj: dict[str, Any] = {
            "version": self.version,
            "app_id": self.app_id,
            "batch_id": self.batch_id,
            "commit_time_ms": self.commit_time_ms,
            "schema_id": self.schema_id,
            "buckets": {str(b): ref.to_dict() for b, ref in sorted(self.buckets.items())},
            "stats": dict(self.stats),
            "kind": self.kind,
        }
        if self.rejects is not None:
            obj["rejects"] = self.rejects
        if self.source_offsets:
            obj["source_offsets"] = {
                t: dict(sorted(p.items())) for t, p in sorted(self.source_offsets.items())
            }
        return _dumps(obj)

    @classmethod
    def _from_dict(cls, d: dict[str, Any]) -> LogEntry:
        return cls(
            version=d["version"],
            app_id=d["app_id"],
            batch_id=d["batch_id"],
            commit_time_ms=d["commit_time_ms"],
            schema_id=d["schema_id"],
            buckets=_by_bucket(d, "buckets", BucketRef.from_dict),
            stats=_dict(d["stats"], "stats"),
            kind=d.get("kind", "data"),
            rejects=d.get("rejects"),
            source_offsets=_dict(d.get("source_offsets", {}), "source_offsets"),
        )


@dataclass(frozen=True)
class Checkpoint(_JsonRecord):
    """What the log says as of one version, so that entries below it may be deleted.

    Attributes:
        version: The version it summarizes (entries up to and including it).
        app_ids: The idempotency table: last committed ``batch_id`` per ``app_id``.
        bucket_snapshots: Per bucket, the snapshot readers start from (or ``None``).
        schema_id: The schema id at ``version``.
        extra: Anything else the table layer wants kept (JSON-serializable).
    """

    _WHAT: ClassVar[str] = "checkpoint"

    version: int
    app_ids: dict[str, int]
    bucket_snapshots: dict[int, str | None]
    schema_id: int
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if _int(self.version, "version") < 0:
            raise ValueError(f"version must be >= 0, got {self.version}")
        for app, batch in _dict(self.app_ids, "app_ids").items():
            _str(app, "app id")
            _int(batch, f"app_ids[{app!r}]")
        for bucket, snap in _dict(self.bucket_snapshots, "bucket_snapshots").items():
            _bucket_key(bucket, "bucket id")
            _opt_str(snap, f"bucket_snapshots[{bucket}]")
        _int(self.schema_id, "schema_id")
        _dict(self.extra, "extra")

    def check_paths(self, source: str) -> None:
        """Checks that every snapshot path the checkpoint names is a manifest inside the
        table (the segments in ``extra`` are the table layer's, which checks them).

        Args:
            source: The checkpoint's file (named by the error).

        Raises:
            WalCorruption: A path is not one (:func:`cdc_sink.storage.layout.checked`).
        """
        for bucket, snap in self.bucket_snapshots.items():
            if snap is not None:
                checked("snapshot", snap, source=source, ref=f"bucket {bucket} snapshot")

    def to_json(self) -> str:
        """Compact, key-sorted JSON (bucket ids become decimal strings)."""
        obj = {
            "version": self.version,
            "app_ids": dict(self.app_ids),
            "bucket_snapshots": {str(b): s for b, s in sorted(self.bucket_snapshots.items())},
            "schema_id": self.schema_id,
            "extra": self.extra,
        }
        return _dumps(obj)

    @classmethod
    def _from_dict(cls, d: dict[str, Any]) -> Checkpoint:
        return cls(
            version=d["version"],
            app_ids=_dict(d["app_ids"], "app_ids"),
            bucket_snapshots=_by_bucket(d, "bucket_snapshots", lambda snap: snap),
            schema_id=d["schema_id"],
            extra=_dict(d.get("extra", {}), "extra"),
        )


_R = TypeVar("_R")


def _parse(text: str | bytes, what: str, build: Callable[[dict[str, Any]], _R]) -> _R:
    r"""``build`` of the JSON object in ``text``, with its errors as ``ValueError``\s."""
    d = _loads(text, what)
    try:
        return build(d)
    except KeyError as exc:
        raise ValueError(f"{what} lacks field {exc}") from None
    except TypeError as exc:
        raise ValueError(f"{what}: {exc}") from None
