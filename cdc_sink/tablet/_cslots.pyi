"""Type stub of the key index in C (cdc_sink/tablet/_cslots.c): placement, probe, hash."""

from typing import Any

Buffer = Any  # any object with the buffer protocol (Python 3.12 names it)

def place(hashes: Buffer, slots: Buffer, shift: int, first: int, /) -> None: ...
def probe(hashes: Buffer, slots: Buffer, shift: int, row_hash: Buffer, out: Buffer, /) -> None: ...
def siphash(
    k0: int,
    k1: int,
    c: int,
    d: int,
    data: Buffer,
    offsets: Buffer | None,
    width: int,
    out: Buffer,
    /,
) -> None: ...
