"""How a streaming sink is configured: one frozen, picklable value, checked once.

    opts = SinkOptions(format="debezium", apply_mode="executors",
                       decode=DecodeOptions(options={"decimal_handling": "string"}))
    fn = cdc_sink.spark.sink(path, schema=schema, options=opts)

    # a table on S3 (or any S3-compatible endpoint); secrets best from the environment
    opts = SinkOptions(storage_options={"endpoint": "https://s3.example", "region": "eu-1"})
    fn = cdc_sink.spark.sink("s3://bucket/tables/orders", schema=schema, options=opts)

:class:`SinkOptions` groups what a deployment chooses (the wire format, where buckets are
prepared, where values are decoded, the table's in-memory and retention options), as
delta-rs groups a writer's settings in ``WriterProperties``. :meth:`SinkOptions.checked`
validates every combination once, before the stream starts, and resolves the defaults
that depend on others (``decode.where`` follows ``apply_mode``); the apply modes of the
sink read the checked value and never change it.

Importing this module does not import pyspark.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal, get_args

from cdc_sink.engine import TableOptions
from cdc_sink.errors import InvalidArgument, InvalidOption
from cdc_sink.formats import FORMATS, FormatName
from cdc_sink.utils.redact import masked_mapping

__all__ = [
    "ApplyMode",
    "DecodeIn",
    "DecodeOptions",
    "JsonDecoder",
    "SinkOptions",
    "StorageOptions",
]

ApplyMode = Literal["driver", "executors"]
"""Where the buckets of a micro-batch are prepared: in the driver or in Spark tasks."""
DecodeIn = Literal["driver", "executors"]
"""Where driver mode decodes the Kafka values: in the driver or in Spark tasks."""
JsonDecoder = Literal["python", "jvm"]
"""Where native JSON is decoded: by :mod:`cdc_sink.formats` or by Spark's ``from_json``."""

_APPLY_MODES: tuple[ApplyMode, ...] = get_args(ApplyMode)
_DECODE_IN: tuple[DecodeIn, ...] = get_args(DecodeIn)
_JSON_DECODERS: tuple[JsonDecoder, ...] = get_args(JsonDecoder)


class StorageOptions(Mapping[str, str]):
    """An object store's ``storage_options`` (``endpoint``, ``region``, ``access_key_id``,
    ``secret_access_key``...: see :func:`cdc_sink.storage.objectstore.store_for`), as the
    sink and the ``cdc_sink`` source carry them to their Spark tasks: read-only, hashable
    (a key of the per-process table cache), picklable, and never showing a value: its
    ``repr`` names the keys only, since a value may be a secret and reprs end up in logs
    and in Spark's task errors.

    Args:
        options: The options (str to str); none by default.

    Raises:
        InvalidArgument: A key or value is not a str.
    """

    __slots__ = ("_items",)

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        items = dict(options or {})
        for key, value in items.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidArgument(
                    f"storage options map str to str; the one named {key!r} does not"
                    if isinstance(key, str)
                    else f"storage option names are str, not {type(key).__name__}"
                )
        self._items: tuple[tuple[str, str], ...] = tuple(sorted(items.items()))

    def __getitem__(self, key: str) -> str:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StorageOptions):
            return self._items == other._items
        return super().__eq__(other)

    def __repr__(self) -> str:
        return f"StorageOptions(keys={[k for k, _ in self._items]!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (StorageOptions, (dict(self._items),))


