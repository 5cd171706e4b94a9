"""pyarrow's memory pool switch (cdc_sink.runtime.arrow_pool): which allocator new buffers use."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pyarrow as pa
import pytest

from cdc_sink.errors import InvalidArgument, InvalidOption
from cdc_sink.runtime.arrow_pool import (
    ARROW_POOL_ENV,
    POOLS,
    arrow_memory_pool,
    available_pools,
    set_arrow_memory_pool,
    use_arrow_memory_pool,
)


@pytest.fixture
def restore(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Puts pyarrow's pool and the environment variable back after the test."""
    before = pa.default_memory_pool()
    monkeypatch.setenv(ARROW_POOL_ENV, os.environ.get(ARROW_POOL_ENV, ""))  # restored after
    yield
    pa.set_memory_pool(before)


@pytest.mark.parametrize("name", POOLS)
def test_new_buffers_come_from_the_pool_set(name: str, restore: None) -> None:
    if name not in available_pools():
        with pytest.raises(InvalidOption, match=f"no {name} memory pool"):
            set_arrow_memory_pool(name)  # type: ignore[arg-type]
        return
    previous = arrow_memory_pool()
    assert set_arrow_memory_pool(name) == previous  # type: ignore[arg-type]
    assert arrow_memory_pool() == name
    assert os.environ[ARROW_POOL_ENV] == name
    pool = pa.default_memory_pool()
    held = pool.bytes_allocated()
    arr = pa.array(range(1_000_000), pa.int64())  # 8 MB from the new default pool
    assert pool.bytes_allocated() >= held + 8_000_000
    del arr
    assert pool.bytes_allocated() == held


def test_a_started_python_process_uses_the_same_pool(restore: None) -> None:
    """The environment variable set with the pool reaches child processes (decode
    workers), whose pyarrow reads it at the first allocation."""
    name = available_pools()[-1]  # system: every build has it
    set_arrow_memory_pool(name)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pyarrow as pa; print(pa.default_memory_pool().backend_name)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == name


def test_every_linux_wheel_pool_is_found() -> None:
    assert "system" in available_pools()
    assert set(available_pools()) <= set(POOLS)


def test_bad_names_are_typed_errors(restore: None) -> None:
    before = arrow_memory_pool()
    with pytest.raises(InvalidOption, match="must be one of") as e:
        set_arrow_memory_pool("tcmalloc")  # type: ignore[arg-type]
    assert e.value.option == "arrow_memory_pool"
    with pytest.raises(InvalidArgument, match="must be a str"):
        set_arrow_memory_pool(None)  # type: ignore[arg-type]
    assert arrow_memory_pool() == before


def test_use_applies_a_choice_and_returns_the_executors_setting(restore: None) -> None:
    assert use_arrow_memory_pool("system") == {f"spark.executorEnv.{ARROW_POOL_ENV}": "system"}
    assert arrow_memory_pool() == "system"
    assert use_arrow_memory_pool("pyarrow") == {}  # pyarrow's own choice: nothing changes
    assert arrow_memory_pool() == "system"
    auto = use_arrow_memory_pool("auto")
    if "jemalloc" in available_pools():
        assert auto == {f"spark.executorEnv.{ARROW_POOL_ENV}": "jemalloc"}
        assert arrow_memory_pool() == "jemalloc"
    else:
        assert auto == {} and arrow_memory_pool() == "system"
    with pytest.raises(InvalidOption):
        use_arrow_memory_pool("tcmalloc")
