"""The grammar check of whole JSON events (private).

The structural index (:mod:`._jsonscan`) checks an event's objects, arrays and member
names; its compiled pass also verifies the full grammar of nearly every event it
indexes. The events it cannot vouch for (a malformed value, a surrogate escape, ``NaN``,
a number with a far exponent) get their verdict here, in two steps:

1. **UTF-8**: JSON text is UTF-8 (RFC 8259); one Arrow validation of all of them.
2. **grammar**: when the compiled pass is built (``_jsonscan._cscan``), its
   ``grammar`` (``_cgrammar.h``): a transcription of the RapidJSON reader inside Arrow's
   JSON reader, giving the same verdict and the same message without handing event
   bytes to Arrow's JSON reader, which pyarrow 26 can crash the process on (it
   segfaults on a document that starts with ``null``). Without the compiled pass,
   Arrow's JSON reader itself (:func:`._jsonarrow.arrow_grammar`).

An event gets the same reason either way; ``tests/formats/test_grammar.py`` checks the
compiled check against Arrow's reader, message for message.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cdc_sink.formats import _jsonscan
from cdc_sink.formats._arrays import Parts, cast_rows, no_reason, spans
from cdc_sink.formats._jsonarrow import arrow_grammar

__all__ = ["check_grammar", "grammar_codes"]

MESSAGES = {
    1: "The document is empty.",
    2: "The document root must not be followed by other values.",
    3: "Invalid value.",
    4: "Missing a name for object member.",
    5: "Missing a colon after a name of object member.",
    6: "Missing a comma or '}' after an object member.",
    7: "Missing a comma or ']' after an array element.",
    8: "Incorrect hex digit after \\u escape in string.",
    9: "The surrogate pair in string is invalid.",
    10: "Invalid escape character in string.",
    11: "Missing a closing quotation mark in string.",
    12: "Invalid encoding in string.",
    13: "Number too big to be stored in double.",
    14: "Miss fraction part in number.",
    15: "Miss exponent in number.",
    100: "not a single object (0 values)",
    101: "not a single object (more than one value)",
}
"""RapidJSON's messages (``GetParseError_En``) by error code, and two of ours."""
_REASONS = np.full(256, "invalid JSON: unknown grammar error", dtype=object)
for _code, _message in MESSAGES.items():
    _REASONS[_code] = f"invalid JSON: {_message}"


def check_grammar(parts: Parts, check: np.ndarray, reasons: np.ndarray) -> None:
    """Refuses the events of ``check`` that are not valid UTF-8 or not exactly one JSON
    value, with the reason Arrow's JSON reader gives (``invalid JSON: ...``)."""
    events = np.flatnonzero(check)
    if not len(events):
        return
    _, not_utf8 = cast_rows(
        spans(parts, parts.starts[events], parts.ends[events]), pa.string_view()
    )
    if not_utf8.any():
        bad = events[not_utf8]
        reasons[bad[no_reason(reasons[bad])]] = "invalid JSON: not valid UTF-8"
        events = events[~not_utf8]
    if not len(events):
        return
    if _jsonscan._cscan is None:
        arrow_grammar(parts, events, reasons)
        return
    codes = grammar_codes(parts.data, parts.starts[events], parts.ends[events])
    refused = np.flatnonzero(codes)
    bad = events[refused]
    free = no_reason(reasons[bad])
    reasons[bad[free]] = _REASONS[codes[refused][free]]


def grammar_codes(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The compiled check's code per document ``data[starts[i]:ends[i]]`` (0: valid;
    else a key of :data:`MESSAGES`)."""
    codes = np.zeros(len(starts), dtype=np.uint8)
    compiled = _jsonscan._cscan
    assert compiled is not None, "the compiled pass is not built"
    compiled.grammar(
        data, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64), codes
    )
    return codes
