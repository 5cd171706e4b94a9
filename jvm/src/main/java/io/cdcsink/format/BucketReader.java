package io.cdcsink.format;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BaseIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.util.Text;
import org.apache.hadoop.conf.Configuration;
import org.roaringbitmap.RoaringBitmap;

/**
 * Reads the live rows of one bucket at the plan's version (merge-on-read §14.2-14.5).
 *
 * <p>{@code columns} may be empty: the batches then have no vectors, only row counts, and no value
 * or key page is read when the bucket has no segment after its snapshot (a count). Null means every
 * column. Without a segment after the snapshot, each batch is one snapshot page's vectors (the
 * deletion vector applied by a filtering copy), read lazily as the iterator advances; otherwise
 * the bucket is merged when {@link #batches()} is called. {@link #close()} frees the batches not
 * handed out yet, so a caller that stops early need not drain the iterator.
 *
 * <p>Given {@link Filter}s (a conjunction), the reader skips the snapshot pages whose statistics
 * prove no row matches (§10.4), except the rows whose keys an event after the snapshot names (an
 * event may turn a row into a match, §14.6), and returns no row at all from a bucket that no key an
 * equality or {@code in} filter on the whole primary key names can be in (§13). It may still return
 * rows that do not match: apply the filters again; it never drops a row that matches.
 */
public final class BucketReader implements AutoCloseable {
  private static final int KEY = 0;
  private static final int VALUE = 1;
  private static final int SEQ = 2;

  private final BucketPlan plan;
  private final Configuration conf;
  private final BufferAllocator allocator;
  private final List<String> columns;
  private final List<Filter> filters;
  private final TableSchema schema;
  private final Map<Integer, TableSchema> schemas = new HashMap<>();
  private final List<AutoCloseable> owned = new ArrayList<>();
  /** The merged batches not handed out yet (closed by close(): a LIMIT need not drain them). */
  private java.util.ArrayDeque<VectorSchemaRoot> pending;
  private Fs fs;
  private PageFiles pages;

  public BucketReader(BucketPlan plan, Configuration conf, BufferAllocator allocator, List<String> columns) {
    this(plan, conf, allocator, columns, null);
  }

  /**
   * A reader that may skip pages and the whole bucket by {@code filters} (a conjunction; null or
   * empty: none). A filter on a column the schema does not have is not used.
   */
  public BucketReader(BucketPlan plan, Configuration conf, BufferAllocator allocator, List<String> columns,
                      List<Filter> filters) {
    this.filters = filters == null ? List.of() : List.copyOf(filters);
    this.plan = plan;
    this.conf = conf;
    this.allocator = allocator;
    this.schema = plan.schema();
    this.columns = columns == null ? names(schema) : List.copyOf(columns);
    for (String c : this.columns) {
      if (schema.column(c) == null) throw new IllegalArgumentException("no column " + c + " in the table's schema");
    }
  }

  private static List<String> names(TableSchema s) {
    List<String> out = new ArrayList<>();
    for (Column c : s.columns()) out.add(c.name());
    return out;
  }

  /**
   * The bucket's live rows as one or more batches; the caller closes each root. Errors while
   * iterating (pages are read lazily) are {@link FormatRuntimeException}s wrapping the format error.
   */
  public Iterator<VectorSchemaRoot> batches() throws CdcSinkFormatException {
    try {
      return build();
    } catch (Fs.MissingFileException e) {
      throw notRetainedOr(e);
    }
  }

  /** §14.7: a file GC removed after the version was resolved means "not retained", not damage. */
  private CdcSinkFormatException notRetainedOr(Fs.MissingFileException e) {
    try {
      long oldest = ReadPlan.LogState.load(fs).oldestReadable;
      if (plan.version() < oldest) {
        return new VersionNotRetainedException(plan.tableUri() + ": version " + plan.version()
            + " is no longer retained (" + e.getMessage() + "): the oldest readable version is " + oldest, oldest);
      }
    } catch (CdcSinkFormatException ignored) {
      // the log cannot tell: report the missing file
    }
    return e;
  }

  /** Whether the filters allow a matching row in this bucket (§13: key lookups). */
  private boolean bucketMayMatch() {
    return filters.isEmpty() || Arrays.binarySearch(Filter.buckets(schema, filters), plan.bucket()) >= 0;
  }

