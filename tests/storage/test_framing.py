"""Record framing: round trips, torn tails at every offset, every single-bit flip caught."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.errors import WalCorruption
from cdc_sink.storage import framing
from cdc_sink.storage.framing import encode_file, encode_record, read_records

MAGIC = b"CDCWAL\x00\x01"


def _payloads(seed: int, count: int, max_len: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(max_len)) for _ in range(count)]


def _offsets(payloads: list[bytes], header: int) -> list[int]:
    """Start offset of every record, then the end of the file."""
    out = [header]
    for p in payloads:
        out.append(out[-1] + 8 + len(p))
    return out


def _read(data: bytes, *, torn_ok: bool = True, magic: bytes = MAGIC) -> framing.ReadResult:
    return read_records(data, path="seg.wal", magic=magic, allow_torn_tail=torn_ok)


def test_round_trip_with_and_without_header() -> None:
    payloads = [b"", b"a", b"hello world", bytes(range(256)) * 40, b""]
    for magic in (MAGIC, b""):
        data = encode_file(payloads, magic=magic)
        res = _read(data, magic=magic, torn_ok=False)
        assert res.records == payloads
        assert res.valid_length == len(data)
        assert not res.torn


def test_record_layout_is_length_crc_payload() -> None:
    rec = encode_record(b"abc")
    assert rec[:4] == (3).to_bytes(4, "little")
    assert int.from_bytes(rec[4:8], "little") == framing.record_crc(rec[:4], b"abc")
    assert rec[8:] == b"abc"


def test_empty_file_with_only_header_has_no_records() -> None:
    res = _read(MAGIC, torn_ok=False)
    assert res == framing.ReadResult([], len(MAGIC), False)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=12))
def test_round_trip_any_payloads(payloads: list[bytes]) -> None:
    data = encode_file(payloads, magic=MAGIC)
    assert _read(data, torn_ok=False).records == payloads


def test_last_record_truncated_at_every_offset_recovers_prefix() -> None:
    payloads = [*_payloads(seed=1, count=5, max_len=200), random.Random(2).randbytes(300)]
    data = encode_file(payloads, magic=MAGIC)
    offsets = _offsets(payloads, len(MAGIC))
    last = offsets[-2]
    for cut in range(last + 1, len(data)):
        res = _read(data[:cut])
        assert res.records == payloads[:-1], cut
        assert res.valid_length == last
        assert res.torn
        with pytest.raises(WalCorruption) as err:
            _read(data[:cut], torn_ok=False)
        assert err.value.offset == last
    # Cut exactly at a record boundary: a shorter, undamaged file.
    assert _read(data[:last], torn_ok=False).records == payloads[:-1]


def test_header_truncated_at_every_offset_is_torn_at_zero() -> None:
    data = encode_file([b"x" * 10], magic=MAGIC)
    for cut in range(len(MAGIC)):
        res = _read(data[:cut])
        assert res == framing.ReadResult([], 0, True)


def test_zero_filled_tail_is_torn() -> None:
    payloads = _payloads(seed=3, count=4, max_len=100)
    data = encode_file(payloads, magic=MAGIC)
    for zeros in (1, 7, 8, 9, 100, 5000):
        res = _read(data + bytes(zeros))
        assert res.records == payloads
        assert res.valid_length == len(data)
        assert res.torn
    assert _read(bytes(64)) == framing.ReadResult([], 0, True)


def test_every_single_bit_flip_is_detected_exhaustively() -> None:
    payloads = _payloads(seed=4, count=6, max_len=60)
    data = encode_file(payloads, magic=MAGIC)
    offsets = _offsets(payloads, len(MAGIC))
    flips = 0
    for byte in range(len(data)):
        for bit in range(8):
            flips += 1
            bad = bytearray(data)
            bad[byte] ^= 1 << bit
            _assert_detected(bytes(bad), byte, payloads, offsets)
    assert flips == 8 * len(data) >= 1000


def test_random_bit_flips_in_a_larger_file_are_all_detected() -> None:
    payloads = _payloads(seed=5, count=40, max_len=2000)
    data = encode_file(payloads, magic=MAGIC)
    offsets = _offsets(payloads, len(MAGIC))
    rng = random.Random(6)
    for _ in range(1500):
        pos = rng.randrange(len(data))
        bad = bytearray(data)
        bad[pos] ^= 1 << rng.randrange(8)
        _assert_detected(bytes(bad), pos, payloads, offsets)


def _assert_detected(bad: bytes, pos: int, payloads: list[bytes], offsets: list[int]) -> None:
    """A flip at ``pos`` is corruption of its record unless that record is the last one."""
    if pos < len(MAGIC):
        with pytest.raises(WalCorruption) as err:
            _read(bad)
        assert err.value.offset == 0
        return
    k = max(i for i, start in enumerate(offsets[:-1]) if start <= pos)
    if k == len(payloads) - 1:
        res = _read(bad)  # the last record: indistinguishable from a torn append
        assert res.torn
        assert res.records == payloads[:k]
        assert res.valid_length == offsets[k]
    else:
        with pytest.raises(WalCorruption) as err:
            _read(bad)
        assert err.value.offset == offsets[k]
    with pytest.raises(WalCorruption):
        _read(bad, torn_ok=False)


def test_corruption_in_the_middle_names_file_and_offset() -> None:
    payloads = [b"first", b"second record", b"third"]
    data = bytearray(encode_file(payloads, magic=MAGIC))
    offsets = _offsets(payloads, len(MAGIC))
    data[offsets[1] + 10] ^= 0x40
    with pytest.raises(WalCorruption) as err:
        read_records(bytes(data), path="/t/_wal/0/a.wal", magic=MAGIC, allow_torn_tail=True)
    assert err.value.offset == offsets[1]
    assert err.value.path == "/t/_wal/0/a.wal"
    assert f"offset {offsets[1]}" in str(err.value)
    assert "/t/_wal/0/a.wal" in str(err.value)


def test_length_overrunning_eof_in_the_middle_is_corruption_not_torn() -> None:
    payloads = [b"a" * 30, b"b" * 30, b"c" * 30]
    data = bytearray(encode_file(payloads, magic=MAGIC))
    offsets = _offsets(payloads, len(MAGIC))
    data[offsets[1] : offsets[1] + 4] = (10_000).to_bytes(4, "little")
    with pytest.raises(WalCorruption) as err:
        _read(bytes(data))
    assert err.value.offset == offsets[1]


def test_bad_magic_is_corruption() -> None:
    data = encode_file([b"x"], magic=b"CDCLOG\x00\x01")
    with pytest.raises(WalCorruption) as err:
        _read(data)
    assert err.value.offset == 0
    with pytest.raises(WalCorruption):
        _read(b"JUNK")  # short, and not a prefix of the magic


def test_scan_budget_exhausted_counts_as_torn(monkeypatch: pytest.MonkeyPatch) -> None:
    payloads = [b"a" * 30, b"b" * 30, b"c" * 30]
    data = bytearray(encode_file(payloads, magic=MAGIC))
    offsets = _offsets(payloads, len(MAGIC))
    data[offsets[1] + 9] ^= 1
    monkeypatch.setattr(framing, "SCAN_BUDGET_BYTES", 0)
    res = _read(bytes(data))
    assert res.torn and res.records == payloads[:1]


def test_encode_record_rejects_oversized_length(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framing, "MAX_PAYLOAD", 3)
    with pytest.raises(ValueError):
        encode_record(b"abcd")
