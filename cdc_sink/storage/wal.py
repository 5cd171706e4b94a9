"""WAL segments: one bucket's transaction for one commit attempt, durable before commit.

A segment is a write-once file (its path is chosen by the caller, unique per attempt)::

    <segment>.wal
    ┌──────────────────┬────────────────────┬────────────────────┬─ ─ ─
    │ "CDCWAL" 00 01   │ len │ crc │ rec 0  │ len │ crc │ rec 1  │ ...     (framing.py)
    └──────────────────┴────────────────────┴────────────────────┴─ ─ ─
      8-byte header      each record: u32 LE length, u32 LE CRC32C, payload

Lifecycle::

    SegmentWriter(path)        open(O_CREAT|O_EXCL), write the header   (never overwrites)
      .append(payload) ...     buffered writes of framed records
      .finish()                flush ─ [wal.written] ─ fsync file ─ fsync dir ─ [wal.fsynced]
                               -> SegmentInfo(path, length, records, crc)
    log entry v names it       (version_log.py) the segment becomes part of version v
    read_segment(path, repair=False)   replay; any damage raises WalCorruption

A segment is referenced by a log entry only after ``finish`` returned, so a committed
segment is always complete on disk: read it with ``repair=False``. A segment that no
committed entry names is an orphan of a failed attempt and is deleted, not repaired.
``repair=True`` exists for recovery tools: it truncates a torn tail on disk (see
framing.py for what counts as torn) and returns the records before it.
"""

from __future__ import annotations

import contextlib
import os
import types
from dataclasses import dataclass

import google_crc32c

from cdc_sink.storage import faults
from cdc_sink.storage.framing import MAX_PAYLOAD, read_records, record_crc
from cdc_sink.storage.fsutil import (
    DEFAULT_FILE_MODE,
    create_file,
    fsync_dir,
    fsync_file,
    remove,
    truncate_durable,
)

__all__ = [
    "WAL_MAGIC",
    "SegmentInfo",
    "SegmentWriter",
    "decode_segment",
    "encode_segment",
    "read_segment",
]

WAL_MAGIC = b"CDCWAL\x00\x01"
"""Header of a WAL segment: ``CDCWAL`` + format version 1 (big-endian u16)."""

faults.register("wal.written", "wal.fsynced")


@dataclass(frozen=True)
class SegmentInfo:
    """A finished, durable segment (picklable: it travels in commit messages).

    Attributes:
        path: The segment file.
        length: Its size in bytes, header included.
        records: How many records it holds.
        crc: CRC32C of the whole file.
    """

    path: str
    length: int
    records: int
    crc: int


class SegmentWriter:
    """Writes one WAL segment; the file is created exclusively and never overwritten.

    Use as a context manager to delete the file again unless :meth:`finish` succeeded::

        with SegmentWriter(path) as w:
            w.append(payload)
            info = w.finish()
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        buffer_size: int = 1 << 20,
        mode: int = DEFAULT_FILE_MODE,
    ) -> None:
        """Create the segment file and write its header.

        Args:
            path: The segment's file name; its directory must exist.
            buffer_size: Write buffer in bytes.
            mode: The file's permission bits (the umask may clear more).

        Raises:
            FileExistsError: The file exists.
            OSError: Any other I/O failure.
        """
        self.path = os.fspath(path)
        self._file = create_file(self.path, buffering=buffer_size, mode=mode)
        self._length = 0
        self._records = 0
        self._crc = 0
        self._done = False
        try:
            self._write(WAL_MAGIC)
        except BaseException:
            self.abort()
            raise

    def _write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self._crc = int(google_crc32c.extend(self._crc, chunk))
        self._length += len(chunk)

    @property
    def length(self) -> int:
        """Bytes written so far, header included."""
        return self._length

    @property
    def records(self) -> int:
        """Records appended so far."""
        return self._records

    def append(self, payload: bytes) -> None:
        """Append one record.

        Args:
            payload: The record's bytes.

        Raises:
            ValueError: The writer is finished or aborted, or the payload is too long.
            OSError: An I/O failure (the segment is then unusable: :meth:`abort` it).
        """
        if self._done:
            raise ValueError(f"segment {self.path} is closed")
        payload = bytes(payload)
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"record payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
        length = len(payload).to_bytes(4, "little")
        self._write(length + record_crc(length, payload).to_bytes(4, "little"))
        self._write(payload)
        self._records += 1

    def finish(self, *, sync_dir: bool = True) -> SegmentInfo:
        """Flush and fsync the segment (and its directory) and close it.

        Args:
            sync_dir: Fsync the directory. A caller finishing many segments in one
                directory may pass ``False`` and call :func:`~.fsutil.fsync_dir` once
                before it commits.

        Returns:
            What was written.

        Raises:
            ValueError: The writer is already finished or aborted.
            OSError: An I/O failure; the segment must not be committed.
        """
        if self._done:
            raise ValueError(f"segment {self.path} is closed")
        self._file.flush()
        faults.fault_point("wal.written")
        fsync_file(self._file, path=self.path)
        self._file.close()
        self._done = True
        if sync_dir:
            fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        faults.fault_point("wal.fsynced")
        return SegmentInfo(self.path, self._length, self._records, self._crc)

    def abort(self) -> None:
        """Close and delete an unfinished segment; a no-op once finished or aborted."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(OSError):
            self._file.close()
        remove(self.path, missing_ok=True)

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.abort()


def encode_segment(records: list[bytes]) -> bytearray:
    """A whole segment in memory (header and framed records, as :class:`SegmentWriter`
    writes them), for one write of an object store's ``put``: each payload is copied
    once, into a buffer sized up front.

    Raises:
        ValueError: A payload is too long.
    """
    total = len(WAL_MAGIC) + sum(8 + len(r) for r in records)
    out = bytearray(total)
    out[: len(WAL_MAGIC)] = WAL_MAGIC
    at = len(WAL_MAGIC)
    for payload in records:
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"record payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
        length = len(payload).to_bytes(4, "little")
        out[at : at + 8] = length + record_crc(length, payload).to_bytes(4, "little")
        out[at + 8 : at + 8 + len(payload)] = payload
        at += 8 + len(payload)
    return out


def decode_segment(data: bytes, *, path: str) -> list[bytes]:
    """The records of a committed segment's bytes, every CRC verified (no repair).

    Raises:
        WalCorruption: The segment is damaged or torn (``path`` names it).
    """
    return read_records(data, path=path, magic=WAL_MAGIC, allow_torn_tail=False).records


def read_segment(path: str | os.PathLike[str], *, repair: bool) -> list[bytes]:
    """Read a segment's records, verifying every CRC.

    Args:
        path: The segment file.
        repair: Accept a torn tail and truncate it on disk (file truncated to its good
            prefix, then fsynced; a torn header is rewritten). Without it any damage
            raises.

    Returns:
        The records, in order.

    Raises:
        WalCorruption: The segment is damaged other than by a torn tail, or is torn and
            ``repair`` is false.
        FileNotFoundError: There is no such file.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    result = read_records(data, path=path, magic=WAL_MAGIC, allow_torn_tail=repair)
    if result.torn:
        if result.valid_length < len(WAL_MAGIC):
            truncate_durable(path, 0, tail=WAL_MAGIC)
        else:
            truncate_durable(path, result.valid_length)
    return result.records
