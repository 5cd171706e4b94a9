"""Arrow IPC streams read from storage, with their decompressed size known before Arrow
allocates it.

WAL segment bodies (:mod:`~cdc_sink.storage.change_codec`), pre-images
(:mod:`~cdc_sink.storage.preimages`) and pages (:mod:`~cdc_sink.storage.pages`) are Arrow
IPC streams whose buffers may be compressed (LZ4 frame or ZSTD). In such a stream each
compressed buffer starts with its uncompressed length (a little-endian int64, ``-1``:
stored as is), and Arrow's reader allocates that many bytes before it decompresses: a
tampered object of 20 KB can declare gigabytes (a "zip bomb"), and the reader's memory
grows by that much before any check of the rows can run. Arrow's reader takes no bound,
so :func:`decompressed_size` reads the lengths the stream declares without decompressing
anything (the flatbuffer metadata of each message: its body's buffers and whether the
body is compressed), and :func:`check_expansion` refuses a stream that declares more
than a bound, as :class:`~cdc_sink.errors.WalCorruption`, before it is opened::

    stream   ┌ schema message ┬ record batch message ────────────────────────┬ ─ ─
             │                │ metadata: buffers [(offset, length), ...],   │
             │                │           compression: lz4 | zstd | absent   │
             │                │ body: per buffer [int64 uncompressed length] │
             │                │       + compressed bytes                     │
             └────────────────┴──────────────────────────────────────────────┴ ─ ─

The bound is the size an object's header declares (a WAL segment's and a pre-images
object's ``"bytes"``), itself checked against :func:`expansion_limit` of the object's
size; objects written before the header declared it, and pages, are held to that limit.
"""

from __future__ import annotations

import struct

import pyarrow as pa

from cdc_sink.errors import WalCorruption

__all__ = [
    "MAX_EXPANSION",
    "MIN_EXPANSION_LIMIT",
    "check_expansion",
    "decompressed_size",
    "expansion_limit",
]

MAX_EXPANSION = 4096
"""How many times its stored size an IPC body may grow when decompressed. LZ4 cannot
exceed about 255; ZSTD reaches it only on data that is one value repeated."""

MIN_EXPANSION_LIMIT = 64 << 20
"""A body may always decompress to this many bytes, whatever its stored size."""

_MESSAGE_HEADER = 2  # Message table: version, header_type, header, bodyLength
_HEADER_TYPE = 1
_RECORD_BATCH, _DICTIONARY_BATCH = 3, 2
_BATCH_BUFFERS, _BATCH_COMPRESSION = 2, 3  # RecordBatch: length, nodes, buffers, compression
_DICTIONARY_DATA = 1  # DictionaryBatch: id, data, isDelta


def expansion_limit(stored: int) -> int:
    """The most bytes a body of ``stored`` bytes may decompress to."""
    return max(MIN_EXPANSION_LIMIT, stored * MAX_EXPANSION)


class _Flat:
    """Reads tables of one flatbuffer (the metadata of one IPC message, at ``base`` in
    ``buf``); any offset outside it raises ``ValueError``."""

    def __init__(self, buf: memoryview, base: int, size: int) -> None:
        self.buf = buf
        self.base = base
        self.size = size

    def _unpack(self, fmt: struct.Struct, at: int) -> int:
        if at < 0 or at + fmt.size > self.size:
            raise ValueError("damaged message metadata")
        value: int = fmt.unpack_from(self.buf, self.base + at)[0]
        return value

    def root(self) -> int:
        return self._unpack(_U32, 0)

    def field(self, table: int, index: int) -> int | None:
        """Where field ``index`` of the table at ``table`` is, or None when absent."""
        vtable = table - self._unpack(_I32, table)
        slot = 4 + 2 * index
        if slot + 2 > self._unpack(_U16, vtable):
            return None
        rel = self._unpack(_U16, vtable + slot)
        return table + rel if rel else None

    def u8(self, at: int) -> int:
        return self._unpack(_U8, at)

    def i64(self, at: int) -> int:
        return self._unpack(_I64, at)

    def ref(self, at: int) -> int:
        """The table or vector an offset field at ``at`` points to."""
        return at + self._unpack(_U32, at)

    def pairs(self, vector: int) -> list[tuple[int, int]]:
        """The ``(int64, int64)`` structs of a vector of them."""
        count = self._unpack(_U32, vector)
        if vector + 4 + 16 * count > self.size:
            raise ValueError("damaged message metadata")
        at = self.base + vector + 4
        return [_PAIR.unpack_from(self.buf, at + 16 * i) for i in range(count)]


