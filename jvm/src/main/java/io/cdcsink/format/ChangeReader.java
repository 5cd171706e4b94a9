package io.cdcsink.format;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.util.MemoryUtil;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.hadoop.conf.Configuration;

/**
 * The change records of one bucket, ordered by version, as Arrow batches of
 * {@link ChangePlan#arrowSchema()}; the caller closes each root; close() frees the rest.
 *
 * <p>Per version of the plan (cdc_sink/changefeed/feed.py's {@code bucket_changes}): a data
 * version with stored pre-images (§12) starts from those rows alone and applies the version's
 * segment (no page of the bucket is read); any other data version needs the bucket at {@code v -
 * 1}: loaded once from the newest snapshot at or below it plus the segments after it, then carried
 * forward segment by segment across the range (reloaded after a bulk load). A version's records
 * are, per key its events name (every live row for a truncate): a delete of the row live before
 * and not after, an insert of the row live after and not before, and a pre-image and post-image
 * of a row live on both sides whose output columns differ; a bulk version inserts every live row,
 * a schema version adding a column with a default updates every live row; with
 * {@code setColumnsOnly}, one record per changed row with the cells the version wrote. Versions
 * are read lazily as the iterator advances; errors while iterating are
 * {@link BucketReader.FormatRuntimeException}s.
 */
public final class ChangeReader implements AutoCloseable {
  private static final int CHUNK = 65536;
  private static final byte[][] TYPES = {
    "insert".getBytes(StandardCharsets.UTF_8), "update_preimage".getBytes(StandardCharsets.UTF_8),
    "update_postimage".getBytes(StandardCharsets.UTF_8), "delete".getBytes(StandardCharsets.UTF_8)};
  private static final byte INSERT = 0;
  private static final byte PRE = 1;
  private static final byte POST = 2;
  private static final byte DELETE = 3;

  private final ChangeBucketPlan plan;
  private final Configuration conf;
  private final BufferAllocator allocator;
  private final List<Column> cols;
  private final int nkeys;
  private final int nc;
  private final Schema schema;
  private final ArrayDeque<VectorSchemaRoot> pending = new ArrayDeque<>();
  private final Map<String, Segment> segments = new HashMap<>();
  private final Map<String, List<ChangeState.Prepared>> prepared = new HashMap<>();
  private final Map<Integer, TableSchema> schemas = new HashMap<>();
  private final Map<Integer, boolean[]> presence = new HashMap<>();
  private ChangeState.Sources sources;
  private Fs fs;
  private PageFiles files;
  private ChangeState main;
  private Column seqCol;
  private long[] defaults;
  private Iterator<Map.Entry<Long, Byte>> todo;

  public ChangeReader(ChangeBucketPlan plan, Configuration conf, BufferAllocator allocator) {
    this.plan = plan;
    this.conf = conf;
    this.allocator = allocator;
    this.cols = plan.columns;
    this.nkeys = plan.nkeys;
    this.nc = cols.size();
    this.schema = ChangePlan.arrowSchema(cols, nkeys, plan.setColumnsOnly);
  }

  /** The change records of the bucket, by version (read as the iterator advances). */
  public Iterator<VectorSchemaRoot> batches() throws CdcSinkFormatException {
    fs = new Fs(plan.tableUri, conf);
    files = new PageFiles(fs, allocator);
    sources = new ChangeState.Sources();
    schemas.putAll(plan.schemas);
    TableSchema se = plan.schemaAt(plan.end);
    seqCol = se.sequenceColumn() == null ? null : se.column(se.sequenceColumn());
    defaults = new long[nc];
    for (int j = nkeys; j < nc; j++) defaults[j] = ChangeState.Sources.ref(sources.add(Vectors.defaultVector(cols.get(j), allocator)), 0);
    todo = plan.versions.entrySet().iterator();
    return new Iterator<VectorSchemaRoot>() {
      @Override
      public boolean hasNext() {
        while (pending.isEmpty() && todo.hasNext()) {
          Map.Entry<Long, Byte> e = todo.next();
          try {
            version(e.getKey(), e.getValue());
          } catch (CdcSinkFormatException ex) {
            throw new BucketReader.FormatRuntimeException(notRetainedOr(ex));
          } catch (RuntimeException ex) {
            if (ex instanceof BucketReader.FormatRuntimeException) throw ex;
            throw new BucketReader.FormatRuntimeException(notRetainedOr(
                new CdcSinkFormatException(plan.tableUri + ": bucket " + plan.bucket + " version " + e.getKey()
                    + ": " + ex, ex)));
          }
        }
        return !pending.isEmpty();
      }

      @Override
      public VectorSchemaRoot next() {
        if (!hasNext()) throw new NoSuchElementException();
        return pending.poll();
      }
    };
  }

