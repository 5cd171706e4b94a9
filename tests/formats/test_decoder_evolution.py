"""Schema evolution behind the decoder interface: a decoder says how it evolves the
table's schema (``Decoder.evolution``), None for the formats without evolution, and the
registry's evolution reads the schema ids from the distinct message headers the sink
hands it (no Spark, no registry needed here)."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pytest

from cdc_sink.formats import FORMATS, SchemaEvolution, get_decoder
from cdc_sink.formats._avro_evolution import RegistryEvolution, wire_ids
from cdc_sink.schema import TableSchema
from tests.fixtures import ID_A_B


@pytest.mark.parametrize("name", [f for f in FORMATS if f != "debezium-avro"])
def test_formats_without_schema_evolution_have_none(name: str) -> None:
    assert get_decoder(name).evolution() is None  # type: ignore[arg-type]


def test_wire_ids_are_the_ids_of_the_headers_in_the_wire_format() -> None:
    prefixes = pa.array(
        [
            b"\x00\x00\x00\x00\x07",
            b"\x00\x00\x00\x01\x00",  # id 256
            b"\x01\x00\x00\x00\x09",  # magic byte 1: not the wire format
            b"\x00\x00",  # too short
            None,
            b"\x00\x00\x00\x00\x07",
        ],
        pa.binary(),
    )
    assert wire_ids(prefixes) == [7, 256]


class _Recorder:
    """A decoder's ``schema_changes``, recording the ids it was asked about."""

    def __init__(self) -> None:
        self.asked: list[list[int]] = []

    def schema_changes(self, ids: Iterable[int], schema: TableSchema) -> list[tuple[str, str]]:
        self.asked.append(list(ids))
        return [("added", "string")]


def test_the_registry_evolution_asks_its_decoder_about_the_headers_schema_ids() -> None:
    decoder = _Recorder()
    evolution = RegistryEvolution(decoder)
    assert isinstance(evolution, SchemaEvolution)
    assert evolution.prefix_bytes == 5  # magic byte + 4-byte schema id
    prefixes = pa.array([b"\x00\x00\x00\x00\x02", b"\x00\x00\x00\x00\x01"], pa.binary())
    schema = TableSchema.from_dict(ID_A_B)
    assert evolution.columns_to_add(prefixes, schema) == [("added", "string")]
    assert decoder.asked == [[1, 2]]


def test_the_avro_decoder_evolves_only_with_add_columns() -> None:
    evolving = get_decoder("debezium-avro", schema_evolution="add_columns").evolution()
    assert isinstance(evolving, RegistryEvolution)
    assert get_decoder("debezium-avro").evolution() is None  # schema_evolution="none"
