"""cdc_sink: a realtime-updatable columnar table fed by Kafka CDC streams through Spark.

The public surface (docs/architecture.md §9)::

    import cdc_sink
    schema = cdc_sink.TableSchema.from_dict({...})
    table = cdc_sink.create_table(path, schema)      # or cdc_sink.open_table(path)
    res = table.apply(events, app_id="job", batch_id=7)
    table.read(version=..., timestamp=..., columns=..., filter=...)
    table.get(keys, version=...); table.versions(); table.compact(); table.gc(dry_run=True)
    cdc_sink.spark.register(spark); cdc_sink.spark.sink(path, ...)

Importing this package imports neither Spark nor Kafka.
"""

from cdc_sink import errors
from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.errors import (
    CdcSinkError,
    CommitConflict,
    SchemaError,
    SchemaMismatch,
    TableExists,
    TableNotFound,
    VersionNotFound,
    WalCorruption,
)
from cdc_sink.schema import Column, TableSchema
from cdc_sink.table import CommitResult, Table, TableOptions, create_table, open_table

__all__ = [
    "CdcSinkError",
    "ChangeBatch",
    "Column",
    "CommitConflict",
    "CommitResult",
    "Rejects",
    "SchemaError",
    "SchemaMismatch",
    "Table",
    "TableExists",
    "TableNotFound",
    "TableOptions",
    "TableSchema",
    "VersionNotFound",
    "WalCorruption",
    "create_table",
    "errors",
    "open_table",
]
__version__ = "0.1.0"
