"""Every name of a table's on-disk layout, in one place.

::

    <root>/
      _table.json                          table id, bucket count, creation time
      _schema/00000000.json                one file per schema id
      _log/00000000000000000042.json       one log entry per version (storage.version_log)
      _log/_checkpoint.00000000000000000040.json
      _wal/<bucket>/<version>-<attempt>.wal            change segments (storage.segments)
      _snapshots/<bucket>/<version>-<attempt>.manifest snapshot manifests (storage.snapshot)
      _pages/<bucket>/<version>-<attempt>.pages        snapshot pages
      _rejects/<version>-<attempt>.arrow               a version's rejected events

Paths stored in log entries and manifests are relative to the table root and use ``/``.
A file name of the three bucket directories starts with the zero-padded version that wrote
it (:func:`file_version`); ``<attempt>`` is random, so two writers racing for one version
never write the same file.
"""

from __future__ import annotations

import os
import re
import uuid

__all__ = [
    "BUCKET_DIRS",
    "LOG_DIR",
    "PAGES_DIR",
    "REJECTS_DIR",
    "SCHEMA_DIR",
    "SNAPSHOTS_DIR",
    "TABLE_FILE",
    "WAL_DIR",
    "attempt_stem",
    "checkpoint_name",
    "entry_name",
    "file_version",
    "is_table",
    "pages_file",
    "rejects_file",
    "schema_file",
    "segment_file",
    "snapshot_manifest",
    "table_file",
]

TABLE_FILE = "_table.json"
"""The table's identity file; its presence is what makes a directory a table."""
SCHEMA_DIR = "_schema"
LOG_DIR = "_log"
WAL_DIR = "_wal"
SNAPSHOTS_DIR = "_snapshots"
PAGES_DIR = "_pages"
REJECTS_DIR = "_rejects"
BUCKET_DIRS: tuple[str, ...] = (WAL_DIR, SNAPSHOTS_DIR, PAGES_DIR)
"""The directories that hold one sub-directory per bucket of version-named files."""

_VERSIONED = re.compile(r"^(\d{20})-[0-9a-f]+\.(?:wal|manifest|pages|arrow)$")


def table_file(root: str) -> str:
    """The absolute path of the table's identity file."""
    return os.path.join(root, TABLE_FILE)


def is_table(root: str) -> bool:
    """Whether ``root`` holds a table (its identity file exists)."""
    return os.path.exists(table_file(root))


def schema_file(root: str, schema_id: int) -> str:
    """The absolute path of schema ``schema_id``'s file."""
    return os.path.join(root, SCHEMA_DIR, f"{schema_id:08d}.json")


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


def rejects_file(stem: str) -> str:
    """The relative path of a version's rejected events."""
    return f"{REJECTS_DIR}/{stem}.arrow"


def file_version(name: str) -> int | None:
    """The version a segment, snapshot, page or rejects file was written for.

    Returns:
        The version, or None when ``name`` is not a file this layout writes.
    """
    m = _VERSIONED.match(os.path.basename(name))
    return int(m.group(1)) if m else None
