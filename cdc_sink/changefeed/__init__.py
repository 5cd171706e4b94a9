"""The change feed: the changes between two versions of a table, read from the
versions' own deltas (docs/architecture.md, "Change feed").

* :mod:`cdc_sink.changefeed.feed` -- the range, the versions each bucket changed, the
  records (:func:`changes` is :meth:`Table.changes <cdc_sink.table.Table.changes>`);
* :mod:`cdc_sink.changefeed.images` -- the rows one version changed in a tablet and their
  pre- and post-images, vectorized;
* :mod:`cdc_sink.changefeed.stored` -- the tablet a reader rebuilds from the pre-images a
  commit stores with ``TableOptions.change_images`` (:mod:`cdc_sink.storage.preimages`).
"""

from cdc_sink.changefeed.feed import META_COLUMNS, FeedPlan, changes
from cdc_sink.errors import ChangesNotRetained

__all__ = ["META_COLUMNS", "ChangesNotRetained", "FeedPlan", "changes"]
