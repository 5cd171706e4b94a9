"""The change feed: the changes between two versions of a table, read from the
versions' own deltas (docs/architecture.md, "Change feed").

* :mod:`cdc_sink.changefeed.feed` -- the range, the versions each bucket changed, the
  records (:func:`changes` is :meth:`Table.changes <cdc_sink.table.Table.changes>`);
* :mod:`cdc_sink.changefeed.images` -- the rows one version changed in a tablet and their
  pre- and post-images, vectorized;
* :mod:`cdc_sink.changefeed.stored` -- the pre-images a commit stores with
  ``TableOptions.change_images``, and the tablet a reader rebuilds from them.
"""

from cdc_sink.changefeed.feed import META_COLUMNS, ChangesNotRetained, FeedPlan, changes

__all__ = ["META_COLUMNS", "ChangesNotRetained", "FeedPlan", "changes"]
