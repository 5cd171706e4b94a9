package io.cdcsink.format;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.LargeListVector;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.util.TransferPair;

/** A WAL segment (docs/format.md §9) decoded into parts of events. */
final class Segment implements AutoCloseable {
  /** Events of one record batch (format 1) or the whole body (format 2). */
  static final class Part {
    int n;
    byte[] ops;
    long[] seqs; // null without a sequence column
    List<FieldVector> keys = new ArrayList<>();
    /** value column name (as the segment's schema names it) -> its values */
    Map<String, FieldVector> values = new HashMap<>();
    Map<String, boolean[]> set = new HashMap<>();
    /** true: the j-th set event holds the j-th value (format 2); false: event i holds value i. */
    boolean ranked;
  }

  final String path;
  final TableSchema schema; // the schema the header names
  final List<Part> parts = new ArrayList<>();
  private final List<AutoCloseable> owned = new ArrayList<>();

  private Segment(String path, TableSchema schema) {
    this.path = path;
    this.schema = schema;
  }

  interface SchemaLoader {
    TableSchema load(int schemaId) throws CdcSinkFormatException;
  }

  static Segment read(byte[] d, String path, long version, int bucket, SchemaLoader schemas, BufferAllocator alloc)
      throws CdcSinkFormatException {
    List<Framing.Record> recs = Framing.readExactly(d, path, Framing.WAL, 2);
    Framing.Record h = recs.get(0);
    JsonNode o = Json.parse(d, h.payloadOffset, h.length, path);
    for (String k : new String[] {"version", "bucket", "schema_id", "rows", "format", "bytes"}) {
      JsonNode n = o.get(k);
      if (n == null) {
        if (k.equals("format") || k.equals("bytes")) continue;
        throw new CdcSinkFormatException(path + ": offset " + h.offset + ": segment header lacks '" + k + "'");
      }
      if (!n.isIntegralNumber() || !n.canConvertToLong() || n.longValue() < 0 || n.longValue() > (1L << 53) - 1) {
        throw new CdcSinkFormatException(path + ": offset " + h.offset + ": segment header field '" + k
            + "' is not an int in 0..2^53-1");
      }
    }
    long format = o.has("format") ? o.get("format").longValue() : 1;
    if (format != 1 && format != 2) {
      throw new CdcSinkFormatException(path + ": offset " + h.offset + ": unknown segment format " + format);
    }
    if (o.get("version").longValue() != version || o.get("bucket").longValue() != bucket) {
      throw new CdcSinkFormatException(path + ": header names version " + o.get("version") + " bucket "
          + o.get("bucket") + ", not version " + version + " bucket " + bucket);
    }
    long rows = o.get("rows").longValue();
    TableSchema schema = schemas.load((int) o.get("schema_id").longValue());
    Segment seg = new Segment(path, schema);
    Framing.Record body = recs.get(1);
    if (o.has("bytes") && o.get("bytes").longValue() > Math.max(64L << 20, 4096L * body.length)) {
      throw new CdcSinkFormatException(path + ": offset " + h.offset + ": header claims " + o.get("bytes")
          + " decompressed bytes for a body of " + body.length + " (corruption)");
    }
    byte[] b = java.util.Arrays.copyOfRange(d, body.payloadOffset, body.payloadOffset + body.length);
    List<VectorSchemaRoot> roots = Vectors.readStream(b, alloc, path + ": offset " + body.offset);
    seg.owned.addAll(roots);
    try {
      long total = 0;
      for (VectorSchemaRoot r : roots) {
        Part p = format == 2 ? seg.compactPart(r, alloc) : seg.widePart(r);
        total += p.n;
        seg.parts.add(p);
      }
      if (format == 2 && roots.size() != 1) throw seg.bad("a compact body holds " + roots.size() + " batches");
      if (total != rows) throw seg.bad("the body holds " + total + " events, the header says " + rows);
    } catch (CdcSinkFormatException | RuntimeException e) {
      seg.close();
      if (e instanceof CdcSinkFormatException) throw (CdcSinkFormatException) e;
      throw new CdcSinkFormatException(path + ": body does not fit: " + e, e);
    }
    return seg;
  }

  private CdcSinkFormatException bad(String what) {
    return new CdcSinkFormatException(path + ": " + what + " (corruption)");
  }

  private Part compactPart(VectorSchemaRoot r, BufferAllocator alloc) throws CdcSinkFormatException {
    if (r.getRowCount() != 1) throw bad("a compact body's batch has " + r.getRowCount() + " rows, not 1");
    Map<String, FieldVector> items = new HashMap<>();
    for (FieldVector v : r.getFieldVectors()) {
      if (!(v instanceof LargeListVector)) throw bad("field " + v.getName() + " is not a large list");
      LargeListVector l = (LargeListVector) v;
      if (l.isNull(0)) throw bad("field " + v.getName() + " is a null list");
      long start = l.getElementStartIndex(0);
      long end = l.getElementEndIndex(0);
      FieldVector data = l.getDataVector();
      TransferPair tp = data.getTransferPair(alloc);
      tp.splitAndTransfer((int) start, (int) (end - start));
      FieldVector item = (FieldVector) tp.getTo();
      owned.add(item);
      items.put(v.getName(), item);
    }
    Part p = new Part();
    p.ranked = true;
    fill(p, items, true);
    return p;
  }

