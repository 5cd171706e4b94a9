"""Every name cdc_sink writes on disk, in one place: a table's layout, and the files of
the Parquet dead-letter sink.

::

    <root>/
      _table.json                          written once at creation: the layout's format,
                                           page_rows, the key index's seed (index_seed)
      _schema/00000000.json                one file per schema id
      _log/00000000000000000042.json       one log entry per version (storage.version_log)
      _log/_checkpoint.00000000000000000040.json
      _log/_last_checkpoint                the newest checkpoint the writer wrote, with
                                           the entry of its version (an optional hint:
                                           an open starts from it; storage.version_log)
      _wal/<bucket>/<version>-<attempt>.wal            change segments (storage.segments)
      _snapshots/<bucket>/<version>-<attempt>.manifest snapshot manifests (storage.snapshot)
      _pages/<bucket>/<version>-<attempt>.pages        snapshot pages
      _rejects/<version>-<attempt>.arrow               a version's rejected events
      _change_data/<bucket>/<version>-<attempt>.arrow  the pre-images of a version's keys
                                           (TableOptions.change_images; cdc_sink.changefeed)
      _dead_letters/<tag>.cursor           forwarding cursor of a dead-letter sink that
                                           keeps none (cdc_sink.dead_letters)

    <dead-letter dir>/                     ParquetDeadLetter (outside any table)
      version-<version:020d>-<app tag>.parquet   one table version's dead letters
      batch-<batch_id:012d>-<attempt>.parquet    records written directly (write())
      .tmp-<name>-<pid>-<random>                 only while being written

Paths stored in log entries and manifests are relative to the table root and use ``/``.
A file name of the four bucket directories starts with the zero-padded version that wrote
it (:func:`file_version`); ``<attempt>`` is random, so two writers racing for one version
never write the same file.

Every path read back from a table file (a log entry's segment, snapshot and rejects file,
a checkpoint's snapshots and segments, a manifest's page files) goes through
:func:`checked` before anything is opened: it must be one of the names above, of the kind
the reference is for, so a damaged or tampered file can never make cdc_sink open (or GC
delete) a file outside the table.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Final, Literal

from cdc_sink.errors import WalCorruption

__all__ = [
    "BUCKET_DIRS",
    "CHANGE_DATA_DIR",
    "DEAD_LETTERS_DIR",
    "LAST_CHECKPOINT_KEY",
    "LOG_DIR",
    "PAGES_DIR",
    "REJECTS_DIR",
    "SCHEMA_DIR",
    "SNAPSHOTS_DIR",
    "TABLE_FILE",
    "WAL_DIR",
    "PathKind",
    "attempt_stem",
    "checked",
    "checkpoint_name",
    "dead_letter_batch_file",
    "dead_letter_cursor",
    "dead_letter_cursor_key",
    "dead_letter_files",
    "dead_letter_version_file",
    "dead_letter_versions",
    "entry_name",
    "file_version",
    "images_file",
    "is_table",
    "kind_of",
    "pages_file",
    "rejects_file",
    "schema_file",
    "schema_key",
    "segment_file",
    "snapshot_manifest",
    "table_file",
    "table_path",
]

TABLE_FILE = "_table.json"
"""The table's identity file; its presence is what makes a directory a table."""
SCHEMA_DIR = "_schema"
LOG_DIR = "_log"
WAL_DIR = "_wal"
SNAPSHOTS_DIR = "_snapshots"
PAGES_DIR = "_pages"
REJECTS_DIR = "_rejects"
DEAD_LETTERS_DIR = "_dead_letters"
CHANGE_DATA_DIR = "_change_data"
LAST_CHECKPOINT_KEY = f"{LOG_DIR}/_last_checkpoint"
"""The store key of the last-checkpoint pointer (it sorts after every entry and
checkpoint of ``_log``, so a listing that starts after an entry lists it too)."""
BUCKET_DIRS: tuple[str, ...] = (WAL_DIR, SNAPSHOTS_DIR, PAGES_DIR, CHANGE_DATA_DIR)
"""The directories that hold one sub-directory per bucket of version-named files."""

_VERSIONED = re.compile(r"^(\d{20})-[0-9a-f]+\.(?:wal|manifest|pages|arrow)$")