  /** §14.7: a file GC removed while reading means the range is no longer retained. */
  private CdcSinkFormatException notRetainedOr(CdcSinkFormatException e) {
    if (e instanceof VersionNotRetainedException) return e;
    try {
      ReadPlan.LogState log = ReadPlan.LogState.load(fs);
      if (log.oldestReadable > plan.start) {
        return new VersionNotRetainedException(ChangePlan.notRetained(plan.tableUri, plan.start, plan.end,
            log.oldestReadable, log.latest) + " (" + e.getMessage() + ")", log.oldestReadable);
      }
    } catch (CdcSinkFormatException ignored) {
      // the log cannot tell: report the error
    }
    return e;
  }

  private TableSchema schemaOf(int id) throws CdcSinkFormatException {
    TableSchema s = schemas.get(id);
    if (s == null) {
      s = ReadPlan.loadSchema(fs, id);
      schemas.put(id, s);
    }
    return s;
  }

  /** Per output column: whether the schema at version u has it. */
  private boolean[] present(long u) {
    TableSchema s = plan.schemaAt(u);
    return presence.computeIfAbsent(s.schemaId(), id -> {
      boolean[] p = new boolean[nc];
      for (int j = 0; j < nc; j++) p[j] = s.columnById(cols.get(j).id()) != null;
      return p;
    });
  }

  private Segment segment(long u, String path) throws CdcSinkFormatException {
    Segment seg = segments.get(path);
    if (seg == null) {
      seg = Segment.read(fs.read(path), path, u, plan.bucket, this::schemaOf, allocator);
      segments.put(path, seg);
      List<ChangeState.Prepared> prs = new ArrayList<>();
      for (Segment.Part part : seg.parts) prs.add(ChangeState.prepare(seg, part, cols, nkeys, sources, allocator));
      prepared.put(path, prs);
    }
    return seg;
  }

  private ChangeState newState() {
    return new ChangeState(allocator, files, sources, cols, nkeys, seqCol, defaults);
  }

  /** The main state brought to version {@code target} (loaded when missing, past it or before a bulk load). */
  private void bringTo(long target) throws CdcSinkFormatException {
    boolean reload = main == null || main.at > target;
    if (!reload) {
      Long b = plan.bulk.higher(main.at);
      reload = b != null && b <= target;
    }
    if (reload) {
      if (main != null) main.close();
      main = null;
      Map.Entry<Long, String> snap = plan.snapshots.floorEntry(target);
      long s = snap == null ? -1 : snap.getKey();
      List<Segment> ahead = new ArrayList<>();
      for (Map.Entry<Long, String> e : plan.segments.subMap(s, false, plan.end, true).entrySet()) {
        ahead.add(segment(e.getKey(), e.getValue()));
      }
      Manifest m = snap == null ? null : Manifest.parse(fs.read(snap.getValue()), snap.getValue());
      main = newState();
      main.loadSnapshot(m, s, ahead);
    }
    for (Map.Entry<Long, String> e : plan.segments.subMap(main.at, false, target, true).entrySet()) {
      Segment seg = segment(e.getKey(), e.getValue());
      main.apply(seg, prepared.get(e.getValue()), e.getKey(), null);
    }
    main.at = target;
  }

  private void version(long v, byte kind) throws CdcSinkFormatException {
    if (kind == ChangePlan.BULK) {
      if (main != null) main.close();
      main = null;
      bringTo(v);
      int[] rows = main.liveRows();
      BitSet none = new BitSet();
      emitAll(main, v, rows, none, main.live, null, null);
      return;
    }
    if (kind == ChangePlan.SCHEMA) {
      bringTo(v - 1);
      int[] rows = main.liveRows();
      emitAll(main, v, rows, main.live, main.live, null, null);
      main.at = v;
      return;
    }
    String segPath = plan.segments.get(v);
    Segment seg = segment(v, segPath);
    String img = plan.images.get(v);
    ChangeState st;
    if (img != null) {
      st = newState();
      List<VectorSchemaRoot> roots = readImages(img, v, seg.schema);
      try {
        st.loadImages(roots, seg.schema, img, v);
      } finally {
        for (VectorSchemaRoot r : roots) r.close();
      }
    } else {
      bringTo(v - 1);
      st = main;
    }
    try {
      dataVersion(st, seg, v);
    } finally {
      if (st != main) st.close();
    }
  }