_U8, _U16, _U32 = struct.Struct("<B"), struct.Struct("<H"), struct.Struct("<I")
_I32, _I64, _PAIR = struct.Struct("<i"), struct.Struct("<q"), struct.Struct("<qq")
_CONTINUATION = 0xFFFFFFFF
_BODY_LENGTH = 3  # Message: version, header_type, header, bodyLength


def _batch_table(flat: _Flat, msg: int) -> int | None:
    """The RecordBatch table of a record or dictionary batch message, else None."""
    kind_at = flat.field(msg, _HEADER_TYPE)
    header_at = flat.field(msg, _MESSAGE_HEADER)
    if kind_at is None or header_at is None:
        return None
    kind = flat.u8(kind_at)
    if kind == _RECORD_BATCH:
        return flat.ref(header_at)
    if kind == _DICTIONARY_BATCH:
        data_at = flat.field(flat.ref(header_at), _DICTIONARY_DATA)
        return None if data_at is None else flat.ref(data_at)
    return None


def _body_size(flat: _Flat, msg: int, buf: memoryview, body: int, length: int) -> int:
    """The bytes one message's body (``length`` bytes at ``body`` in ``buf``) holds once
    decompressed."""
    batch = _batch_table(flat, msg)
    if batch is None or flat.field(batch, _BATCH_COMPRESSION) is None:
        return length  # not compressed: its buffers are the body's own bytes
    buffers_at = flat.field(batch, _BATCH_BUFFERS)
    if buffers_at is None:
        return 0
    total = 0
    for offset, size in flat.pairs(flat.ref(buffers_at)):
        if size == 0:
            continue
        if offset < 0 or size < 8 or offset + size > length:
            raise ValueError("a compressed buffer lies outside its message body")
        declared: int = _I64.unpack_from(buf, body + offset)[0]
        if declared < -1:
            raise ValueError("a compressed buffer declares a negative length")
        total += size - 8 if declared == -1 else declared
    return total


def decompressed_size(payload: bytes | bytearray | memoryview | pa.Buffer) -> int:
    """The bytes the messages of the IPC stream ``payload`` hold once decompressed (the
    lengths its compressed buffers declare; nothing is decompressed, nothing copied).

    Raises:
        ValueError: The stream's framing or metadata is damaged.
    """
    buf = memoryview(payload).cast("B")
    n = len(buf)
    pos = total = 0
    while pos + 4 <= n:
        meta_len = _U32.unpack_from(buf, pos)[0]
        pos += 4
        if meta_len == _CONTINUATION:
            if pos + 4 > n:
                raise ValueError("the stream ends inside a message's framing")
            meta_len = _U32.unpack_from(buf, pos)[0]
            pos += 4
        if meta_len == 0:
            return total  # end of stream
        if pos + meta_len > n:
            raise ValueError("the stream ends inside a message's metadata")
        flat = _Flat(buf, pos, meta_len)
        msg = flat.root()
        length_at = flat.field(msg, _BODY_LENGTH)
        length = 0 if length_at is None else flat.i64(length_at)
        body = pos + meta_len
        if length < 0 or body + length > n:
            raise ValueError("the stream ends inside a message's body")
        total += meta_len + _body_size(flat, msg, buf, body, length)
        pos = body + length
    if pos != n:
        raise ValueError("the stream ends inside a message's framing")
    return total


def check_expansion(
    payload: bytes | bytearray | memoryview | pa.Buffer,
    *,
    limit: int,
    what: str,
    path: str,
    offset: int,
) -> None:
    """Refuses an IPC stream that would decompress to more than ``limit`` bytes (or
    whose metadata is damaged), before anything is decompressed.

    Args:
        payload: The stream.
        limit: The most bytes it may decompress to (an object header's declared size, or
            :func:`expansion_limit` of its stored size).
        what: What the stream is, for the message.
        path: Where it is stored, for the message.
        offset: Where it starts there.

    Raises:
        WalCorruption: It would, or its metadata is damaged.
    """
    try:
        size = decompressed_size(payload)
    except (ValueError, struct.error) as exc:
        raise WalCorruption(f"{what}: {exc}", path=path, offset=offset) from None
    if size > limit:
        raise WalCorruption(
            f"{what} would decompress to {size} bytes, more than the {limit} allowed",
            path=path,
            offset=offset,
        )
