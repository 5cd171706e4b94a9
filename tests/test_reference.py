"""cdc_sink_testkit.reference: the one reference model (the demo's ExpectedTable and the tests'
RefModel adapt it), checked here on the semantics both adapters rely on."""

from __future__ import annotations

from cdc_sink.schema import TableSchema
from cdc_sink_testkit.demo import ExpectedTable
from cdc_sink_testkit.reference import ReferenceTable
from tests.fixtures import ID_V_SEQ
from tests.model import RefModel

SEQ = TableSchema.from_dict(ID_V_SEQ)
REQUIRED = TableSchema.from_dict(
    {
        "columns": [
            {"name": "id", "type": "int64"},
            {"name": "must", "type": "string", "nullable": False},
            {"name": "v", "type": "string"},
        ],
        "primary_key": ["id"],
    }
)


def test_stale_events_lose_to_the_tombstone_of_a_newer_delete():
    t = ReferenceTable(SEQ)
    assert t.apply_event({"op": "insert", "key": 1, "set": {"v": "a"}, "seq": 5}) == "inserted"
    assert t.apply_event({"op": "delete", "key": 1, "seq": 7}) == "deleted"
    assert t.apply_event({"op": "insert", "key": 1, "set": {"v": "b"}, "seq": 6}) == "stale"
    assert t.apply_event({"op": "upsert", "key": 1, "set": {"v": "c"}, "seq": 7}) == "inserted"
    assert t.rows == {(1,): {"id": 1, "v": "c", "seq": 7}}


def test_seq_may_come_from_set_and_must_agree_with_it():
    t = ReferenceTable(SEQ)
    assert t.apply_event({"op": "upsert", "key": 1, "set": {"v": "a", "seq": 3}}) == "inserted"
    assert t.seqs == {(1,): 3}
    assert t.apply_event({"op": "upsert", "key": 1, "set": {"seq": 4}, "seq": 5}) == "invalid"
    assert t.last_reason == "sequence column in 'set' differs from seq"
    assert t.apply_event({"op": "upsert", "key": 1, "set": {"v": "b"}}) == "invalid"
    assert t.last_reason == "seq is missing"


def test_truncate_clears_rows_and_keeps_sequences():
    t = ReferenceTable(SEQ)
    for k in range(3):
        t.apply_event({"op": "insert", "key": k, "set": {"v": "a"}, "seq": 5})
    assert t.apply_event({"op": "truncate"}) == "truncated"
    assert t.rows == {} and len(t.seqs) == 3
    assert t.apply_event({"op": "insert", "key": 0, "set": {"v": "b"}, "seq": 4}) == "stale"


def test_an_upsert_that_would_create_a_row_without_a_required_column_is_rejected():
    t = ReferenceTable(REQUIRED)
    assert t.apply_event({"op": "upsert", "key": 1, "set": {"v": "a"}}) == "rejected"
    assert t.apply_event({"op": "insert", "key": 1, "set": {"v": "a"}}) == "invalid"
    assert t.apply_event({"op": "upsert", "key": 1, "set": {"must": "x"}}) == "inserted"
    assert t.apply_event({"op": "upsert", "key": 1, "set": {"v": "a"}}) == "updated"
    assert t.apply_event({"op": "update", "key": 2, "set": {"v": "a"}}) == "rejected"


def test_the_adapters_count_the_same_outcomes_their_own_way():
    events = [
        {"op": "insert", "key": {"id": 1}, "set": {"v": "a"}, "seq": 1},
        {"op": "merge", "key": {"id": 1}, "seq": 2},
        {"op": "update", "key": {"id": 2}, "set": {"v": "b"}, "seq": 2},
        {"op": "truncate"},
    ]
    m = RefModel(SEQ)
    counts = m.apply(events)
    assert counts == {
        "inserted": 1,
        "updated": 0,
        "deleted": 0,
        "ignored": 0,
        "stale": 0,
        "rejected": 1,
        "truncated": 1,
        "invalid": 1,
    }
    e = ExpectedTable(SEQ)
    e.apply_all(events)
    assert e.counts == {
        "inserted": 1,
        "updated": 0,
        "deleted": 0,
        "ignored": 0,
        "stale": 0,
        "rejected": 2,
        "truncated": 1,
    }
    assert e.reject_reasons == ["unknown op 'merge'", "update of missing key"]