  /** The pre-images of version v (§12): their header checked, their batches. */
  private List<VectorSchemaRoot> readImages(String path, long v, TableSchema segSchema) throws CdcSinkFormatException {
    byte[] d = fs.read(path);
    List<Framing.Record> recs = Framing.readExactly(d, path, Framing.WAL, 2);
    Framing.Record h = recs.get(0);
    JsonNode o = Json.parse(d, h.payloadOffset, h.length, path);
    for (String k : new String[] {"version", "bucket", "schema_id", "rows"}) {
      JsonNode x = o.get(k);
      if (x == null || !x.isIntegralNumber() || !x.canConvertToLong() || x.longValue() < 0) {
        throw new CdcSinkFormatException(path + ": offset " + h.offset + ": pre-images header field '" + k
            + "' is missing or not an int (corruption)");
      }
    }
    if (o.get("version").longValue() != v || o.get("bucket").longValue() != plan.bucket
        || o.get("schema_id").longValue() != segSchema.schemaId()) {
      throw new CdcSinkFormatException(path + ": header names version " + o.get("version") + " bucket "
          + o.get("bucket") + " schema " + o.get("schema_id") + ", not version " + v + " bucket " + plan.bucket
          + " schema " + segSchema.schemaId() + " (corruption)");
    }
    Framing.Record body = recs.get(1);
    JsonNode bytes = o.get("bytes");
    if (bytes != null && bytes.isIntegralNumber() && bytes.longValue() > Math.max(64L << 20, 4096L * body.length)) {
      throw new CdcSinkFormatException(path + ": offset " + h.offset + ": header claims " + bytes
          + " decompressed bytes for a body of " + body.length + " (corruption)");
    }
    byte[] b = Arrays.copyOfRange(d, body.payloadOffset, body.payloadOffset + body.length);
    List<VectorSchemaRoot> roots = Vectors.readStream(b, allocator, path + ": offset " + body.offset);
    long total = 0;
    for (VectorSchemaRoot r : roots) total += r.getRowCount();
    if (total != o.get("rows").longValue()) {
      for (VectorSchemaRoot r : roots) r.close();
      throw new CdcSinkFormatException(path + ": the body holds " + total + " rows, the header says "
          + o.get("rows") + " (corruption)");
    }
    return roots;
  }

  /** The records of data version v: {@code st} is at v - 1; its segment is applied to it. */
  private void dataVersion(ChangeState st, Segment seg, long v) throws CdcSinkFormatException {
    List<ChangeState.Prepared> prs = prepared.get(plan.segments.get(v));
    BitSet before = (BitSet) st.live.clone();
    // The rows the events name that are live before: their images at v - 1, taken before the
    // apply changes them (every other row keeps its values through v).
    BitSet preIds = new BitSet();
    for (Segment.Part part : seg.parts) {
      for (int i = 0; i < part.n; i++) {
        if (part.ops[i] == 4) continue;
        ChangeState.Row r = st.keyed.get(BucketReader.keyOf(part.keys, i));
        if (r != null && before.get(r.id)) preIds.set(r.id);
      }
    }
    Captured early = null;
    if (!plan.setColumnsOnly && !preIds.isEmpty()) early = capture(st, preIds.stream().toArray(), present(v - 1));
    ChangeState.Track track = new ChangeState.Track();
    try {
      st.apply(seg, prs, v, track);
      BitSet cand = new BitSet();
      for (ChangeState.Row r : track.named) {
        boolean b = before.get(r.id);
        boolean a = st.live.get(r.id);
        if (b != a || (a && track.wrote.get(r.id))) cand.set(r.id);
      }
      if (track.truncated) {
        BitSet gone = (BitSet) before.clone();
        gone.andNot(st.live);
        cand.or(gone);
      }
      emitAll(st, v, cand.stream().toArray(), before, st.live, early, track);
    } finally {
      if (early != null) early.close();
    }
  }

