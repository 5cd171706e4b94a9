"""Arrow's JSON parser over indexed events: grammar validation and unescaping (private).

The structural index (:mod:`._jsonscan`) finds every member without parsing values;
what it does not check follows the rules of Arrow's JSON reader. Without the compiled
pass, that reader itself does it, run straight over the input buffer (parse only: no
column is converted):

- :func:`arrow_grammar` checks the full grammar of whole events, bisecting to isolate
  the events Arrow refuses (only when the compiled grammar check of
  :mod:`._jsongrammar` is not built);
- :func:`string_values` unescapes the string values with backslash escapes: with the
  compiled pass built, by its ``unescape`` (RapidJSON's rules, without Arrow's reader);
  else by Arrow's reader (all of them as one small document).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from cdc_sink.formats import _jsonscan
from cdc_sink.formats._arrays import Parts, gather, scatter, spans
from cdc_sink.formats._jsonscan import RUN_BYTES

__all__ = ["arrow_grammar", "arrow_reason", "string_values"]

_CHUNK_BYTES = RUN_BYTES  # Arrow validation chunks


def string_values(
    parts: Parts,
    starts: np.ndarray,
    ends: np.ndarray,
    escaped: np.ndarray,
    *,
    views: bool = False,
) -> tuple[pa.Array, np.ndarray]:
    """The contents of JSON strings (between quotes), unescaped, as ``binary`` (or as
    ``binary_view`` with ``views``: for a caller that casts them itself, e.g. to
    ``string``, which then gathers the bytes once).

    Strings without a backslash are views of the input; escaped ones are unescaped the
    way Arrow's JSON parser unescapes them (by the compiled pass when it is built).

    Returns:
        The contents and a mask of strings whose escapes are invalid.
    """
    plain = spans(parts, starts, ends)
    esc = np.flatnonzero(escaped)
    bad = np.zeros(len(starts), dtype=bool)
    if not len(esc):
        return plain if views else plain.cast(pa.binary()), bad
    if _jsonscan._cscan is not None:
        decoded, bad_esc = _unescape_compiled(parts.data, starts[esc], ends[esc])
    else:
        decoded, bad_esc = _unescape(parts.data, starts[esc] - 1, ends[esc] + 1)
    bad[esc] = bad_esc
    out = _replaced(plain, esc, decoded.cast(pa.binary_view()))
    return out if views else out.cast(pa.binary()), bad


def _replaced(views: pa.Array, at: np.ndarray, other: pa.Array) -> pa.Array:
    """The ``binary_view`` array ``views`` with its values ``at`` replaced by those of
    ``other`` (``binary_view``, one per ``at``): views of both arrays' buffers, so the one
    cast that follows copies each value once."""
    n = len(views)
    mine = views.buffers()
    theirs = other.buffers()
    table = np.frombuffer(mine[1], np.uint32)[views.offset * 4 : (views.offset + n) * 4]
    table = table.reshape(n, 4).copy()
    new = np.frombuffer(theirs[1], np.uint32)[other.offset * 4 : (other.offset + len(other)) * 4]
    new = new.reshape(len(other), 4).copy()
    long_ = new[:, 0] > 12  # a long value names its buffer: theirs follow ours
    new[long_, 2] += len(mine) - 2
    table[at] = new
    valid = np.ones(n, dtype=bool)
    if views.null_count:
        valid &= np.asarray(views.is_valid(), dtype=bool)
    if other.null_count:
        valid[at] &= np.asarray(other.is_valid(), dtype=bool)
    bits = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary_view(), n, [bits, pa.py_buffer(table), *mine[2:], *theirs[2:]]
    )


def _unescape_compiled(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[pa.Array, np.ndarray]:
    """The contents ``data[starts:ends]`` decoded by the compiled pass the way Arrow's
    reader decodes them (same values, same refusals; never handed to that reader)."""
    compiled = _jsonscan._cscan
    assert compiled is not None
    k = len(starts)
    starts = np.ascontiguousarray(starts, np.int64)
    ends = np.ascontiguousarray(ends, np.int64)
    out = np.empty(max(int((ends - starts).sum()), 1), np.uint8)
    offsets = np.empty(k + 1, np.int32)
    bad = np.zeros(k, np.uint8)
    size = compiled.unescape(data, starts, ends, offsets, out, bad)
    refused = bad.view(bool)
    validity = pa.py_buffer(np.packbits(~refused, bitorder="little")) if refused.any() else None
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(out[:size])]
    return pa.Array.from_buffers(pa.binary(), k, buffers), refused


def _unescape(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[pa.Array, np.ndarray]:
    """Parses quoted JSON strings ``data[starts:ends]`` with Arrow's JSON reader."""
    lengths = ends - starts
    toks = gather(data, starts, lengths)
    const = np.frombuffer(b'{"v":}\n', np.uint8)
    ext = np.concatenate([toks, const])
    c0 = len(toks)
    tok_start = np.cumsum(lengths) - lengths
    k = len(starts)
    seg_start = np.stack([np.full(k, c0), tok_start, np.full(k, c0 + 5)], axis=1).ravel()
    seg_len = np.stack([np.full(k, 5), lengths, np.full(k, 2)], axis=1).ravel()
    doc = gather(ext, seg_start, seg_len)
    line_ends = np.cumsum(lengths + 7)
    line_starts = line_ends - lengths - 7
    schema = pa.schema([("v", pa.string())])
    table, bad = _read_lines(doc, line_starts, line_ends, schema)
    return scatter(table.column("v").combine_chunks(), np.flatnonzero(~bad), k), bad


