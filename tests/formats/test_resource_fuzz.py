"""What hostile input costs every decoder, per byte (issue 38).

Each case of :data:`tests.formats.hostile.CASES` is a seeded batch of about 2 MB of
adversarial messages of one format (rowv2; native JSON; Debezium JSON with and without
the envelope): declared column counts of 65,535, 4-byte ids, duplicated ids, huge
offsets and truncated headers; events of hundreds of thousands of unknown, repeated or
ignored members; nesting a million levels deep; numbers of a million digits; long
strings (plain, escaped, invalid UTF-8), member names and base64 values; many events on
one key. The JSON cases run on the compiled passes and on their numpy fallbacks. The
Avro cases (Debezium Avro, the schemas served in-process) add hostile schemas (issue 49):
a "billion laughs" schema refused at load, thousands of types in a branch no message
takes, arrays of nulls in thousands of one-item blocks, Debezium ``int[]`` arrays of a
quarter of a million items, maps of as many empty keys, endless varints, lengths past the
end, truncations.

How it is measured (:func:`tests.formats.hostile.measure`): each case is decoded in a
child forked from a fork server that has already imported numpy, pyarrow and cdc_sink.
The child builds its input, warms the decoder up on a few valid messages, resets the
kernel's peak resident size (``/proc/self/clear_refs``), decodes, and reports
``VmHWM`` minus its resident size before the decode. Resident pages count every
allocation that is used, whoever made it: numpy arrays, Arrow's memory pool (mimalloc or
jemalloc, which tracemalloc does not see), the C extensions' buffers, Python objects.
CPU is the child's process time (all threads), a resource bound independent of the
wall clock and of other load on the machine.

Every case must:

- take at most :data:`~tests.formats.hostile.MEMORY_RATIO` (10) times its input at its
  peak, with no allowance per message and no exception: the batches of the smallest
  messages (rowv2 rows of 17 bytes, whose decoded row of every column takes about 64
  bytes) included, and the numpy scanner on a million levels of nesting;
- take at most :data:`~tests.formats.hostile.CPU_PER_MB` (1) CPU second per MB;
- decode every accepted message to exactly what it says (each message carries the
  event its generator meant: op, key, and the value or absence of every column), and
  reject the ones that must be.
"""

from __future__ import annotations

import sys

import pytest

from tests.formats.hostile import (
    CASES,
    CPU_PER_MB,
    HostileCase,
    measure,
    memory_limit,
    modes,
)

SIZE = 2 << 20  # bytes of input per case

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc for the peak resident size"
)

RUNS = [(case, mode) for case in CASES for mode in modes(case)]


@pytest.mark.parametrize(("case", "mode"), RUNS, ids=[f"{c.label}-{m}" for c, m in RUNS])
def test_hostile_input_costs_a_bounded_amount_per_byte(case: HostileCase, mode: str) -> None:
    cost = measure(case.label, mode, seed=38, size=SIZE)
    assert cost.bytes_in >= SIZE
    assert not cost.problems, cost.problems
    limit = memory_limit(cost.bytes_in)
    assert cost.peak_bytes <= limit, (
        f"peak {cost.peak_bytes / 2**20:.1f} MiB ({cost.memory_ratio:.1f}x) for "
        f"{cost.bytes_in / 2**20:.2f} MiB in {cost.messages} messages"
    )
    assert cost.cpu_per_mb <= CPU_PER_MB, f"{cost.cpu_s:.2f} CPU s for {cost.bytes_in} bytes"


def test_every_format_and_path_has_hostile_cases() -> None:
    formats = {(c.fmt, bool(c.options.get("_envelope"))) for c in CASES}
    assert formats == {
        ("rowv2", False),
        ("json", False),
        ("debezium", False),
        ("debezium", True),
        ("debezium-avro", False),
    }
    assert {m for _, m in RUNS} == {"compiled", "numpy"}