  /** Cells of every output column for some rows (ascending), and where each row is. */
  private final class Captured implements AutoCloseable {
    final int[] rows;
    final FieldVector[] vecs;

    Captured(int[] rows, FieldVector[] vecs) {
      this.rows = rows;
      this.vecs = vecs;
    }

    int indexOf(int r) {
      return Arrays.binarySearch(rows, r);
    }

    @Override
    public void close() {
      for (FieldVector x : vecs) x.close();
    }
  }

  private FieldVector newVector(int j, int cap) {
    FieldVector v = schema.getFields().get(j).createVector(allocator);
    v.setInitialCapacity(Math.max(cap, 1));
    v.allocateNew();
    return v;
  }

  private Captured capture(ChangeState st, int[] rows, boolean[] present) throws CdcSinkFormatException {
    return capture(st, rows, present, null);
  }

  /** {@code want}: per output column, the rows whose cell is read (null: all; a null entry: all). */
  private Captured capture(ChangeState st, int[] rows, boolean[] present, boolean[][] want)
      throws CdcSinkFormatException {
    return capture(st, rows, present, want, null, null);
  }

  /**
   * {@link #capture}, a cell that still reads from the snapshot taken from {@code early} when it
   * holds the row and the column was there ({@code earlyP}) as now.
   */
  private Captured capture(ChangeState st, int[] rows, boolean[] present, boolean[][] want, Captured early,
                           boolean[] earlyP) throws CdcSinkFormatException {
    ChangeState.Row[] objs = new ChangeState.Row[rows.length];
    for (int k = 0; k < rows.length; k++) objs[k] = st.byId.get(rows[k]);
    int[] earlyIdx = null;
    if (early != null) {
      earlyIdx = new int[rows.length];
      for (int k = 0; k < rows.length; k++) earlyIdx[k] = early.indexOf(rows[k]);
    }
    FieldVector[] vecs = new FieldVector[nc];
    FieldVector[] from = early == null ? null : new FieldVector[nc];
    try {
      for (int j = 0; j < nc; j++) {
        vecs[j] = schema.getFields().get(j).createVector(allocator);
        if (early != null && earlyP[j] == present[j]) from[j] = early.vecs[j];
      }
      st.cells(rows, objs, rows.length, present, want, vecs, earlyIdx, from);
    } catch (CdcSinkFormatException | RuntimeException e) {
      for (FieldVector x : vecs) if (x != null) x.close();
      throw e;
    }
    return new Captured(rows, vecs);
  }

  /**
   * Emits the records of version v for candidate rows {@code rows} (ascending), live before
   * where {@code before} and after where {@code after}; images before come from {@code early}
   * where it holds the row, else from {@code st} as of v - 1; images after from {@code st}.
   */
  private void emitAll(ChangeState st, long v, int[] rows, BitSet before, BitSet after, Captured early,
                       ChangeState.Track track) throws CdcSinkFormatException {
    boolean[] preP = present(Math.max(v - 1, plan.start));
    boolean[] postP = present(v);
    for (int from = 0; from < rows.length; from += CHUNK) {
      int cnt = Math.min(CHUNK, rows.length - from);
      int[] chunk = Arrays.copyOfRange(rows, from, from + cnt);
      if (plan.setColumnsOnly) {
        emitSet(st, v, chunk, before, after, track, postP);
      } else {
        emitFull(st, v, chunk, before, after, early, preP, postP);
      }
    }
  }

  private static int[] select(int[] rows, BitSet which) {
    int n = 0;
    int[] out = new int[rows.length];
    for (int r : rows) if (which.get(r)) out[n++] = r;
    return Arrays.copyOf(out, n);
  }

