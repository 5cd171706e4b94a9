"""The formats package: decoder registry and the shared Decoder contract."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.formats import FORMATS, Decoded, Decoder, decoder_options, get_decoder
from cdc_sink.formats.native_json import encode_json
from cdc_sink.formats.rowv2 import encode_event
from tests.formats.support import ALL_TYPES, assert_same_batch, binary

# debezium-avro needs a schema registry: its own tests are tests/formats/test_avro_*.py
SELF_CONTAINED = tuple(f for f in FORMATS if f != "debezium-avro")


def test_every_format_has_a_decoder_named_after_it():
    assert FORMATS == ("json", "debezium", "rowv2", "debezium-avro")
    for name in FORMATS:
        dec = get_decoder(name)
        assert isinstance(dec, Decoder) and dec.name == name


def test_unknown_format_is_an_argument_error():
    with pytest.raises(ValueError, match="unknown event format 'avro'"):
        get_decoder("avro")  # type: ignore[arg-type]


EVENT = {"op": "upsert", "key": {"id": 1}, "set": {"i32": 2}}
VALUES = {
    "json": encode_json(EVENT),
    "debezium": b'{"op": "c", "after": {"id": 1, "i32": 2}}',
    "rowv2": encode_event(EVENT, ALL_TYPES),
}


@pytest.mark.parametrize("name", SELF_CONTAINED)
def test_decode_returns_batch_and_rejects_and_never_raises_for_bad_events(name: str):
    dec = get_decoder(name)
    garbage = [b"\x00", b"{", b"\xff" * 40, b"[]", b"", None, b"\x03\x80\x01\xff\xff"]
    values = binary([VALUES[name], *garbage, VALUES[name]])
    batch, rejects = dec.decode(values, ALL_TYPES, position=np.arange(100, 109))
    assert isinstance(batch, ChangeBatch) and isinstance(rejects, Rejects)
    assert batch.positions.tolist() == [100, 108]
    out = dec.decode_with_meta(values, ALL_TYPES)
    assert isinstance(out, Decoded)
    assert len(out.batch) + len(out.rejects) + out.skipped == len(values)
    assert all(isinstance(r, str) and r for r in out.rejects.reasons)


@pytest.mark.parametrize("name", SELF_CONTAINED)
def test_bad_arguments_raise(name: str):
    dec = get_decoder(name)
    with pytest.raises(TypeError):
        dec.decode(pa.array([1, 2]), ALL_TYPES)
    with pytest.raises(ValueError, match="position"):
        dec.decode(binary([VALUES[name]]), ALL_TYPES, position=np.arange(3))


@pytest.mark.parametrize("name", SELF_CONTAINED)
def test_empty_input_decodes_to_an_empty_batch(name: str):
    batch, rejects = get_decoder(name).decode(binary([]), ALL_TYPES)
    assert len(batch) == 0 and len(rejects) == 0


@pytest.mark.parametrize("name", SELF_CONTAINED)
def test_random_bytes_never_raise(name: str):
    rng = np.random.default_rng(5)
    values = [
        rng.integers(0, 256, size=int(rng.integers(0, 60)), dtype=np.uint8).tobytes()
        for _ in range(300)
    ]
    values += [v[: len(v) // 2] for v in VALUES.values()]
    out = get_decoder(name).decode_with_meta(binary(values), ALL_TYPES)
    assert len(out.batch) + len(out.rejects) + out.skipped == len(values)


@pytest.mark.parametrize("name", SELF_CONTAINED)
def test_mutated_values_never_raise_and_every_value_is_accounted_for(name: str):
    rng = np.random.default_rng(11)
    base = VALUES[name]
    values = []
    for _ in range(2000):
        b = bytearray(base)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(b)))
            k = rng.random()
            if k < 0.3:
                del b[i]
            elif k < 0.6:
                b.insert(i, int(rng.integers(256)))
            else:
                b[i] = int(rng.integers(256))
        values.append(bytes(b))
    out = get_decoder(name).decode_with_meta(binary(values), ALL_TYPES)
    assert len(out.batch) + len(out.rejects) + out.skipped == len(values)
    assert len(set(out.batch.positions.tolist()) | set(out.rejects.positions.tolist())) == len(
        out.batch
    ) + len(out.rejects)


@pytest.mark.parametrize("name", ["json", "debezium"])
def test_decoding_in_small_runs_gives_the_same_result(name: str, monkeypatch):
    import importlib

    module = importlib.import_module(
        {"json": "cdc_sink.formats.native_json", "debezium": "cdc_sink.formats.debezium"}[name]
    )
    others = {
        "json": [
            b'{"op": "upsert", "key": {"id": 2}, "set": {"i8": null, "f64": 1}}',
            b'{"op": "delete", "key": {"id": 3}}',
        ],
        "debezium": [
            b'{"op": "u", "after": {"id": 2, "i8": null, "f64": 1}}',
            b'{"op": "d", "before": {"id": 3}}',
        ],
    }[name]
    values = binary([VALUES[name], None, b"{", *others, VALUES[name], b"", *others] * 7)
    dec = get_decoder(name)
    whole = dec.decode_with_meta(values, ALL_TYPES)
    monkeypatch.setattr(module, "RUN_BYTES", 90)
    runs = dec.decode_with_meta(values, ALL_TYPES)
    assert_same_batch(runs.batch, whole.batch)
    assert runs.rejects.as_dict() == whole.rejects.as_dict()
    assert runs.skipped == whole.skipped


# -- the registry: one Format per name, decoder and encoder -------------------------------


def test_the_registry_lists_every_format_in_order_with_its_decoder_and_encoder():
    from cdc_sink.formats import REGISTRY, Format, get_format

    assert tuple(REGISTRY) == FORMATS
    for name in FORMATS:
        fmt = get_format(name)
        assert isinstance(fmt, Format) and fmt is REGISTRY[name] and fmt.name == name
        assert fmt.decoder.name == name
        assert isinstance(fmt.new_decoder(), fmt.decoder)
        assert fmt.decoder_options == decoder_options(fmt.decoder)
    assert get_format("debezium").encoder_options == {"envelope"}
    assert get_format("json").encoder_options == frozenset()


def test_unknown_format_names_the_valid_ones():
    from cdc_sink.errors import InvalidOption
    from cdc_sink.formats import get_format

    for bad in ("avro", "", None, 3):
        with pytest.raises(
            InvalidOption,
            match=r"format must be one of \['json', "
            r"'debezium', 'rowv2', 'debezium-avro'\]",
        ) as info:
            get_format(bad)  # type: ignore[arg-type]
        assert info.value.option == "format"


def test_unknown_encoder_or_decoder_options_are_invalid_options():
    from cdc_sink.errors import InvalidOption
    from cdc_sink.formats import get_format

    with pytest.raises(InvalidOption, match="unknown option 'envelope' of the 'json' encoder"):
        get_format("json").new_encoder(ALL_TYPES, envelope=False)
    with pytest.raises(InvalidOption, match="unknown option 'nope' of the 'rowv2' decoder"):
        get_format("rowv2").new_decoder(nope=1)


@pytest.mark.parametrize("name", SELF_CONTAINED)
def test_every_format_decodes_what_its_encoder_writes(name: str):
    from cdc_sink.formats import get_format

    fmt = get_format(name)
    events = [
        {"op": "upsert", "key": {"id": 1}, "set": {"i32": 2, "name": "x"}},
        {"op": "upsert", "key": {"id": 2}, "set": {"i32": None}},
        {"op": "delete", "key": {"id": 1}},
    ]
    values = fmt.encode(events, ALL_TYPES)
    assert all(isinstance(v, bytes) for v in values)
    assert values[0] == fmt.new_encoder(ALL_TYPES)(events[0])
    batch, rejects = fmt.new_decoder().decode(binary(values), ALL_TYPES)
    assert len(rejects) == 0, rejects.reasons
    expected, _ = ChangeBatch.from_events(events, ALL_TYPES)
    assert batch.op.tolist() == expected.op.tolist()
    assert [k.to_pylist() for k in batch.keys] == [k.to_pylist() for k in expected.keys]