PathKind = Literal["segment", "snapshot", "pages", "rejects", "images", "entry", "checkpoint"]
"""What a path stored in a table file refers to (see :func:`checked`)."""

_STEM = r"[0-9]{20}-[0-9a-f]+"
_KIND_PATTERNS: Final[dict[PathKind, re.Pattern[str]]] = {
    "segment": re.compile(rf"{WAL_DIR}/[0-9]+/{_STEM}\.wal", re.ASCII),
    "snapshot": re.compile(rf"{SNAPSHOTS_DIR}/[0-9]+/{_STEM}\.manifest", re.ASCII),
    "pages": re.compile(rf"{PAGES_DIR}/[0-9]+/{_STEM}\.pages", re.ASCII),
    "rejects": re.compile(rf"{REJECTS_DIR}/{_STEM}\.arrow", re.ASCII),
    "images": re.compile(rf"{CHANGE_DATA_DIR}/[0-9]+/{_STEM}\.arrow", re.ASCII),
    "entry": re.compile(rf"{LOG_DIR}/[0-9]{{20}}\.json", re.ASCII),
    "checkpoint": re.compile(rf"{LOG_DIR}/_checkpoint\.[0-9]{{20}}\.json", re.ASCII),
}
_SHOWN_CHARS = 80  # of a bad path, in an error message


def table_file(root: str) -> str:
    """The absolute path of the table's identity file."""
    return os.path.join(root, TABLE_FILE)


def is_table(root: str) -> bool:
    """Whether ``root`` holds a table (its identity file exists)."""
    return os.path.exists(table_file(root))


def schema_file(root: str, schema_id: int) -> str:
    """The absolute path of schema ``schema_id``'s file."""
    return os.path.join(root, *schema_key(schema_id).split("/"))


def schema_key(schema_id: int) -> str:
    """The store key (relative to the table) of schema ``schema_id``'s file."""
    return f"{SCHEMA_DIR}/{schema_id:08d}.json"


def entry_name(version: int) -> str:
    """The file name (inside :data:`LOG_DIR`) of version ``version``'s log entry."""
    return f"{version:020d}.json"


def checkpoint_name(version: int) -> str:
    """The file name (inside :data:`LOG_DIR`) of the checkpoint written at ``version``."""
    return f"_checkpoint.{version:020d}.json"


def attempt_stem(version: int) -> str:
    """``<version>-<attempt>``: the stem of a new file written for ``version``."""
    return f"{version:020d}-{uuid.uuid4().hex[:12]}"


def segment_file(bucket: int, stem: str) -> str:
    """The relative path of a change segment of ``bucket``."""
    return f"{WAL_DIR}/{bucket}/{stem}.wal"


def snapshot_manifest(bucket: int, stem: str) -> str:
    """The relative path of a snapshot manifest of ``bucket``."""
    return f"{SNAPSHOTS_DIR}/{bucket}/{stem}.manifest"


def pages_file(bucket: int, stem: str) -> str:
    """The relative path of a snapshot's page file of ``bucket``."""
    return f"{PAGES_DIR}/{bucket}/{stem}.pages"


def images_file(bucket: int, stem: str) -> str:
    """The relative path of the pre-images a version wrote for ``bucket``'s change feed."""
    return f"{CHANGE_DATA_DIR}/{bucket}/{stem}.arrow"


def rejects_file(stem: str) -> str:
    """The relative path of a version's rejected events."""
    return f"{REJECTS_DIR}/{stem}.arrow"


def dead_letter_cursor_key(tag: str) -> str:
    """The store key of the forwarding cursor of the dead-letter sink ``tag``."""
    return f"{DEAD_LETTERS_DIR}/{tag}.cursor"


def dead_letter_cursor(root: str, tag: str) -> str:
    """The absolute path of the forwarding cursor of the dead-letter sink ``tag``."""
    return os.path.join(root, *dead_letter_cursor_key(tag).split("/"))


def dead_letter_version_file(version: int, app_tag: str) -> str:
    """The file name (in a Parquet dead-letter directory) of one table version's dead
    letters of the writer tagged ``app_tag``."""
    return f"version-{version:020d}-{app_tag}.parquet"