  private void emitFull(ChangeState st, long v, int[] rows, BitSet before, BitSet after, Captured early,
                        boolean[] preP, boolean[] postP) throws CdcSinkFormatException {
    int[] bRows = select(rows, before);
    int[] aRows = select(rows, after);
    // Images before: from the early capture where it holds the row, else read now.
    byte[] preSet = new byte[bRows.length];
    int[] preAt = new int[bRows.length];
    int nl = 0;
    for (int k = 0; k < bRows.length; k++) {
      int e = early == null ? -1 : early.indexOf(bRows[k]);
      if (e >= 0) {
        preSet[k] = 0;
        preAt[k] = e;
      } else {
        preSet[k] = 1;
        bRows[nl++] = bRows[k];
        preAt[k] = nl - 1;
      }
    }
    Captured late = null;
    Captured post = null;
    try {
      late = capture(st, Arrays.copyOf(bRows, nl), preP);
      post = capture(st, aRows, postP, null, early, preP);
      Captured[] sets = {early, late, post};
      // Records in row order: per row a pre-image (delete or update_preimage), then a post-image.
      int[] src = new int[rows.length * 2];
      int[] from = new int[rows.length * 2];
      byte[] codes = new byte[rows.length * 2];
      int nr = 0;
      int bi = 0;
      int ai = 0;
      for (int r : rows) {
        boolean b = before.get(r);
        boolean a = after.get(r);
        if (b && a) {
          if (differ(sets[preSet[bi]], preAt[bi], post, ai)) {
            from[nr] = preSet[bi];
            src[nr] = preAt[bi];
            codes[nr++] = PRE;
            from[nr] = 2;
            src[nr] = ai;
            codes[nr++] = POST;
          }
        } else if (b) {
          from[nr] = preSet[bi];
          src[nr] = preAt[bi];
          codes[nr++] = DELETE;
        } else if (a) {
          from[nr] = 2;
          src[nr] = ai;
          codes[nr++] = INSERT;
        }
        if (b) bi++;
        if (a) ai++;
      }
      if (nr == 0) return;
      FieldVector[] out = new FieldVector[nc];
      // One side's vectors as they are: every record an insert, or every one a delete read now.
      Captured whole = nr == aRows.length && allCodes(codes, nr, INSERT) ? post
          : nr == nl && bRows.length == nl && allCodes(codes, nr, DELETE) ? late : null;
      for (int j = 0; j < nc; j++) {
        if (whole != null) {
          out[j] = whole.vecs[j];
          whole.vecs[j] = newVector(j, 0); // handed out: the Captured frees an empty one
          continue;
        }
        out[j] = schema.getFields().get(j).createVector(allocator);
        FieldVector[] srcs = {early == null ? null : early.vecs[j], late.vecs[j], post.vecs[j]};
        ChangeState.gather(srcs, from, src, nr, out[j]);
      }
      pending.add(root(out, null, codes, nr, v));
    } finally {
      if (late != null) late.close();
      if (post != null) post.close();
    }
  }

  private static boolean allCodes(byte[] codes, int n, byte c) {
    for (int k = 0; k < n; k++) if (codes[k] != c) return false;
    return true;
  }

  /** Whether row bi of {@code a} and row ai of {@code b} differ in an output column (nulls equal). */
  private boolean differ(Captured a, int bi, Captured b, int ai) {
    for (int j = 0; j < nc; j++) if (!same(a.vecs[j], bi, b.vecs[j], ai)) return true;
    return false;
  }

  /** Equality as Arrow's compute {@code equal} (NaN differs from itself, -0.0 equals 0.0), nulls equal. */
  static boolean same(FieldVector x, int i, FieldVector y, int k) {
    boolean nx = x.isNull(i);
    boolean ny = y.isNull(k);
    if (nx || ny) return nx && ny;
    if (x instanceof Float8Vector) return ((Float8Vector) x).get(i) == ((Float8Vector) y).get(k);
    if (x instanceof Float4Vector) return ((Float4Vector) x).get(i) == ((Float4Vector) y).get(k);
    if (x instanceof BitVector) return ((BitVector) x).get(i) == ((BitVector) y).get(k);
    if (x instanceof BaseFixedWidthVector) {
      int w = ((BaseFixedWidthVector) x).getTypeWidth();
      long a = x.getDataBufferAddress() + (long) i * w;
      long b = y.getDataBufferAddress() + (long) k * w;
      if (w == 8) return MemoryUtil.getLong(a) == MemoryUtil.getLong(b);
      if (w == 4) return MemoryUtil.getInt(a) == MemoryUtil.getInt(b);
      if (w == 16) return MemoryUtil.getLong(a) == MemoryUtil.getLong(b) && MemoryUtil.getLong(a + 8) == MemoryUtil.getLong(b + 8);
      for (int q = 0; q < w; q++) if (MemoryUtil.getByte(a + q) != MemoryUtil.getByte(b + q)) return false;
      return true;
    }
    if (x instanceof BaseVariableWidthVector) {
      return Arrays.equals(((BaseVariableWidthVector) x).get(i), ((BaseVariableWidthVector) y).get(k));
    }
    return java.util.Objects.equals(x.getObject(i), y.getObject(k));
  }

