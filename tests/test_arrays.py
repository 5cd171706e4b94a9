"""cdc_sink.utils.arrays.search_sorted: numpy's searchsorted of integer values in a sorted
array of row ids, in the array's own dtype (no conversion of the array), with the same
answer as numpy's for every value, in range or not. run_starts and run_ends: the runs of
equal values, as a plain loop finds them."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from cdc_sink.utils.arrays import run_ends, run_starts, search_sorted


@given(
    rows=st.lists(st.integers(0, 2**32 - 1), max_size=200),
    values=st.lists(st.integers(-(2**40), 2**40), max_size=50),
    dtype=st.sampled_from([np.uint32, np.uint64, np.int64]),
)
def test_search_sorted_equals_numpy_on_exact_values(
    rows: list[int], values: list[int], dtype: type
) -> None:
    a = np.unique(np.array(rows, dtype=np.uint64)).astype(dtype)
    want = np.searchsorted(a.astype(object), np.array(values, dtype=object))
    got = search_sorted(a, values)
    assert got.tolist() == want.tolist()


def test_search_sorted_of_page_starts_and_of_values_out_of_range() -> None:
    a = np.arange(1000, dtype=np.uint32)
    starts = np.arange(5, dtype=np.int64) * 256
    assert search_sorted(a, starts).tolist() == [0, 256, 512, 768, 1000]
    assert search_sorted(a, [-5, 2**32, 2**33]).tolist() == [0, 1000, 1000]
    assert search_sorted(np.empty(0, np.uint32), [3, 2**40]).tolist() == [0, 0]


@given(st.lists(st.integers(0, 3), max_size=40))
def test_run_starts_and_ends_mark_the_runs_of_equal_values(values: list[int]) -> None:
    a = np.array(values, dtype=np.int64)
    n = len(values)
    assert run_starts(a).tolist() == [i == 0 or values[i] != values[i - 1] for i in range(n)]
    assert run_ends(a).tolist() == [i == n - 1 or values[i] != values[i + 1] for i in range(n)]