@dataclass(frozen=True)
class DecodeOptions:
    """Where and how the Kafka values are decoded (each attribute's docstring follows it;
    the streaming job's flags are made from them: :mod:`cdc_sink.job.sink_flags`)."""

    json_decoder: JsonDecoder = "python"
    """Native JSON only: ``python`` (the vectorized decoder of :mod:`cdc_sink.formats`, the
    default) or ``jvm`` (Spark's ``from_json``, :mod:`cdc_sink.spark.decode`)."""
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Keyword options of the format's Python decoder (e.g. ``{"decimal_handling":
    "string"}`` for Debezium; see :func:`cdc_sink.formats.get_decoder`)."""
    processes: int = 0
    """Driver mode with a Python decoder in the driver: worker processes that decode the
    Kafka values, each Arrow batch as Spark streams it (0: the driver's own thread).
    Spawned on the first batch, stopped by ``SinkFunction.close``."""
    where: DecodeIn | None = None
    """Driver mode: ``driver`` (the raw records come to the driver, which decodes them) or
    ``executors`` (Spark tasks decode them and send each bucket's events packed, no
    shuffle). ``None``: where the apply mode decodes (executors mode always decodes in its
    tasks)."""

    def __post_init__(self) -> None:
        # a read-only copy: the value is frozen all the way down (and stays picklable)
        object.__setattr__(self, "options", _frozen_mapping(self.options))

    def __repr__(self) -> str:
        """Masks the secret options (:mod:`cdc_sink.utils.redact`: ``registry_auth``, a
        ``registry_url`` with user info...)."""
        return (
            f"DecodeOptions(json_decoder={self.json_decoder!r}, "
            f"options={masked_mapping(self.options)!r}, processes={self.processes!r}, "
            f"where={self.where!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _decode_options,
            (self.json_decoder, dict(self.options), self.processes, self.where),
        )


@dataclass(frozen=True)
class SinkOptions:
    """Everything a streaming sink is configured with, but the table path, the schema to
    create it with and the dead-letter sink (see :func:`cdc_sink.spark.sink`). Each
    attribute's docstring follows it; the streaming job's flags are made from them
    (:mod:`cdc_sink.job.sink_flags`), so a new field is a new flag."""

    format: FormatName = "json"
    """Encoding of the Kafka values, one of :data:`cdc_sink.formats.FORMATS`."""
    app_id: str | None = None
    """Writer id for exactly-once commits (``None``: derived from the table path); one per
    streaming query (checkpoint)."""
    apply_mode: ApplyMode = "driver"
    """``driver`` (tablets in the driver, the default) or ``executors`` (one Spark task per
    bucket)."""
    decode: DecodeOptions = field(default_factory=DecodeOptions)
    """Where and how values are decoded."""
    bucket_partitioned: bool = False
    """Executors mode on a topic partitioned by bucket (producer SDK
    ``partitioner="bucket"``): each batch is decoded and prepared where it is read, no
    shuffle; a batch found split is rolled back and shuffled."""
    table: TableOptions | None = None
    """In-memory, snapshot and retention options of the table."""
    stats_limit: int = 256
    """How many per-batch stats ``SinkFunction.stats`` keeps."""
    storage_options: Mapping[str, str] = field(default_factory=StorageOptions)
    """The options of the object store a table URL (``s3://...``) names: endpoint, region,
    credentials... (a mapping, kept as :class:`StorageOptions`, whose ``repr`` shows no
    value); what they leave unset comes from the environment variables ``obstore`` reads
    (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``...), in each
    process that opens the table: the driver and, in executors mode, the executors. None
    for a local table."""

    def __post_init__(self) -> None:
        if not isinstance(self.storage_options, StorageOptions):
            object.__setattr__(self, "storage_options", StorageOptions(self.storage_options))

    @property
    def decode_in(self) -> DecodeIn:
        """Where the values are decoded, once :meth:`checked` resolved it."""
        return self.decode.where or ("executors" if self.apply_mode == "executors" else "driver")

    @property
    def jvm_json(self) -> bool:
        """Native JSON decoded by Spark's ``from_json``."""
        return self.format == "json" and self.decode.json_decoder == "jvm"

    @property
    def allow_truncate(self) -> bool:
        """The decoder option ``allow_truncate`` (native JSON's truncate events applied)."""
        return bool(self.decode.options.get("allow_truncate", False))

    def checked(self) -> SinkOptions:
        """This value validated, with ``decode.where`` resolved.

        Raises:
            InvalidOption: An unknown format, apply mode, JSON decoder or ``decode.where``;
                ``decode.where="driver"`` in executors mode; ``decode.processes``
                negative, or set outside driver mode's Python decode in the driver;
                ``bucket_partitioned`` outside executors mode; decoder options with the
                JVM decoder (but ``allow_truncate``), or unknown to the format's decoder,
                or with a bad value.
            InvalidArgument: ``decode.processes`` or ``stats_limit`` is not an int.
        """
        if self.format not in FORMATS:
            raise InvalidOption(
                f"format must be {', '.join(FORMATS)}, not {self.format!r}", option="format"
            )
        if self.apply_mode not in _APPLY_MODES:
            raise InvalidOption(
                f"apply_mode must be 'driver' or 'executors', not {self.apply_mode!r}",
                option="apply_mode",
            )
        if self.decode.json_decoder not in _JSON_DECODERS:
            raise InvalidOption(
                f"json_decoder must be 'python' or 'jvm', not {self.decode.json_decoder!r}",
                option="json_decoder",
            )
        if self.bucket_partitioned and self.apply_mode != "executors":
            raise InvalidOption(
                "bucket_partitioned applies to apply_mode='executors' (driver mode has no shuffle)",
                option="bucket_partitioned",
            )
        if not isinstance(self.stats_limit, int) or isinstance(self.stats_limit, bool):
            raise InvalidArgument(f"stats_limit must be an int, got {self.stats_limit!r}")
        where = self._checked_where()
        self._check_processes(where)
        self._check_decoder_options()
        return replace(self, decode=replace(self.decode, where=where))

    # ------------------------------------------------------------------ checks
    def _checked_where(self) -> DecodeIn:
        value = self.decode.where
        if value is None:
            return "executors" if self.apply_mode == "executors" else "driver"
        if value not in _DECODE_IN:
            raise InvalidOption(
                f"decode_in must be 'driver' or 'executors', not {value!r}", option="decode_in"
            )
        if self.apply_mode == "executors" and value != "executors":
            raise InvalidOption(
                "apply_mode='executors' decodes in its Spark tasks: decode_in='driver' does "
                "not apply to it",
                option="decode_in",
            )
        return value

    def _check_processes(self, where: DecodeIn) -> None:
        processes = self.decode.processes
        if not isinstance(processes, int) or isinstance(processes, bool):
            raise InvalidArgument(f"decode_processes must be an int, got {processes!r}")
        if processes < 0:
            raise InvalidOption(
                f"decode_processes must be >= 0, got {processes}", option="decode_processes"
            )
        if processes and (self.apply_mode != "driver" or self.jvm_json):
            raise InvalidOption(
                "decode_processes applies to apply_mode='driver' with a Python decoder "
                "(executors mode decodes in Spark tasks; json_decoder='jvm' in the JVM)",
                option="decode_processes",
            )
        if processes and where == "executors":
            raise InvalidOption(
                "decode_processes decodes in the driver; decode_in='executors' in Spark tasks",
                option="decode_processes",
            )

    def _check_decoder_options(self) -> None:
        if not self.decode.options:
            return
        if self.jvm_json:
            from cdc_sink.spark.decode import jvm_allow_truncate

            jvm_allow_truncate(self.decode.options)  # the one option it takes
            return
        from cdc_sink.formats import get_decoder

        get_decoder(self.format, **self.decode.options)  # raises InvalidOption naming it


def _frozen_mapping(m: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(m or {}))


def _decode_options(
    json_decoder: JsonDecoder, options: dict[str, Any], processes: int, where: DecodeIn | None
) -> DecodeOptions:
    """Rebuilds a pickled :class:`DecodeOptions` (a mapping proxy does not pickle)."""
    return DecodeOptions(json_decoder, options, processes, where)