  /** The snapshot pages whose statistics prove no row of them matches the filters. */
  private BitSet skippedPages(Manifest m) {
    BitSet skip = new BitSet();
    if (m == null || filters.isEmpty() || m.rowCount == 0) return skip;
    int pages = (int) ((m.rowCount + m.pageRows - 1) / m.pageRows);
    for (Filter f : filters) {
      Column c = schema.column(f.column());
      if (c == null) continue;
      // A row's key never changes: a key page's statistics (null in older manifests) hold at
      // every version after the snapshot too.
      List<Manifest.Loc> locs = c.isKey() ? m.keys.get(keyPosition(c)) : m.columns.get(c.id());
      if (locs == null) continue;
      for (int p = 0; p < Math.min(pages, locs.size()); p++) {
        Manifest.Loc l = locs.get(p);
        long rows = Math.min(m.pageRows, m.rowCount - (long) p * m.pageRows);
        if (l.rows != rows || l.nullCount < 0 || l.nullCount > l.rows) continue;
        if (!f.mayMatch(l.min, l.max, l.rows, l.nullCount, c.type())) skip.set(p);
      }
    }
    return skip;
  }

  /** The position of key column {@code c} in the primary key (the manifest's {@code keys} order). */
  private int keyPosition(Column c) {
    List<Column> keys = schema.keyColumns();
    for (int k = 0; k < keys.size(); k++) if (keys.get(k).id() == c.id()) return k;
    throw new IllegalStateException("not a key column: " + c.name());
  }

  private Iterator<VectorSchemaRoot> build() throws CdcSinkFormatException {
    fs = new Fs(plan.tableUri(), conf);
    pages = new PageFiles(fs, allocator);
    if (!bucketMayMatch()) return java.util.Collections.emptyIterator();
    Manifest m = null;
    if (plan.snapshotPath() != null) m = Manifest.parse(fs.read(plan.snapshotPath()), plan.snapshotPath());
    List<Column> read = new ArrayList<>();
    for (String c : columns) read.add(schema.column(c));
    boolean fast = m != null && plan.segmentPaths().isEmpty() && pageByPage(m, schema, read);
    if (fast) {
      BitSet skip = skippedPages(m);
      if (plan.pageFrom() >= 0) { // one of a bucket's page ranges (BucketPlan.split)
        skip.set(0, plan.pageFrom());
        skip.set(plan.pageTo(), (int) ((m.rowCount + m.pageRows - 1) / m.pageRows) + 1);
      }
      return new PageIterator(m, dv(m), skip);
    }
    if (plan.pageFrom() >= 0) {
      throw new IllegalStateException(plan + ": a page range of a bucket that is not read page by page");
    }
    return merge(m);
  }

  /** Whether a bucket at snapshot {@code m} (no segment after it) is read page by page: every
   * value column of {@code read} is stored on every page (not a column added since, read as its
   * default, nor one stored for fewer rows). */
  static boolean pageByPage(Manifest m, TableSchema schema, List<Column> read) {
    for (Column col : read) {
      if (col.isKey()) continue;
      List<Manifest.Loc> pages = m.columns.get(col.id());
      if (pages == null || covered(pages) != m.rowCount) return false;
    }
    return true;
  }

  /** The location of page {@code p} of column {@code c} in {@code m}. */
  static Manifest.Loc pageLoc(Manifest m, TableSchema schema, Column c, int p) {
    if (c.isKey()) return m.keys.get(schema.primaryKey().indexOf(c.name())).get(p);
    return m.columns.get(c.id()).get(p);
  }

  private static long covered(List<Manifest.Loc> pages) {
    long r = 0;
    for (Manifest.Loc l : pages) r += l.rows;
    return r;
  }

  private RoaringBitmap dv(Manifest m) throws CdcSinkFormatException {
    return pages.dv(m);
  }

  /** A page as a vector of the column's type in S_v. */
  private FieldVector page(Manifest.Loc l, Column c) throws CdcSinkFormatException {
    return pages.page(l, c);
  }

  /** No segment, every column in full pages: each page handed out, the DV applied. */
  private final class PageIterator implements Iterator<VectorSchemaRoot> {
    private final Manifest m;
    private final RoaringBitmap dv;
    private final BitSet skip;
    private int page;
    private final int pages;

