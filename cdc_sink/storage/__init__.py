"""Durability: WAL segments, the version log, snapshots, and crash-injection points.

Modules, lowest first: ``objectstore`` (the one interface every byte goes through, with
what differs between backends asked for by name; ``fsutil``, the durable file
operations, is its local backend's and imported by no other module), ``faults`` (crash
points for tests), ``framing`` (length + CRC32C records, checked JSON headers),
``bounded_ipc`` (an Arrow IPC stream's decompressed size, known before it is read),
``wal`` (segment framing), ``change_codec`` (how a change batch is encoded in a segment),
``segments`` (change batches in segments), ``preimages`` (the change feed's stored
pre-images), ``version_log`` (the commit point), ``snapshot`` (incremental page files +
manifests), ``history`` (what each bucket's versions are made of). The table
(``cdc_sink.table``) composes them.
"""