  private void emitSet(ChangeState st, long v, int[] rows, BitSet before, BitSet after, ChangeState.Track track,
                       boolean[] postP) throws CdcSinkFormatException {
    // Per row and value column: whether the version wrote the cell (a bulk load: every one).
    int nv = nc - nkeys;
    List<Integer> keep = new ArrayList<>();
    List<boolean[]> masks = new ArrayList<>();
    int seqOut = st.seqOut();
    for (int r : rows) {
      boolean b = before.get(r);
      boolean a = after.get(r);
      boolean[] m = new boolean[nv];
      boolean any = false;
      if (a) {
        boolean full = track == null || track.reset.get(r);
        boolean[] set = track == null ? null : track.setCols.get(r);
        for (int j = nkeys; j < nc; j++) {
          boolean w = postP[j] && (full || (set != null && set[j]) || (j == seqOut && track.wrote.get(r)));
          m[j - nkeys] = w;
          any |= w;
        }
      }
      if (a != b || any) {
        keep.add(r);
        masks.add(m);
      }
    }
    int nr = keep.size();
    if (nr == 0) return;
    int[] kr = keep.stream().mapToInt(Integer::intValue).toArray();
    boolean[][] want = new boolean[nc][];
    for (int j = nkeys; j < nc; j++) {
      want[j] = new boolean[nr];
      for (int k = 0; k < nr; k++) want[j][k] = masks.get(k)[j - nkeys];
    }
    Captured post = capture(st, kr, postP, want);
    try {
      byte[] codes = new byte[nr];
      for (int k = 0; k < nr; k++) {
        boolean a = after.get(kr[k]);
        codes[k] = a ? (before.get(kr[k]) ? POST : INSERT) : DELETE;
      }
      FieldVector[] out = new FieldVector[nc];
      for (int j = 0; j < nc; j++) {
        out[j] = post.vecs[j];
        post.vecs[j] = newVector(j, 0); // handed out: the Captured frees an empty one
      }
      BitVector[] mv = new BitVector[nv];
      for (int j = 0; j < nv; j++) {
        mv[j] = (BitVector) schema.getFields().get(nc + j).createVector(allocator);
        mv[j].allocateNew(nr);
        for (int k = 0; k < nr; k++) mv[j].set(k, masks.get(k)[j] ? 1 : 0);
        mv[j].setValueCount(nr);
      }
      pending.add(root(out, mv, codes, nr, v));
    } finally {
      post.close();
    }
  }

  private VectorSchemaRoot root(FieldVector[] out, BitVector[] masks, byte[] codes, int nr, long v) {
    List<FieldVector> vs = new ArrayList<>(Arrays.asList(out));
    if (masks != null) vs.addAll(Arrays.asList(masks));
    int m = vs.size();
    List<Field> fields = schema.getFields();
    VarCharVector ct = (VarCharVector) fields.get(m).createVector(allocator);
    ct.allocateNew((long) nr * 16, nr);
    BigIntVector cv = (BigIntVector) fields.get(m + 1).createVector(allocator);
    cv.allocateNew(nr);
    TimeStampMicroTZVector ts = (TimeStampMicroTZVector) fields.get(m + 2).createVector(allocator);
    ts.allocateNew(nr);
    long micros = plan.commitMs(v) * 1000;
    for (int k = 0; k < nr; k++) {
      ct.setSafe(k, TYPES[codes[k]]);
      cv.set(k, v);
      ts.set(k, micros);
    }
    ct.setValueCount(nr);
    cv.setValueCount(nr);
    ts.setValueCount(nr);
    vs.add(ct);
    vs.add(cv);
    vs.add(ts);
    for (FieldVector x : out) x.setValueCount(nr);
    return new VectorSchemaRoot(fields, vs, nr);
  }

  @Override
  public void close() {
    for (VectorSchemaRoot r : pending) r.close();
    pending.clear();
    if (main != null) main.close();
    main = null;
    for (Segment s : segments.values()) s.close();
    segments.clear();
    if (sources != null) sources.close();
    if (files != null) files.close();
  }
}