    PageIterator(Manifest m, RoaringBitmap dv, BitSet skip) {
      this.m = m;
      this.dv = dv;
      this.skip = skip;
      this.pages = m.rowCount == 0 ? 0 : (int) ((m.rowCount + m.pageRows - 1) / m.pageRows);
    }

    @Override
    public boolean hasNext() {
      while (page < pages && skip.get(page)) page++;
      return page < pages;
    }

    @Override
    public VectorSchemaRoot next() {
      if (!hasNext()) throw new NoSuchElementException();
      int p = page++;
      long start = (long) p * m.pageRows;
      int rows = (int) Math.min(m.pageRows, m.rowCount - start);
      int dead = dv.isEmpty() ? 0 : (int) dv.rangeCardinality(start, start + rows);
      List<FieldVector> vs = new ArrayList<>();
      List<Field> fields = new ArrayList<>();
      try {
        for (String name : columns) {
          Column c = schema.column(name);
          Manifest.Loc l = pageLoc(m, schema, c, p);
          if (l.rows != rows) throw new CdcSinkFormatException(l.file + ": offset " + l.offset + ": page " + p
              + " of column " + name + " holds " + l.rows + " rows, expected " + rows);
          FieldVector v = page(l, c);
          if (dead > 0) v = filter(v, start, rows, c);
          vs.add(v);
          fields.add(TableSchema.field(c));
        }
      } catch (CdcSinkFormatException e) {
        for (FieldVector v : vs) v.close();
        throw new FormatRuntimeException(e instanceof Fs.MissingFileException
            ? notRetainedOr((Fs.MissingFileException) e) : e);
      }
      // The vectors keep the schema's field (name and nullability).
      List<FieldVector> named = new ArrayList<>();
      for (int i = 0; i < vs.size(); i++) named.add(rename(vs.get(i), fields.get(i)));
      return new VectorSchemaRoot(fields, named, rows - dead);
    }

    private FieldVector filter(FieldVector v, long start, int rows, Column c) {
      FieldVector out = TableSchema.field(c).createVector(allocator);
      out.setInitialCapacity(rows);
      out.allocateNew();
      int o = 0;
      for (int i = 0; i < rows; i++) {
        if (dv.contains((int) (start + i))) continue;
        out.copyFromSafe(i, o++, v);
      }
      out.setValueCount(o);
      v.close();
      return out;
    }
  }

  private FieldVector rename(FieldVector v, Field f) {
    if (v.getField().equals(f)) return v;
    org.apache.arrow.vector.util.TransferPair tp = v.getTransferPair(f, allocator);
    tp.transfer();
    return (FieldVector) tp.getTo();
  }

  /** A CdcSinkFormatException raised inside an iterator. */
  public static final class FormatRuntimeException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    FormatRuntimeException(CdcSinkFormatException cause) {
      super(cause.getMessage(), cause);
    }