def dead_letter_batch_file(batch_id: int | None, attempt: str) -> str:
    """The file name of records of micro-batch ``batch_id`` written directly."""
    return f"batch-{'none' if batch_id is None else f'{batch_id:012d}'}-{attempt}.parquet"


def dead_letter_versions(names: list[str], app_tag: str) -> list[int]:
    """The versions of the version files among ``names`` of the writer ``app_tag``."""
    pat = re.compile(rf"^version-(\d{{20}})-{re.escape(app_tag)}\.parquet$")
    return [int(m.group(1)) for n in names if (m := pat.match(n))]


def dead_letter_files(names: list[str]) -> list[str]:
    """The published dead-letter files among ``names`` (temporary files left out)."""
    return [n for n in names if re.match(r"^(?:batch|version)-[^/]*\.parquet$", n)]


def file_version(name: str) -> int | None:
    """The version a segment, snapshot, page or rejects file was written for.

    Returns:
        The version, or None when ``name`` is not a file this layout writes.
    """
    m = _VERSIONED.match(os.path.basename(name))
    return int(m.group(1)) if m else None


def _why_not(kind: str, rel: object) -> str:
    """Why ``rel`` is not a ``kind`` path of the layout (the wording of the error)."""
    if not isinstance(rel, str):
        return f"not a string but {type(rel).__name__}"
    if "\x00" in rel:
        return "it holds a NUL character"
    if "\\" in rel:
        return "it holds a backslash"
    if rel.startswith("/") or os.path.isabs(rel):
        return "it is absolute"
    parts = rel.split("/")
    if ".." in parts:
        return "it climbs out with '..'"
    if "." in parts or "" in parts:
        return "it is not normalized"
    return f"it is not the name of a {kind} file"


def _shown(rel: object) -> str:
    """``rel`` for an error message: escaped (repr) and cut to a few dozen characters."""
    text = repr(rel)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def checked(kind: PathKind, rel: object, *, source: str, ref: str | None = None) -> str:
    """``rel``, a path read from the table file ``source``, once it is known to name a
    ``kind`` file of this layout inside the table.

    A path passes only if it is relative, normalized (no ``.``, ``..`` or empty part),
    free of NUL and backslash characters, and matches the layout's name of its kind
    (``_wal/<bucket>/<version>-<attempt>.wal`` for a segment, and so on). Nothing is
    opened: the check is on the name alone, so a refused path's target is never read.

    Args:
        kind: What the reference is for: ``"segment"``, ``"snapshot"`` (a manifest),
            ``"pages"``, ``"rejects"``, ``"images"``, ``"entry"`` or ``"checkpoint"``.
        rel: The path as stored (any JSON value).
        source: The file that holds the reference (named by the error).
        ref: Where in ``source`` the reference is (e.g. ``"bucket 3 segment"``).

    Returns:
        ``rel``.

    Raises:
        WalCorruption: ``rel`` is not such a path; the message names ``source``, the
            kind of reference and why, shows ``rel`` escaped and shortened, and holds
            nothing of any file's content.
        ValueError: ``kind`` is unknown.
    """
    pattern = _KIND_PATTERNS.get(kind)
    if pattern is None:
        raise ValueError(f"unknown path kind {kind!r}; expected one of {sorted(_KIND_PATTERNS)}")
    if isinstance(rel, str) and pattern.fullmatch(rel):
        return rel
    where = f" ({ref})" if ref else ""
    raise WalCorruption(
        f"a table file names an invalid {kind} path{where} {_shown(rel)}: "
        f"{_why_not(kind, rel)}; refusing to open it",
        path=source,
        offset=0,
    )


def table_path(root: str, kind: PathKind, rel: object, *, source: str) -> str:
    """The path under ``root`` of ``rel`` (:func:`checked` first).

    Raises:
        WalCorruption: As :func:`checked`.
    """
    return os.path.join(root, checked(kind, rel, source=source))


def kind_of(rel: str) -> PathKind | None:
    """The kind of file ``rel`` (relative to the table root) names, or None when it is
    no file name of this layout (see :func:`checked`)."""
    for kind, pattern in _KIND_PATTERNS.items():
        if pattern.fullmatch(rel):
            return kind
    return None
