package io.cdcsink.format;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

/** A snapshot manifest (docs/format.md §10.1). */
final class Manifest {
  /** A page location: [file, offset, length, crc32c, rows, min, max, null_count]. */
  static final class Loc {
    final String file;
    final long offset;
    final int length;
    final int crc;
    final long rows;
    /** Statistics (§10.4): min and max as stored (JSON, null when unknown), nulls. */
    final JsonNode min;
    final JsonNode max;
    final long nullCount;

    Loc(String file, long offset, int length, int crc, long rows, JsonNode min, JsonNode max, long nullCount) {
      this.file = file;
      this.offset = offset;
      this.length = length;
      this.crc = crc;
      this.rows = rows;
      this.min = min;
      this.max = max;
      this.nullCount = nullCount;
    }
  }

  final String path;
  final long version;
  final int schemaId;
  final long rowCount;
  final int pageRows;
  final Map<Integer, List<Loc>> columns = new HashMap<>();
  final List<List<Loc>> keys = new ArrayList<>();
  final Loc dv;

  private Manifest(String path, long version, int schemaId, long rowCount, int pageRows, Loc dv) {
    this.path = path;
    this.version = version;
    this.schemaId = schemaId;
    this.rowCount = rowCount;
    this.pageRows = pageRows;
    this.dv = dv;
  }

  static Manifest parse(byte[] d, String path) throws CdcSinkFormatException {
    Framing.Record rec = Framing.readExactly(d, path, Framing.SNAPSHOT, 1).get(0);
    JsonNode o = Json.parse(d, rec.payloadOffset, rec.length, path);
    long pf = o.has("page_format") ? Json.integer(o, "page_format", path) : 1;
    if (pf < 1 || pf > 3) throw new CdcSinkFormatException(path + ": unknown page_format " + pf);
    long sf = o.has("stats_format") ? Json.integer(o, "stats_format", path) : 1;
    if (sf < 1 || sf > 2) throw new CdcSinkFormatException(path + ": unknown stats_format " + sf);
    long version = Json.integer(o, "version", path);
    if (version != Json.versionOf(path)) {
      throw new CdcSinkFormatException(path + ": manifest names version " + version);
    }
    JsonNode dvn = o.get("dv");
    Manifest m = new Manifest(path, version, (int) Json.integer(o, "schema_id", path),
        Json.integer(o, "row_count", path), (int) Json.integer(o, "page_rows", path),
        dvn == null || dvn.isNull() ? null : loc(dvn, path));
    JsonNode cols = o.get("columns");
    if (cols == null || !cols.isObject()) throw new CdcSinkFormatException(path + ": columns is not an object");
    Iterator<Map.Entry<String, JsonNode>> it = cols.fields();
    while (it.hasNext()) {
      Map.Entry<String, JsonNode> c = it.next();
      int id = Json.idKey(c.getKey(), "column", path);
      m.columns.put(id, locs(c.getValue(), path));
    }
    JsonNode keys = o.get("keys");
    if (keys == null || !keys.isArray()) throw new CdcSinkFormatException(path + ": keys is not a list");
    for (JsonNode k : keys) m.keys.add(locs(k, path));
    for (List<Loc> k : m.keys) {
      long rows = 0;
      for (Loc l : k) rows += l.rows;
      if (rows != m.rowCount) throw new CdcSinkFormatException(path + ": key pages cover " + rows + " rows, not " + m.rowCount);
    }
    return m;
  }

  private static List<Loc> locs(JsonNode n, String path) throws CdcSinkFormatException {
    if (n == null || !n.isArray()) throw new CdcSinkFormatException(path + ": a page list is not a list");
    List<Loc> out = new ArrayList<>();
    for (JsonNode l : n) out.add(loc(l, path));
    return out;
  }

  private static Loc loc(JsonNode l, String path) throws CdcSinkFormatException {
    if (!l.isArray() || l.size() != 8) throw new CdcSinkFormatException(path + ": a page location is not a list of 8");
    String file = Json.path(l.get(0), Json.PAGES, "pages", path);
    for (int i = 1; i <= 4; i++) {
      if (!l.get(i).isIntegralNumber()) throw new CdcSinkFormatException(path + ": a page location is malformed");
    }
    long length = l.get(2).longValue();
    if (length < 0 || length > Integer.MAX_VALUE) throw new CdcSinkFormatException(path + ": a page is too large");
    JsonNode nc = l.get(7);
    long nulls = nc.isIntegralNumber() && nc.canConvertToLong() ? nc.longValue() : -1;
    return new Loc(file, l.get(1).longValue(), (int) length, (int) l.get(3).longValue(), l.get(4).longValue(),
        l.get(5), l.get(6), nulls);
  }
}
