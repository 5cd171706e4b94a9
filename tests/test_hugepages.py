"""numpy's huge-page switch (cdc_sink.runtime.hugepages): what the kernel is asked for a
new array."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cdc_sink.errors import InvalidArgument
from cdc_sink.runtime.hugepages import HUGEPAGE_ENV, numpy_hugepages, set_numpy_hugepages

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@pytest.fixture
def restore(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Puts numpy's setting and the environment variable back after the test."""
    before = numpy_hugepages()
    monkeypatch.setenv(HUGEPAGE_ENV, os.environ.get(HUGEPAGE_ENV, ""))  # restored after
    yield
    set_numpy_hugepages(before)


def vm_flags(addr: int) -> list[str]:
    """The kernel's VmFlags of the mapping that holds ``addr`` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {addr:#x}")


def test_the_switch_returns_the_previous_setting_and_sets_the_environment(restore: None) -> None:
    set_numpy_hugepages(True)
    assert numpy_hugepages() is True
    assert set_numpy_hugepages(False) is True
    assert numpy_hugepages() is False
    assert os.environ[HUGEPAGE_ENV] == "0"
    assert set_numpy_hugepages(True) is False
    assert os.environ[HUGEPAGE_ENV] == "1"


@pytest.mark.skipif(not THP.exists(), reason="this kernel has no transparent huge pages")
def test_new_large_arrays_follow_the_switch(restore: None) -> None:
    """The kernel records MADV_HUGEPAGE as the mapping's ``hg`` flag."""
    set_numpy_hugepages(True)
    on = np.ones(64 << 20, dtype=np.uint8)
    set_numpy_hugepages(False)
    off = np.ones(64 << 20, dtype=np.uint8)
    assert "hg" in vm_flags(on.ctypes.data + len(on) // 2)
    assert "hg" not in vm_flags(off.ctypes.data + len(off) // 2)
    del on, off


@pytest.mark.parametrize("value", ["0", 0, None, np.bool_(False)])
def test_the_switch_takes_only_a_bool(value: object, restore: None) -> None:
    before = numpy_hugepages()
    with pytest.raises(InvalidArgument, match="must be a bool"):
        set_numpy_hugepages(value)  # type: ignore[arg-type]
    assert numpy_hugepages() is before
