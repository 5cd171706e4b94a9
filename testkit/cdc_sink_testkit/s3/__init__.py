"""A real S3 server for tests: SeaweedFS on 127.0.0.1 (:class:`SeaweedS3`).

::

    from cdc_sink_testkit.s3 import SeaweedS3
    from cdc_sink.storage.objectstore import store_for

    with SeaweedS3() as s3:                      # started; its first bucket exists
        store = store_for(s3.url("t1"), s3.storage_options())

The pieces: :mod:`~cdc_sink_testkit.s3.server` (the process, ports, readiness, buckets)
and :mod:`~cdc_sink_testkit.s3.sigv4` (the signed bucket requests the kit makes itself);
:mod:`~cdc_sink_testkit.s3.latency` puts a fixed network latency in front of a server
(:class:`LatencyProxy`).
"""

from __future__ import annotations

from cdc_sink_testkit.s3.latency import REQUEST_KINDS, LatencyProxy
from cdc_sink_testkit.s3.server import WEED_ENV, S3StartError, SeaweedS3, find_weed

__all__ = ["REQUEST_KINDS", "WEED_ENV", "LatencyProxy", "S3StartError", "SeaweedS3", "find_weed"]
