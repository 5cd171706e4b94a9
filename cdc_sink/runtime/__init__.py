"""Process tuning: settings of the Python process a sink runs in, not of a table.

* :mod:`cdc_sink.runtime.hugepages` - numpy's (and mimalloc's) transparent huge pages.
* :mod:`cdc_sink.runtime.arrow_pool` - which allocator pyarrow uses.
* :mod:`cdc_sink.runtime.numpy_pool` - numpy buffers kept for reuse in the sink's hot
  paths (the C extension ``cdc_sink.runtime._npcache``).

The streaming job sets the first two (``--numpy-hugepages``, ``--arrow-memory-pool``);
the library itself never changes them. They depend on nothing of the product but its
errors, and nothing below the Spark layer imports them.
"""
