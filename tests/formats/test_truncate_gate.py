"""A native JSON ``{"op": "truncate"}`` empties the table only when the decoder is told to
allow it (``allow_truncate=True``); by default it is a reject with one reason, on the
compiled and the general path alike, and the streaming job's ``--allow-truncate`` is what
turns the option on."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from cdc_sink import create_table
from cdc_sink.batch import OP_TRUNCATE
from cdc_sink.errors import InvalidOption
from cdc_sink.formats import REGISTRY, _jsonflat, get_decoder
from cdc_sink.formats.native_json import TRUNCATE_REFUSED, JsonDecoder
from cdc_sink.metrics.reasons import classify_reason
from cdc_sink.schema import TableSchema
from cdc_sink.spark.decode import jvm_allow_truncate
from tests.fixtures import ID_A_B
from tests.formats.support import binary

SCHEMA = TableSchema.from_dict(ID_A_B)
UPSERT = b'{"op":"upsert","key":{"id":%d},"set":{"a":%d}}'
MESSAGES = [
    UPSERT % (1, 1),
    b'{"op":"truncate"}',
    UPSERT % (2, 2),
    b'{"op": "truncate", "key": {"id": 9}, "set": {"a": 1}, "seq": 3}',
    UPSERT % (3, 3),
]
TRUNCATES = [1, 3]


@pytest.fixture(params=["compiled", "general"])
def path_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both decode paths: the compiled flat pass (when built) and the general one."""
    if request.param == "general":
        monkeypatch.setattr(_jsonflat, "_cflat", None)
    elif _jsonflat._cflat is None:
        pytest.skip("the C extension _cflat is not built")
    return str(request.param)


def test_a_truncate_is_rejected_by_default(path_kind: str) -> None:
    batch, rejects = JsonDecoder().decode(binary(MESSAGES), SCHEMA)
    assert rejects.as_dict() == {i: TRUNCATE_REFUSED for i in TRUNCATES}
    assert batch.positions.tolist() == [0, 2, 4]
    assert not (batch.op == OP_TRUNCATE).any()


def test_a_truncate_is_applied_with_allow_truncate(path_kind: str) -> None:
    batch, rejects = JsonDecoder(allow_truncate=True).decode(binary(MESSAGES), SCHEMA)
    assert len(rejects) == 0, rejects.reasons
    assert batch.positions.tolist() == list(range(len(MESSAGES)))
    assert np.flatnonzero(batch.op == OP_TRUNCATE).tolist() == TRUNCATES


def test_a_malformed_truncate_keeps_its_own_reason() -> None:
    """The gate comes after the structural checks: one reason per event, the first."""
    bad = b'{"op":"truncate","op":"truncate"}'
    _, default = JsonDecoder().decode(binary([bad]), SCHEMA)
    _, allowed = JsonDecoder(allow_truncate=True).decode(binary([bad]), SCHEMA)
    assert default.as_dict() == allowed.as_dict()
    assert default.reasons[0] != TRUNCATE_REFUSED


def test_the_option_is_a_registered_checked_bool() -> None:
    assert "allow_truncate" in REGISTRY["json"].decoder_options
    decoder = get_decoder("json", allow_truncate=True)
    assert isinstance(decoder, JsonDecoder) and decoder.allow_truncate is True
    with pytest.raises(InvalidOption) as e:
        get_decoder("json", allow_truncate="yes")
    assert e.value.option == "allow_truncate"


def test_the_reason_counts_as_a_rejected_truncate() -> None:
    assert classify_reason(TRUNCATE_REFUSED) == "truncated_rejected"


def test_the_jvm_decoder_takes_allow_truncate_and_no_other_option() -> None:
    assert jvm_allow_truncate(None) is False
    assert jvm_allow_truncate({"allow_truncate": True}) is True
    with pytest.raises(InvalidOption, match="strict"):
        jvm_allow_truncate({"allow_truncate": True, "strict": False})
    with pytest.raises(InvalidOption) as e:
        jvm_allow_truncate({"allow_truncate": 1})
    assert e.value.option == "allow_truncate"


def _committed_rows(tmp_path: Path, **options: Any) -> tuple[list[int], list[str]]:
    """Rows 10 and 11 committed, then MESSAGES decoded with ``options`` and applied: the
    ids left and the reasons the version recorded."""
    table = create_table(tmp_path / "t", SCHEMA)
    table.apply([{"op": "upsert", "key": k, "set": {"a": k}} for k in (10, 11)])
    batch, rejects = get_decoder("json", **options).decode(binary(MESSAGES), SCHEMA)
    result = table.apply(batch, source_rejects=rejects)
    ids = sorted(table.read(version=result.version).column("id").to_pylist())
    return ids, table.rejects(result.version).column("reason").to_pylist()


def test_a_refused_truncate_leaves_the_table_as_it_was(tmp_path: Path) -> None:
    ids, reasons = _committed_rows(tmp_path)
    assert ids == [1, 2, 3, 10, 11]
    assert reasons == [TRUNCATE_REFUSED] * len(TRUNCATES)


def test_an_allowed_truncate_empties_the_table_at_its_place(tmp_path: Path) -> None:
    ids, reasons = _committed_rows(tmp_path, allow_truncate=True)
    assert ids == [3]  # the last truncate (position 3) deleted 10, 11, 1 and 2
    assert reasons == []


def test_the_streaming_job_flag_sets_the_decoder_option() -> None:
    job = _load_job()
    base = ["--bootstrap-servers", "k:9092", "--topic", "t", "--table-path", "/t"]
    assert job.job_decoder_options(job.build_parser().parse_args(base)) == {}
    args = job.build_parser().parse_args([*base, "--allow-truncate"])
    assert job.job_decoder_options(args) == {"allow_truncate": True}
    debezium = job.build_parser().parse_args([*base, "--format", "debezium", "--allow-truncate"])
    with pytest.raises(ValueError, match="--allow-truncate"):
        job.job_decoder_options(debezium)


def _load_job() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "streaming_jobs" / "cdc_to_tablets.py"
    spec = importlib.util.spec_from_file_location("_jobs_cdc_to_tablets_gate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
