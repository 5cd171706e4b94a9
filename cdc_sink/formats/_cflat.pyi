"""Type stub of the compiled pass over flat native JSON events (cdc_sink/formats/_cflat.c)."""

import numpy as np

def decode(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    ops: tuple[bytes, ...],
    delete_code: int,
    names: tuple[bytes, ...],
    nkeys: int,
    types: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    op: np.ndarray,
    seq: np.ndarray,
    seq_given: np.ndarray,
    ts: np.ndarray,
    ts_given: np.ndarray,
    present: np.ndarray,
    isnull: np.ndarray,
    v: np.ndarray,
    vend: np.ndarray,
    ok: np.ndarray,
    /,
) -> int: ...
def strings(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray, /
) -> None: ...
