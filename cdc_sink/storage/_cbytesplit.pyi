"""Type stub of the byte stream split in C (cdc_sink/storage/_cbytesplit.c)."""

from typing import Any

Buffer = Any  # any object with the buffer protocol (Python 3.12 names it)

def split(src: Buffer, dst: Buffer, n: int, width: int, stride: int, /) -> None: ...
def join(src: Buffer, dst: Buffer, n: int, width: int, stride: int, /) -> None: ...