def _read_lines(
    doc: np.ndarray,
    line_starts: np.ndarray,
    line_ends: np.ndarray,
    schema: pa.Schema,
    *,
    separated: bool = True,
) -> tuple[pa.Table, np.ndarray]:
    """Reads the JSON objects ``doc[line_starts[i]:line_ends[i]]`` with Arrow, bisecting on
    failure. With ``separated=False`` the objects need no newline between them (Arrow's
    ``newlines_in_values`` chunker finds their boundaries); bytes between the ranges must
    be blank. Returns the rows of the objects that parsed (in order) and the mask of those
    that did not (or that did not read as exactly one object)."""
    k = len(line_starts)
    bad = np.zeros(k, dtype=bool)
    tables: list[pa.Table] = []
    longest = int((line_ends - line_starts).max()) if k else 0
    options = pj.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=not separated
    )
    read = pj.ReadOptions(use_threads=False, block_size=max(1 << 20, 2 * longest + 64))

    def go(i: int, j: int) -> None:
        lo, hi = int(line_starts[i]), int(line_ends[j - 1])
        try:
            t = pj.read_json(
                pa.BufferReader(pa.py_buffer(doc[lo:hi])), read_options=read, parse_options=options
            )
            if t.num_rows == j - i:
                tables.append(t)
                return
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        if j - i == 1:
            bad[i] = True
            return
        mid = (i + j) // 2
        go(i, mid)
        go(mid, j)

    if k:
        go(0, k)
    if not tables:
        return pa.table({f.name: pa.nulls(0, f.type) for f in schema}), bad
    return pa.concat_tables(tables), bad


def arrow_grammar(parts: Parts, events: np.ndarray, reasons: np.ndarray) -> None:
    """Parses ``events`` (indices, ascending) with Arrow's JSON reader (no column is
    converted) and refuses those it cannot parse as exactly one object: the grammar
    check when the compiled one (:mod:`._jsongrammar`) is not built.

    The values of a binary array are contiguous, so a chunk of events is read straight
    from the input buffer (zero copy) unless some of its events are left out, which are
    then blanked in a copy.
    """
    check = np.zeros(parts.n, dtype=bool)
    check[events] = True
    n = parts.n
    csum = np.cumsum(parts.lengths)
    e0 = int(events[0])
    while e0 < n:
        base = csum[e0 - 1] if e0 else 0
        e1 = min(max(int(np.searchsorted(csum, base + _CHUNK_BYTES, side="right")), e0 + 1), n)
        sel = np.flatnonzero(check[e0:e1]) + e0
        if len(sel):
            lo, hi = int(parts.starts[e0]), int(parts.ends[e1 - 1])
            doc = parts.data[lo:hi]
            if len(sel) < e1 - e0:
                skip = ~check[e0:e1]
                doc = doc.copy()
                doc[np.repeat(skip, parts.lengths[e0:e1])] = 32
            starts, ends = parts.starts[sel] - lo, parts.ends[sel] - lo
            _, bad = _read_lines(doc, starts, ends, pa.schema([]), separated=False)
            for e in np.flatnonzero(bad).tolist():
                if reasons[sel[e]] is None:
                    reasons[sel[e]] = arrow_reason(doc[int(starts[e]) : int(ends[e])])
        e0 = e1


def arrow_reason(doc: np.ndarray) -> str:
    """The reject reason Arrow's JSON reader gives the document ``doc`` (one event)."""
    try:
        t = pj.read_json(
            pa.BufferReader(pa.py_buffer(doc)),
            parse_options=pj.ParseOptions(
                explicit_schema=pa.schema([]),
                unexpected_field_behavior="ignore",
                newlines_in_values=True,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        msg = str(exc).removeprefix("JSON parse error: ").removesuffix(" in row 0")
        return f"invalid JSON: {msg}"
    return f"invalid JSON: not a single object ({t.num_rows} values)"
