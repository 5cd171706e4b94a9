"""WAL segments: one bucket's transaction for one commit attempt, durable before commit.

A segment is a write-once file (its path is chosen by the caller, unique per attempt)::

    <segment>.wal
    ┌──────────────────┬────────────────────┬────────────────────┬─ ─ ─
    │ "CDCWAL" 00 01   │ len │ crc │ rec 0  │ len │ crc │ rec 1  │ ...     (framing.py)
    └──────────────────┴────────────────────┴────────────────────┴─ ─ ─
      8-byte header      each record: u32 LE length, u32 LE CRC32C, payload

Lifecycle::

    SegmentWriter(path)        a new object of a local store on the file's directory
                               (open_new: O_CREAT|O_EXCL), the header  (never overwrites)
      .append(payload) ...     buffered writes of framed records
      .finish()                flush ─ [wal.written] ─ fsync file ─ fsync dir ─ [wal.fsynced]
                               -> SegmentInfo(path, length, records, crc)
    log entry v names it       (version_log.py) the segment becomes part of version v
    read_segment(path, repair=False)   replay; any damage raises WalCorruption

A segment is referenced by a log entry only after ``finish`` returned, so a committed
segment is always complete on disk: read it with ``repair=False``. A segment that no
committed entry names is an orphan of a failed attempt and is deleted, not repaired.
``repair=True`` exists for recovery tools: it cuts a torn tail off (the file is
replaced, atomically, by its good prefix: see framing.py for what counts as torn) and
returns the records before it.

The table writes and reads its segments through its store (:func:`encode_segment`,
:func:`decode_segment`, :mod:`~cdc_sink.storage.segments`); :class:`SegmentWriter` and
:func:`read_segment` are the file-level form, for tools and tests, on a
:class:`~cdc_sink.storage.objectstore.local.LocalStore` of the file's directory.
"""

from __future__ import annotations

import os
import types
from dataclasses import dataclass

import google_crc32c

from cdc_sink.storage import faults
from cdc_sink.storage.framing import MAX_PAYLOAD, read_records, record_crc
from cdc_sink.storage.objectstore.local import DEFAULT_FILE_MODE, LocalStore

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
            path: The segment's file name (its directory is created if missing).
            buffer_size: Write buffer in bytes.
            mode: The file's permission bits (the umask may clear more).

        Raises:
            FileExistsError: The file exists.
            OSError: Any other I/O failure.
        """
        self.path = os.fspath(path)
        directory, name = os.path.split(os.path.abspath(self.path))
        self._out = LocalStore(directory, file_mode=mode).open_new(name)
        self._buffer = bytearray()
        self._buffer_size = buffer_size
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
        self._buffer += chunk
        if len(self._buffer) >= self._buffer_size:
            self._flush()
        self._crc = int(google_crc32c.extend(self._crc, chunk))
        self._length += len(chunk)

    def _flush(self) -> None:
        if self._buffer:
            data, self._buffer = bytes(self._buffer), bytearray()
            self._out.write(data)

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

    def finish(self) -> SegmentInfo:
        """Flush and fsync the segment (and its directory) and close it.

        Returns:
            What was written.

        Raises:
            ValueError: The writer is already finished or aborted.
            OSError: An I/O failure; the segment must not be committed.
        """
        if self._done:
            raise ValueError(f"segment {self.path} is closed")
        self._flush()
        faults.fault_point("wal.written")
        self._out.finish()
        self._done = True
        faults.fault_point("wal.fsynced")
        return SegmentInfo(self.path, self._length, self._records, self._crc)

    def abort(self) -> None:
        """Close and delete an unfinished segment; a no-op once finished or aborted."""
        if self._done:
            return
        self._done = True
        self._buffer = bytearray()
        self._out.abort()

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
        repair: Accept a torn tail and cut it off (the file replaced, atomically and
            durably, by its good prefix; a torn header by a bare header). Without it any
            damage raises.

    Returns:
        The records, in order.

    Raises:
        WalCorruption: The segment is damaged other than by a torn tail, or is torn and
            ``repair`` is false.
        FileNotFoundError: There is no such file.
    """
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    store = LocalStore(directory)
    data = store.get(name)
    result = read_records(data, path=path, magic=WAL_MAGIC, allow_torn_tail=repair)
    if result.torn:
        good = result.valid_length
        store.put(name, data[:good] if good >= len(WAL_MAGIC) else WAL_MAGIC)
    return result.records
