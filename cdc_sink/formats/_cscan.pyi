"""Type stub of the compiled JSON structural index (cdc_sink/formats/_cscan.c)."""

import numpy as np

def scan(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    max_level: int,
    max_members: int,
    max_depth: int,
    event: np.ndarray,
    level: np.ndarray,
    parent: np.ndarray,
    name_start: np.ndarray,
    name_end: np.ndarray,
    name_escaped: np.ndarray,
    kind: np.ndarray,
    value_start: np.ndarray,
    value_end: np.ndarray,
    value_escaped: np.ndarray,
    status: np.ndarray,
    /,
) -> int: ...
def match(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    names: tuple[bytes, ...],
    codes: np.ndarray,
    /,
) -> None: ...
def ints(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    values: np.ndarray,
    ok: np.ndarray,
    /,
) -> int: ...
def grammar(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    codes: np.ndarray,
    /,
) -> None: ...
def unescape(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    offsets: np.ndarray,
    out: np.ndarray,
    bad: np.ndarray,
    /,
) -> int: ...
