"""``python -m cdc_sink.job …``: the streaming job (see :mod:`cdc_sink.job`)."""

import sys

from cdc_sink.job import main

sys.exit(main())
