"""Durability: WAL segments, the version log, snapshots, and crash-injection points.

Modules, lowest first: ``fsutil`` (durable file operations), ``faults`` (crash points for
tests), ``framing`` (length + CRC32C records), ``wal`` (segment files), ``change_codec``
(how a change batch is encoded in a segment), ``segments`` (change batches in segments),
``version_log`` (the commit point), ``snapshot`` (incremental page files + manifests),
``history`` (what each bucket's versions are made of). The table (``cdc_sink.table``) composes them.
"""
