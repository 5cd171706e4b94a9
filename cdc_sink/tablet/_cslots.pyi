"""Type stub of the key index's slot placement and salted hash in C (cdc_sink/tablet/_cslots.c)."""

from typing import Any

Buffer = Any  # any object with the buffer protocol (Python 3.12 names it)

def place(hashes: Buffer, slots: Buffer, shift: int, first: int, /) -> None: ...
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