  private Part widePart(VectorSchemaRoot r) throws CdcSinkFormatException {
    Map<String, FieldVector> cols = new HashMap<>();
    for (FieldVector v : r.getFieldVectors()) cols.put(v.getName(), v);
    Part p = new Part();
    p.ranked = false;
    fill(p, cols, false);
    return p;
  }

  private void fill(Part p, Map<String, FieldVector> f, boolean ranked) throws CdcSinkFormatException {
    FieldVector op = f.remove("__op");
    if (!(op instanceof TinyIntVector)) throw bad("__op is missing or not Int8");
    int n = op.getValueCount();
    p.n = n;
    p.ops = new byte[n];
    for (int i = 0; i < n; i++) {
      byte c = ((TinyIntVector) op).get(i);
      if (op.isNull(i) || c < 0 || c > 4) throw bad("event " + i + " has op code outside 0..4");
      p.ops[i] = c;
    }
    FieldVector seq = f.remove("__seq");
    if (schema.sequenceColumn() != null) {
      if (!(seq instanceof BigIntVector) || seq.getValueCount() != n) throw bad("__seq is missing or not Int64 of n");
      BigIntVector s = (BigIntVector) seq;
      p.seqs = new long[n];
      long acc = 0;
      for (int i = 0; i < n; i++) {
        if (s.isNull(i)) throw bad("__seq holds a null");
        long x = s.get(i);
        acc = ranked ? acc + x : x;
        p.seqs[i] = acc;
      }
    } else if (seq != null) {
      throw bad("__seq is present without a sequence column");
    }
    for (String k : schema.primaryKey()) {
      FieldVector kv = f.remove(k);
      if (kv == null || kv.getValueCount() != n) throw bad("key field " + k + " is missing or of another length");
      p.keys.add(kv);
    }
    for (Column c : schema.columns()) {
      if (c.isKey()) continue;
      FieldVector sv = f.remove("__set__" + c.name());
      FieldVector vv = f.remove(c.name());
      if (sv == null && vv == null) continue;
      if (!(sv instanceof BitVector) || vv == null || sv.getValueCount() != n) {
        throw bad("value column " + c.name() + " lacks its presence bitmap or values");
      }
      BitVector bits = (BitVector) sv;
      boolean[] set = new boolean[n];
      int k = 0;
      for (int i = 0; i < n; i++) {
        if (bits.isNull(i)) throw bad("presence bitmap of " + c.name() + " holds a null");
        set[i] = bits.get(i) == 1;
        if (set[i]) k++;
      }
      if (ranked ? vv.getValueCount() != k : vv.getValueCount() != n) {
        throw bad("value column " + c.name() + " holds " + vv.getValueCount() + " values");
      }
      Field want = TableSchema.field(c);
      if (!Vectors.canCastTo(vv.getField().getType(), want.getType())) {
        throw bad("value column " + c.name() + " has type " + vv.getField().getType());
      }
      p.values.put(c.name(), vv);
      p.set.put(c.name(), set);
    }
    if (!f.isEmpty()) throw bad("unknown field(s) " + f.keySet());
  }

  @Override
  public void close() {
    for (AutoCloseable c : owned) {
      try {
        c.close();
      } catch (Exception ignored) {
        // memory only
      }
    }
    owned.clear();
  }

  /** {@link #effect}: the event is rejected (an update of no live row, an upsert of a new key
   * without every required column), and does nothing. */
  static final int REJECT = 0;
  /** {@link #effect}: the key gets a fresh row (defaults plus the set columns). */
  static final int INSERT = 1;
  /** {@link #effect}: the set columns of the key's live row are replaced. */
  static final int UPDATE = 2;
  /** {@link #effect}: the key's row is deleted (a tombstone kept with a sequence column). */
  static final int DELETE = 3;

  /**
   * What event {@code i} (op 0 insert, 1 upsert, 2 update, 3 delete; truncates and stale events
   * are the caller's) does to its key (§14.4), given whether the key has a live row and, for an
   * upsert of a new key, whether every required column is set ({@code requiredMissing}: a
   * required column the event's part does not carry; {@code required}: per required column
   * carried, which events set it).
   */
  static int effect(byte op, boolean isLive, boolean requiredMissing, List<boolean[]> required, int i) {
    switch (op) {
      case 0:
        return INSERT;
      case 1:
        if (isLive) return UPDATE;
        if (requiredMissing) return REJECT;
        for (boolean[] s : required) if (!s[i]) return REJECT;
        return INSERT;
      case 2:
        return isLive ? UPDATE : REJECT;
      default:
        return DELETE;
    }
  }
}