    /** The format error. */
    public CdcSinkFormatException format() {
      return (CdcSinkFormatException) getCause();
    }
  }

  // ---------------------------------------------------------------- merge-on-read (§14.3-14.5)

  private final List<FieldVector> sources = new ArrayList<>();

  private int register(FieldVector v) {
    sources.add(v);
    owned.add(v);
    return sources.size() - 1;
  }

  private static long src(int vec, int idx) {
    return ((long) vec << 32) | (idx & 0xffffffffL);
  }

  static Object norm(Object o) {
    if (o instanceof Text) return o.toString();
    if (o instanceof byte[]) return ByteBuffer.wrap((byte[]) o);
    return o;
  }

  /** A row's key as a hashable Java value (one column: the value; several: a list). */
  static Object keyOf(List<FieldVector> vs, int idx) {
    if (vs.size() == 1) return norm(vs.get(0).getObject(idx));
    Object[] k = new Object[vs.size()];
    for (int i = 0; i < k.length; i++) k[i] = norm(vs.get(i).getObject(idx));
    return Arrays.asList(k);
  }

  private TableSchema schemaOf(int id) throws CdcSinkFormatException {
    if (id == schema.schemaId()) return schema;
    TableSchema s = schemas.get(id);
    if (s == null) {
      s = ReadPlan.loadSchema(fs, id);
      schemas.put(id, s);
    }
    return s;
  }

  private Iterator<VectorSchemaRoot> merge(Manifest m) throws CdcSinkFormatException {
    boolean hasSegments = !plan.segmentPaths().isEmpty();
    String seqName = schema.sequenceColumn();
    Column seqCol = seqName == null ? null : schema.column(seqName);
    int pageRows = m == null ? 1 : m.pageRows;
    int baseRows = m == null ? 0 : (int) m.rowCount;

    // Output columns.
    int nc = columns.size();
    int[] kind = new int[nc];
    Column[] cols = new Column[nc];
    int[][] basePages = new int[nc][]; // source ids of the base pages
    long[] coverage = new long[nc];
    int[] defaults = new int[nc];
    Map<Integer, Integer> outByColId = new HashMap<>();
    for (int i = 0; i < nc; i++) {
      Column c = schema.column(columns.get(i));
      cols[i] = c;
      kind[i] = c.isKey() ? KEY : (hasSegments && seqCol != null && c.id() == seqCol.id()) ? SEQ : VALUE;
      if (kind[i] == VALUE) {
        outByColId.put(c.id(), i);
        defaults[i] = register(Vectors.defaultVector(c, allocator));
      }
    }
    // Key pages: needed for key output and to match events to rows.
    boolean needKeys = hasSegments;
    for (int k : kind) needKeys |= k == KEY;
    List<List<FieldVector>> keyPages = new ArrayList<>(); // per page: the key columns
    List<Integer> keyPageSrc = new ArrayList<>(); // per key column: src id of page 0 + page
    int[][] keyPageIds = new int[schema.primaryKey().size()][];
    if (m != null && needKeys) {
      List<Column> kc = schema.keyColumns();
      for (int k = 0; k < kc.size(); k++) {
        List<Manifest.Loc> locs = m.keys.get(k);
        keyPageIds[k] = new int[locs.size()];
        for (int p = 0; p < locs.size(); p++) keyPageIds[k][p] = register(page(locs.get(p), kc.get(k)));
      }
      for (int p = 0; p < (keyPageIds.length == 0 ? 0 : keyPageIds[0].length); p++) {
        List<FieldVector> l = new ArrayList<>();
        for (int[] ids : keyPageIds) l.add(sources.get(ids[p]));
        keyPages.add(l);
      }
    }
    BitSet skip = skippedPages(m);
    BitSet named = new BitSet(); // snapshot rows whose keys an event names
    RoaringBitmap dvm = dv(m);
    int n = baseRows;
    BitSet live = new BitSet();
    live.set(0, baseRows);
    for (org.roaringbitmap.IntIterator it = dvm.getIntIterator(); it.hasNext(); ) live.clear(it.next());
    BitSet fresh = new BitSet();
    long[] seqArr = null;
    BitSet hasSeq = null;
    @SuppressWarnings("unchecked")
    Map<Integer, Long>[] overrides = new Map[nc];
    BitSet[] overBits = new BitSet[nc]; // rows with an override, per output value column
    long[] newKeys = new long[16]; // rows >= baseRows: src(part key source id, idx)
    List<List<FieldVector>> keySources = new ArrayList<>();

    if (hasSegments) {
      // The segments, then the rows of the keys their events name (a map of those keys
      // only: the snapshot's other rows are never looked up).
      List<Segment> segs = new ArrayList<>();
      Map<Object, Integer> rows = new HashMap<>();
      for (int si = 0; si < plan.segmentPaths().size(); si++) {
        String path = plan.segmentPaths().get(si);
        Segment seg = Segment.read(fs.read(path), path, plan.segmentVersion(si), plan.bucket(), this::schemaOf,
            allocator);
        owned.add(seg);
        segs.add(seg);
        for (Segment.Part part : seg.parts) {
          for (int i = 0; i < part.n; i++) if (part.ops[i] != 4) rows.put(keyOf(part.keys, i), -1);
        }
      }
      for (int p = 0; p < keyPages.size() && !rows.isEmpty(); p++) {
        List<FieldVector> kv = keyPages.get(p);
        int cnt = kv.get(0).getValueCount();
        for (int i = 0; i < cnt; i++) {
          Object k = keyOf(kv, i);
          Integer was = rows.get(k);
          if (was == null) continue;
          if (was >= 0) throw new CdcSinkFormatException(plan.snapshotPath() + ": the key pages hold duplicate keys");
          rows.put(k, p * pageRows + i);
        }
      }
      rows.values().removeIf(r -> r < 0);
      for (int r : rows.values()) named.set(r);
      if (seqCol != null) {
        seqArr = new long[Math.max(16, baseRows)];
        hasSeq = new BitSet();
        List<Manifest.Loc> locs = m == null ? null : m.columns.get(seqCol.id());
        long cov = 0;
        if (locs != null) {
          for (int p = 0; p < locs.size(); p++) {
            try (FieldVector v = page(locs.get(p), seqCol)) {
              BaseIntVector iv = (BaseIntVector) v;
              for (int i = 0; i < v.getValueCount(); i++) {
                int r = p * pageRows + i;
                if (!v.isNull(i)) {
                  seqArr[r] = iv.getValueAsLong(i);
                  hasSeq.set(r);
                }
              }
            }
          }
          cov = covered(locs);
        }
        if (seqCol.defaultValue() != null) {
          long d = ((Number) seqCol.defaultValue()).longValue();
          for (long r = cov; r < baseRows; r++) {
            seqArr[(int) r] = d;
            hasSeq.set((int) r);
          }
        }
      }
      for (int i = 0; i < nc; i++) {
        if (kind[i] == VALUE) {
          overrides[i] = new HashMap<>();
          overBits[i] = new BitSet();
        }
      }

      for (Segment seg : segs) {
        String path = seg.path;
        TableSchema ss = seg.schema;
        List<String> required = new ArrayList<>();
        for (Column c : ss.columns()) if (ss.isRequired(c)) required.add(c.name());
        for (Segment.Part part : seg.parts) {
          int keySrc = keySources.size();
          keySources.add(part.keys);
          // The part's value columns that are output: (output index, source id, set bits)
          List<int[]> outs = new ArrayList<>();
          List<boolean[]> outSet = new ArrayList<>();
          for (Map.Entry<String, FieldVector> e : part.values.entrySet()) {
            Column segCol = ss.column(e.getKey());
            Integer oi = outByColId.get(segCol.id());
            if (oi == null) continue;
            FieldVector cast = Vectors.cast(e.getValue(), TableSchema.field(cols[oi]), allocator, path);
            e.setValue(cast);
            outs.add(new int[] {oi, register(cast), 0});
            outSet.add(part.set.get(e.getKey()));
          }
          List<boolean[]> reqSet = new ArrayList<>();
          boolean reqMissing = false;
          for (String rname : required) {
            boolean[] s = part.set.get(rname);
            if (s == null) reqMissing = true;
            else reqSet.add(s);
          }
          int[] valIdx = new int[outs.size()];
          for (int i = 0; i < part.n; i++) {
            for (int j = 0; j < outs.size(); j++) {
              if (outSet.get(j)[i]) {
                int[] o = outs.get(j);
                valIdx[j] = part.ranked ? o[2]++ : i;
              }
            }
            byte op = part.ops[i];
            if (op == 4) {
              live.clear();
              continue;
            }
            Object key = keyOf(part.keys, i);
            Integer row = rows.get(key);
            long seq = seqCol != null ? part.seqs[i] : 0;
            if (seqCol != null && row != null && hasSeq.get(row) && seq < seqArr[row]) continue; // stale
            boolean isLive = row != null && live.get(row);
            int effect = Segment.effect(op, isLive, reqMissing, reqSet, i);
            if (effect == Segment.REJECT) continue;
            boolean asInsert = effect == Segment.INSERT;
            if (effect == Segment.DELETE) {
              if (row != null) {
                live.clear(row);
              } else if (seqCol != null) {
                row = n++;
                newKeys = grow(newKeys, row - baseRows);
                newKeys[row - baseRows] = src(keySrc, i);
                rows.put(key, row);
                fresh.set(row);
              }
              if (seqCol != null && row != null) {
                seqArr = grow(seqArr, row);
                seqArr[row] = seq;
                hasSeq.set(row);
              }
              continue;
            }
            if (asInsert) {
              if (row == null) {
                row = n++;
                newKeys = grow(newKeys, row - baseRows);
                newKeys[row - baseRows] = src(keySrc, i);
                rows.put(key, row);
              } else {
                for (Map<Integer, Long> ov : overrides) if (ov != null) ov.remove(row);
              }
              fresh.set(row);
              live.set(row);
            }
            for (int j = 0; j < outs.size(); j++) {
              if (outSet.get(j)[i]) {
                int[] o = outs.get(j);
                overrides[o[0]].put(row, src(o[1], valIdx[j]));
                overBits[o[0]].set(row);
              }
            }
            if (seqCol != null) {
              seqArr = grow(seqArr, row);
              seqArr[row] = seq;
              hasSeq.set(row);
            }
          }
        }
      }
    }

    // The value pages: a page the filters skip is read only for the rows events name.
    if (m != null) {
      for (int i = 0; i < nc; i++) {
        if (kind[i] != VALUE) continue;
        List<Manifest.Loc> locs = m.columns.get(cols[i].id());
        if (locs == null) continue;
        basePages[i] = new int[locs.size()];
        for (int p = 0; p < locs.size(); p++) {
          int from = p * pageRows;
          boolean need = !skip.get(p) || (named.nextSetBit(from) >= 0 && named.nextSetBit(from) < from + pageRows);
          basePages[i][p] = need ? register(page(locs.get(p), cols[i])) : -1;
        }
        coverage[i] = covered(locs);
      }
    }

    // Output (§14.5): the live rows, in row id order: per snapshot page (its vectors handed
    // out or filtered where no event touched the column there), then the new rows.
    Out o = new Out(nc, kind, cols, keyPageIds, basePages, coverage, defaults, overrides, overBits, fresh, seqArr,
        hasSeq, newKeys, keySources, baseRows, pageRows);
    List<VectorSchemaRoot> out = new ArrayList<>();
    for (int start = 0; start < baseRows; start += pageRows) {
      int rowsIn = Math.min(pageRows, baseRows - start);
      int[] idx = new int[rowsIn];
      int cnt = 0;
      boolean skipped = skip.get(start / pageRows);
      for (int r = live.nextSetBit(start); r >= 0 && r < start + rowsIn; r = live.nextSetBit(r + 1)) {
        if (!skipped || named.get(r)) idx[cnt++] = r - start;
      }
      if (cnt == 0) continue;
      List<FieldVector> vs = new ArrayList<>();
      List<Field> fields = new ArrayList<>();
      for (int i = 0; i < nc; i++) {
        fields.add(TableSchema.field(cols[i]));
        vs.add(o.basePage(i, start / pageRows, start, rowsIn, idx, cnt));
      }
      out.add(new VectorSchemaRoot(fields, vs, cnt));
    }
    int[] newRows = live.stream().filter(r -> r >= baseRows).toArray();
    int batchRows = m == null ? 65536 : Math.max(1, m.pageRows);
    for (int from = 0; from < newRows.length; from += batchRows) {
      int cnt = Math.min(batchRows, newRows.length - from);
      List<FieldVector> vs = new ArrayList<>();
      List<Field> fields = new ArrayList<>();
      for (int i = 0; i < nc; i++) {
        Field f = TableSchema.field(cols[i]);
        FieldVector v = f.createVector(allocator);
        v.setInitialCapacity(cnt);
        v.allocateNew();
        for (int k = 0; k < cnt; k++) o.cell(i, newRows[from + k], k, v);
        v.setValueCount(cnt);
        fields.add(f);
        vs.add(v);
      }
      out.add(new VectorSchemaRoot(fields, vs, cnt));
    }
    closeOwned();
    pending = new java.util.ArrayDeque<>(out);
    return new Iterator<VectorSchemaRoot>() {
      @Override
      public boolean hasNext() {
        return !pending.isEmpty();
      }

      @Override
      public VectorSchemaRoot next() {
        if (pending.isEmpty()) throw new NoSuchElementException();
        return pending.poll();
      }
    };
  }

  /** The merged state of the output columns, and how one cell or one page of them is built. */
  private final class Out {
    final int nc;
    final int[] kind;
    final Column[] cols;
    final int[][] keyPageIds;
    final int[][] basePages;
    final long[] coverage;
    final int[] defaults;
    final Map<Integer, Long>[] overrides;
    final BitSet[] overBits;
    final BitSet fresh;
    final long[] seqArr;
    final BitSet hasSeq;
    final long[] newKeys;
    final List<List<FieldVector>> keySources;
    final int baseRows;
    final int pageRows;

    Out(int nc, int[] kind, Column[] cols, int[][] keyPageIds, int[][] basePages, long[] coverage, int[] defaults,
        Map<Integer, Long>[] overrides, BitSet[] overBits, BitSet fresh, long[] seqArr, BitSet hasSeq,
        long[] newKeys, List<List<FieldVector>> keySources, int baseRows, int pageRows) {
      this.nc = nc;
      this.kind = kind;
      this.cols = cols;
      this.keyPageIds = keyPageIds;
      this.basePages = basePages;
      this.coverage = coverage;
      this.defaults = defaults;
      this.overrides = overrides;
      this.overBits = overBits;
      this.fresh = fresh;
      this.seqArr = seqArr;
      this.hasSeq = hasSeq;
      this.newKeys = newKeys;
      this.keySources = keySources;
      this.baseRows = baseRows;
      this.pageRows = pageRows;
    }

    int keyIndex(int i) {
      return schema.primaryKey().indexOf(cols[i].name());
    }

    /** Row r's value of output column i, written at index o of v. */
    void cell(int i, int r, int o, FieldVector v) {
      if (kind[i] == KEY) {
        if (r < baseRows) {
          v.copyFromSafe(r % pageRows, o, sources.get(keyPageIds[keyIndex(i)][r / pageRows]));
        } else {
          long s = newKeys[r - baseRows];
          v.copyFromSafe((int) s, o, keySources.get((int) (s >>> 32)).get(keyIndex(i)));
        }
      } else if (kind[i] == SEQ) {
        if (hasSeq.get(r)) ((BaseIntVector) v).setWithPossibleTruncate(o, seqArr[r]);
        else v.setNull(o);
      } else {
        Long s = overrides[i] == null ? null : overrides[i].get(r);
        if (s != null) {
          v.copyFromSafe((int) (long) s, o, sources.get((int) (s >>> 32)));
        } else if (!fresh.get(r) && r < coverage[i]) {
          v.copyFromSafe(r % pageRows, o, sources.get(basePages[i][r / pageRows]));
        } else {
          v.copyFromSafe(0, o, sources.get(defaults[i]));
        }
      }
    }

    /** Column i over the live rows idx[0..cnt) of snapshot page p (rows start .. start+rows). */
    FieldVector basePage(int i, int p, int start, int rows, int[] idx, int cnt) {
      int end = start + rows;
      FieldVector page = null;
      boolean touched = true;
      if (kind[i] == KEY) {
        page = sources.get(keyPageIds[keyIndex(i)][p]);
        touched = false;
      } else if (kind[i] == VALUE && coverage[i] >= end) {
        page = sources.get(basePages[i][p]);
        int f = fresh.nextSetBit(start);
        int b = overBits[i] == null ? -1 : overBits[i].nextSetBit(start);
        touched = (f >= 0 && f < end) || (b >= 0 && b < end);
      }
      Field field = TableSchema.field(cols[i]);
      if (page != null && (!touched || page instanceof org.apache.arrow.vector.BaseFixedWidthVector)) {
        FieldVector v;
        if (cnt == rows) {
          org.apache.arrow.vector.util.TransferPair tp = page.getTransferPair(field, allocator);
          tp.transfer();
          v = (FieldVector) tp.getTo();
        } else {
          v = field.createVector(allocator);
          v.setInitialCapacity(cnt);
          v.allocateNew();
          for (int k = 0; k < cnt; k++) v.copyFromSafe(idx[k], k, page);
          v.setValueCount(cnt);
        }
        if (touched) { // fixed width: patch the cells events changed
          for (int k = 0; k < cnt; k++) {
            int r = start + idx[k];
            if (fresh.get(r) || overBits[i].get(r)) cell(i, r, k, v);
          }
        }
        return v;
      }
      FieldVector v = field.createVector(allocator);
      v.setInitialCapacity(cnt);
      v.allocateNew();
      for (int k = 0; k < cnt; k++) cell(i, start + idx[k], k, v);
      v.setValueCount(cnt);
      return v;
    }
  }

  private static long[] grow(long[] a, int idx) {
    if (idx < a.length) return a;
    return Arrays.copyOf(a, Math.max(idx + 1, a.length * 2));
  }

  private void closeOwned() {
    for (int i = owned.size() - 1; i >= 0; i--) {
      try {
        owned.get(i).close();
      } catch (Exception ignored) {
        // memory only
      }
    }
    owned.clear();
    sources.clear();
  }

  @Override
  public void close() {
    if (pending != null) {
      for (VectorSchemaRoot r : pending) r.close();
      pending.clear();
    }
    closeOwned();
    if (pages != null) pages.close();
  }
}
