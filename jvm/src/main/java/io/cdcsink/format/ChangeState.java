package io.cdcsink.format;

import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.util.MemoryUtil;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BaseIntVector;
import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.roaringbitmap.RoaringBitmap;

/**
 * One bucket's state at one version, for the change feed: a snapshot's rows (their pages read on
 * demand, one column's at a time) plus what segments' events did to the keys they
 * name, applied with the rules of docs/format.md §14.4 one event at a time; or (§12) only the
 * rows a version's stored pre-images hold. Only the keys of the segments it will apply are looked
 * up (one pass over the key pages). Cells are written into the caller's vectors of the output
 * columns (of the schema at the range's end), as of a given version's schema: a column that
 * schema lacks reads null.
 */
final class ChangeState implements AutoCloseable {
  /** A row some event (or the stored pre-images) names: its state beyond the snapshot. */
  static final class Row {
    final int id;
    boolean hasSeq;
    long seq;
    /** Re-created (or new): a value not in {@link #refs} is the column's default, not the page's. */
    boolean fresh;
    /** Per output column: the source of its value (a {@link Sources} ref), or -1. */
    final long[] refs;
    /** Per key column: the source of the key (rows beyond the snapshot), or null. */
    long[] keyRefs;

    Row(int id, int nc) {
      this.id = id;
      this.refs = new long[nc];
      java.util.Arrays.fill(refs, -1);
    }
  }

  /** Vectors that rows' values point into: {@code (vector << 32) | index}. */
  static final class Sources implements AutoCloseable {
    private FieldVector[] vectors = new FieldVector[16];
    private int size;

    int add(FieldVector v) {
      if (size == vectors.length) vectors = java.util.Arrays.copyOf(vectors, size * 2);
      vectors[size] = v;
      return size++;
    }

    static long ref(int vec, int idx) {
      return ((long) vec << 32) | (idx & 0xffffffffL);
    }

    FieldVector vector(long ref) {
      return vectors[(int) (ref >>> 32)];
    }

    static int index(long ref) {
      return (int) ref;
    }

    @Override
    public void close() {
      for (int i = 0; i < size; i++) vectors[i].close();
      vectors = new FieldVector[16];
      size = 0;
    }
  }

  /**
   * Fills {@code to} (new, empty) with {@code n} cells: cell k is cell {@code idx[k]} of
   * {@code srcs[which[k]]} (vectors of {@code to}'s type). Fixed- and variable-width vectors are
   * copied by their bytes, their addresses read once; others cell by cell.
   */
  static void gather(FieldVector[] srcs, int[] which, int[] idx, int n, FieldVector to) {
    boolean same = true;
    for (FieldVector f : srcs) same &= f == null || f.getClass() == to.getClass();
    boolean fixed = same && to instanceof BaseFixedWidthVector && !(to instanceof BitVector);
    boolean var = same && to instanceof BaseVariableWidthVector;
    if (!fixed && !var) {
      to.setInitialCapacity(Math.max(n, 1));
      to.allocateNew();
      for (int k = 0; k < n; k++) to.copyFromSafe(idx[k], k, srcs[which[k]]);
      to.setValueCount(n);
      return;
    }
    long[] data = new long[srcs.length];
    long[] valid = new long[srcs.length];
    long[] offs = new long[srcs.length];
    for (int s = 0; s < srcs.length; s++) {
      if (srcs[s] == null) continue;
      data[s] = srcs[s].getDataBufferAddress();
      valid[s] = srcs[s].getValidityBufferAddress();
      if (var) offs[s] = srcs[s].getOffsetBufferAddress();
    }
    if (fixed) {
      int w = ((BaseFixedWidthVector) to).getTypeWidth();
      to.setInitialCapacity(Math.max(n, 1));
      to.allocateNew();
      long td = to.getDataBufferAddress();
      long tv = to.getValidityBufferAddress();
      MemoryUtil.setMemory(tv, (n + 7) / 8, (byte) 0);
      for (int k = 0; k < n; k++) {
        int s = which[k];
        int i = idx[k];
        if ((MemoryUtil.getByte(valid[s] + (i >> 3)) >> (i & 7) & 1) == 0) continue;
        long src = data[s] + (long) i * w;
        long dst = td + (long) k * w;
        switch (w) {
          case 8: MemoryUtil.putLong(dst, MemoryUtil.getLong(src)); break;
          case 4: MemoryUtil.putInt(dst, MemoryUtil.getInt(src)); break;
          case 16:
            MemoryUtil.putLong(dst, MemoryUtil.getLong(src));
            MemoryUtil.putLong(dst + 8, MemoryUtil.getLong(src + 8));
            break;
          default: MemoryUtil.copyMemory(src, dst, w);
        }
        long b = tv + (k >> 3);
        MemoryUtil.putByte(b, (byte) (MemoryUtil.getByte(b) | (1 << (k & 7))));
      }
      to.setValueCount(n);
      return;
    }
    long bytes = 0;
    for (int k = 0; k < n; k++) {
      long o = offs[which[k]] + 4L * idx[k];
      bytes += MemoryUtil.getInt(o + 4) - MemoryUtil.getInt(o);
    }
    BaseVariableWidthVector t = (BaseVariableWidthVector) to;
    t.allocateNew(Math.max(bytes, 1), Math.max(n, 1));
    long td = t.getDataBufferAddress();
    long tv = t.getValidityBufferAddress();
    long to4 = t.getOffsetBufferAddress();
    MemoryUtil.setMemory(tv, (n + 7) / 8, (byte) 0);
    int end = 0;
    MemoryUtil.putInt(to4, 0);
    for (int k = 0; k < n; k++) {
      int s = which[k];
      int i = idx[k];
      if ((MemoryUtil.getByte(valid[s] + (i >> 3)) >> (i & 7) & 1) != 0) {
        long o = offs[s] + 4L * i;
        int st = MemoryUtil.getInt(o);
        int len = MemoryUtil.getInt(o + 4) - st;
        if (len > 0) MemoryUtil.copyMemory(data[s] + st, td + end, len);
        end += len;
        long b = tv + (k >> 3);
        MemoryUtil.putByte(b, (byte) (MemoryUtil.getByte(b) | (1 << (k & 7))));
      }
      MemoryUtil.putInt(to4 + 4L * (k + 1), end);
    }
    t.setLastSet(n - 1);
    t.setValueCount(n);
  }

  /** What applying one version's segment did, per row (for its records). */
  static final class Track {
    /** Rows the version's events named (existing or created), in first-named order. */
    final List<Row> named = new ArrayList<>();
    final BitSet namedIds = new BitSet();
    /** Rows the version created. */
    final BitSet created = new BitSet();
    /** Rows whose values were reset (an insert, or an upsert of a key not live). */
    final BitSet reset = new BitSet();
    /** Rows an applied event touched (any applied event with a sequence column, else one setting a column). */
    final BitSet wrote = new BitSet();
    /** Per row: the output columns an applied event set. */
    final Map<Integer, boolean[]> setCols = new HashMap<>();
    boolean truncated;

    void name(Row r) {
      if (!namedIds.get(r.id)) {
        namedIds.set(r.id);
        named.add(r);
      }
    }
  }

  /** A snapshot column's pages, read on demand, and its default. */
  private final class BaseCol {
    final Column col;
    final List<Manifest.Loc> locs;
    final long coverage;
    final FieldVector dflt;

    BaseCol(Column col, List<Manifest.Loc> locs) {
      this.col = col;
      this.locs = locs;
      long c = 0;
      if (locs != null) for (Manifest.Loc l : locs) c += l.rows;
      this.coverage = c;
      this.dflt = Vectors.defaultVector(col, allocator);
    }

    /** The vector holding base row r's value: its page (read into {@code open} when not there: the caller closes them), or the default. */
    FieldVector vectorOf(int r, Map<Integer, FieldVector> open) throws CdcSinkFormatException {
      if (r < baseRows && r < coverage) {
        int p = r / pageRows;
        FieldVector v = open.get(p);
        if (v == null) {
          v = files.page(locs.get(p), col);
          open.put(p, v);
        }
        return v;
      }
      return dflt;
    }

    int indexOf(int r) {
      return r < baseRows && r < coverage ? r % pageRows : 0;
    }

    void release() {
      dflt.close();
    }
  }

  private final BufferAllocator allocator;
  private final PageFiles files;
  private final Sources sources;
  private final List<Column> cols;
  private final int nkeys;
  private final int nc;
  /** The sequence column's output index, or -1; its column (of the end schema), or null. */
  private final int seqOut;
  private final Column seqCol;
  /** Per output column: its default (a Sources ref). */
  private final long[] defaults;

  private int baseRows;
  private int pageRows = 1;
  private FieldVector[][] keyPages = new FieldVector[0][];
  private BaseCol[] base;
  private BaseCol seqBase;
  int n;
  BitSet live = new BitSet();
  final Map<Object, Row> keyed = new HashMap<>();
  final Map<Integer, Row> byId = new HashMap<>();
  /** The version the state is at. */
  long at;

  ChangeState(BufferAllocator allocator, PageFiles files, Sources sources, List<Column> cols, int nkeys,
              Column seqCol, long[] defaults) {
    this.allocator = allocator;
    this.files = files;
    this.sources = sources;
    this.cols = cols;
    this.nkeys = nkeys;
    this.nc = cols.size();
    this.seqCol = seqCol;
    int so = -1;
    for (int j = nkeys; j < nc; j++) if (seqCol != null && cols.get(j).id() == seqCol.id()) so = j;
    this.seqOut = so;
    this.defaults = defaults;
    this.base = new BaseCol[nc];
  }

  int seqOut() {
    return seqOut;
  }

  /**
   * Loads a snapshot (null: an empty bucket) at version {@code s}, and the rows of the keys that
   * {@code segments}' events name.
   */
  void loadSnapshot(Manifest m, long s, List<Segment> segments) throws CdcSinkFormatException {
    at = s;
    if (m == null) return;
    baseRows = (int) m.rowCount;
    pageRows = m.pageRows;
    n = baseRows;
    live.set(0, baseRows);
    RoaringBitmap dv = files.dv(m);
    for (org.roaringbitmap.IntIterator it = dv.getIntIterator(); it.hasNext(); ) live.clear(it.next());
    keyPages = new FieldVector[nkeys][];
    for (int k = 0; k < nkeys; k++) {
      List<Manifest.Loc> locs = m.keys.get(k);
      keyPages[k] = new FieldVector[locs.size()];
      for (int p = 0; p < locs.size(); p++) keyPages[k][p] = files.page(locs.get(p), cols.get(k));
    }
    for (int j = nkeys; j < nc; j++) base[j] = new BaseCol(cols.get(j), m.columns.get(cols.get(j).id()));
    if (seqCol != null) seqBase = seqOut >= 0 ? base[seqOut] : new BaseCol(seqCol, m.columns.get(seqCol.id()));
    // The rows of the keys the segments name: one pass over the key pages.
    Map<Object, Boolean> wanted = new HashMap<>();
    for (Segment seg : segments) {
      for (Segment.Part part : seg.parts) {
        for (int i = 0; i < part.n; i++) if (part.ops[i] != 4) wanted.put(BucketReader.keyOf(part.keys, i), true);
      }
    }
    List<Row> found = new ArrayList<>();
    // One 64-bit integer key: the pages' values probed in a primitive set first (no boxing).
    LongSet longs = null;
    if (nkeys == 1 && cols.get(0).type().equals("int64")) {
      longs = new LongSet(wanted.size());
      for (Object k : wanted.keySet()) longs.add((Long) k);
    }
    for (int p = 0; p < (nkeys == 0 ? 0 : keyPages[0].length) && !wanted.isEmpty(); p++) {
      List<FieldVector> kv = new ArrayList<>();
      for (int k = 0; k < nkeys; k++) kv.add(keyPages[k][p]);
      int cnt = kv.get(0).getValueCount();
      long addr = longs == null ? 0 : kv.get(0).getDataBufferAddress();
      for (int i = 0; i < cnt; i++) {
        if (longs != null && !longs.contains(MemoryUtil.getLong(addr + 8L * i))) continue;
        Object key = BucketReader.keyOf(kv, i);
        if (wanted.remove(key) == null) continue;
        Row r = new Row(p * pageRows + i, nc);
        keyed.put(key, r);
        byId.put(r.id, r);
        found.add(r);
      }
    }
    if (seqBase != null) { // their sequences, page by page
      found.sort((a, b) -> Integer.compare(a.id, b.id));
      Map<Integer, FieldVector> open = new HashMap<>();
      try {
        int lastPage = -1;
        for (Row r : found) {
          if (r.id / pageRows != lastPage) {
            for (FieldVector x : open.values()) x.close();
            open.clear();
            lastPage = r.id / pageRows;
          }
          FieldVector v = seqBase.vectorOf(r.id, open);
          int i = seqBase.indexOf(r.id);
          r.hasSeq = !v.isNull(i);
          r.seq = r.hasSeq ? ((BaseIntVector) v).getValueAsLong(i) : 0;
        }
      } finally {
        for (FieldVector x : open.values()) x.close();
      }
    }
  }

  /**
   * The rows of stored pre-images (§12) at {@code v - 1}: every live row (its values) and, with a
   * sequence column, every tombstone (its sequence), as fresh rows of an empty bucket.
   */
  void loadImages(List<VectorSchemaRoot> roots, TableSchema schema, String path, long v) throws CdcSinkFormatException {
    at = v - 1;
    for (VectorSchemaRoot root : roots) {
      FieldVector lv = root.getVector("_live");
      if (!(lv instanceof BitVector)) throw new CdcSinkFormatException(path + ": no _live field (corruption)");
      int rows = root.getRowCount();
      long[][] keyRefs = new long[nkeys][];
      List<FieldVector> keyVecs = new ArrayList<>();
      for (int k = 0; k < nkeys; k++) {
        FieldVector kv = field(root, "c" + cols.get(k).id(), cols.get(k), path);
        keyVecs.add(kv);
        keyRefs[k] = new long[] {sources.add(kv)};
      }
      int[] valSrc = new int[nc];
      java.util.Arrays.fill(valSrc, -1);
      for (int j = nkeys; j < nc; j++) {
        Column c = cols.get(j);
        if (j == seqOut || schema.columnById(c.id()) == null) continue;
        valSrc[j] = sources.add(field(root, "c" + c.id(), c, path));
      }
      FieldVector sv = null;
      if (seqCol != null) {
        sv = root.getVector("c" + seqCol.id());
        if (!(sv instanceof BaseIntVector)) throw new CdcSinkFormatException(path + ": no sequence field (corruption)");
      }
      BitVector lb = (BitVector) lv;
      for (int i = 0; i < rows; i++) {
        Row r = new Row(n++, nc);
        r.fresh = true;
        r.keyRefs = new long[nkeys];
        for (int k = 0; k < nkeys; k++) r.keyRefs[k] = Sources.ref((int) keyRefs[k][0], i);
        for (int j = nkeys; j < nc; j++) if (valSrc[j] >= 0) r.refs[j] = Sources.ref(valSrc[j], i);
        if (sv != null && !sv.isNull(i)) {
          r.hasSeq = true;
          r.seq = ((BaseIntVector) sv).getValueAsLong(i);
        }
        if (lb.isNull(i)) throw new CdcSinkFormatException(path + ": _live holds a null (corruption)");
        if (lb.get(i) == 1) live.set(r.id);
        Object key = BucketReader.keyOf(keyVecs, i);
        if (keyed.put(key, r) != null) throw new CdcSinkFormatException(path + ": a key is stored twice (corruption)");
        byId.put(r.id, r);
      }
    }
  }

  private FieldVector field(VectorSchemaRoot root, String name, Column c, String path) throws CdcSinkFormatException {
    FieldVector v = root.getVector(name);
    if (v == null || !Vectors.canCastTo(v.getField().getType(), Types.arrow(c.type()))) {
      throw new CdcSinkFormatException(path + ": field " + name + " is missing or of another type (corruption)");
    }
    // The root keeps its own vector: transfer it out, then cast.
    org.apache.arrow.vector.util.TransferPair tp = v.getTransferPair(allocator);
    tp.transfer();
    return Vectors.cast((FieldVector) tp.getTo(), TableSchema.field(c), allocator, path);
  }

  /** A segment part's vectors cast to the output types, registered once (per part). */
  static final class Prepared {
    int[] keySrc;
    /** Per output column: the source of the part's values, or -1. */
    int[] valSrc;
    boolean[][] valSet;
    /** Per event: whether it sets some value column (any, output or not). */
    boolean[] setsAny;
    List<boolean[]> required = new ArrayList<>();
    boolean requiredMissing;
  }

  static Prepared prepare(Segment seg, Segment.Part part, List<Column> cols, int nkeys, Sources sources,
                          BufferAllocator allocator) throws CdcSinkFormatException {
    Prepared pr = new Prepared();
    TableSchema ss = seg.schema;
    pr.keySrc = new int[nkeys];
    for (int k = 0; k < nkeys; k++) {
      FieldVector kv = part.keys.get(k);
      FieldVector cast = Vectors.cast(kv, TableSchema.field(cols.get(k)), allocator, seg.path);
      part.keys.set(k, cast);
      pr.keySrc[k] = sources.add(cast);
    }
    pr.valSrc = new int[cols.size()];
    pr.valSet = new boolean[cols.size()][];
    java.util.Arrays.fill(pr.valSrc, -1);
    pr.setsAny = new boolean[part.n];
    for (Map.Entry<String, FieldVector> e : part.values.entrySet()) {
      boolean[] set = part.set.get(e.getKey());
      for (int i = 0; i < part.n; i++) pr.setsAny[i] |= set[i];
      Column segCol = ss.column(e.getKey());
      for (int j = nkeys; j < cols.size(); j++) {
        if (cols.get(j).id() != segCol.id()) continue;
        FieldVector v = e.getValue();
        FieldVector cast = Vectors.cast(v, TableSchema.field(cols.get(j)), allocator, seg.path);
        e.setValue(cast);
        pr.valSrc[j] = sources.add(cast);
        pr.valSet[j] = set;
      }
    }
    for (Column c : ss.columns()) {
      if (!ss.isRequired(c)) continue;
      boolean[] s = part.set.get(c.name());
      if (s == null) pr.requiredMissing = true;
      else pr.required.add(s);
    }
    return pr;
  }

  /**
   * Applies one segment's events (§14.4), one at a time, recording in {@code track} (may be null)
   * what they did to each row.
   */
  void apply(Segment seg, List<Prepared> prepared, long version, Track track) {
    for (int pi = 0; pi < seg.parts.size(); pi++) {
      Segment.Part part = seg.parts.get(pi);
      Prepared pr = prepared.get(pi);
      int[] ranks = new int[nc];
      int[] valIdx = new int[nc];
      for (int i = 0; i < part.n; i++) {
        for (int j = nkeys; j < nc; j++) {
          if (pr.valSrc[j] >= 0 && pr.valSet[j][i]) valIdx[j] = part.ranked ? ranks[j]++ : i;
        }
        byte op = part.ops[i];
        if (op == 4) {
          live.clear();
          if (track != null) track.truncated = true;
          continue;
        }
        Object key = BucketReader.keyOf(part.keys, i);
        Row row = keyed.get(key);
        if (row != null && track != null) track.name(row);
        long seq = seqCol != null ? part.seqs[i] : 0;
        if (seqCol != null && row != null && row.hasSeq && seq < row.seq) continue; // stale
        boolean isLive = row != null && live.get(row.id);
        int effect = Segment.effect(op, isLive, pr.requiredMissing, pr.required, i);
        if (effect == Segment.REJECT) continue;
        boolean asInsert = effect == Segment.INSERT;
        if (effect == Segment.DELETE) {
          if (row != null) {
            live.clear(row.id);
          } else if (seqCol != null) {
            row = newRow(key, pr, i, track);
          }
          if (seqCol != null) {
            row.hasSeq = true;
            row.seq = seq;
            if (track != null) track.wrote.set(row.id);
          }
          continue;
        }
        if (asInsert) {
          if (row == null) {
            row = newRow(key, pr, i, track);
          } else {
            java.util.Arrays.fill(row.refs, -1);
          }
          row.fresh = true;
          live.set(row.id);
          if (track != null) {
            track.reset.set(row.id);
            track.wrote.set(row.id);
          }
        }
        boolean[] setCols = null;
        if (track != null && (seqCol != null || pr.setsAny[i])) track.wrote.set(row.id);
        for (int j = nkeys; j < nc; j++) {
          if (pr.valSrc[j] >= 0 && pr.valSet[j][i]) {
            row.refs[j] = Sources.ref(pr.valSrc[j], valIdx[j]);
            if (track != null) {
              if (setCols == null) setCols = track.setCols.computeIfAbsent(row.id, x -> new boolean[nc]);
              setCols[j] = true;
            }
          }
        }
        if (seqCol != null) {
          row.hasSeq = true;
          row.seq = seq;
        }
      }
    }
    at = version;
  }

  private Row newRow(Object key, Prepared pr, int i, Track track) {
    Row row = new Row(n++, nc);
    row.keyRefs = new long[nkeys];
    for (int k = 0; k < nkeys; k++) row.keyRefs[k] = Sources.ref(pr.keySrc[k], i);
    keyed.put(key, row);
    byId.put(row.id, row);
    if (track != null) {
      track.created.set(row.id);
      track.name(row);
    }
    return row;
  }

  /**
   * Fills {@code out} (new vectors of the output columns) with the cells of {@code rows[0..cnt)}
   * (ascending; their {@link Row}s or null in {@code rowObjs}) as of a version whose schema has
   * the output columns where {@code present}; a row not in {@code want[j]} (null: all) reads
   * null. A cell a row still reads from the snapshot is taken from {@code early[j]} (at
   * {@code earlyIdx[k]} when not -1; {@code early} or its entry null: never) instead: the same
   * value, read before (no page read again). Column by column: each cell's source found, then
   * the column gathered at once (the snapshot pages it needs open meanwhile).
   */
  void cells(int[] rows, Row[] rowObjs, int cnt, boolean[] present, boolean[][] want, FieldVector[] out,
             int[] earlyIdx, FieldVector[] early) throws CdcSinkFormatException {
    // Pass 1, row by row (each row's state read once): every cell's source, the snapshot's
    // cells marked (slot -1, index = the row) for pass 2.
    int[][] which = new int[nc][cnt];
    int[][] idx = new int[nc][cnt];
    List<List<FieldVector>> slots = new ArrayList<>();
    List<java.util.IdentityHashMap<FieldVector, Integer>> slotOf = new ArrayList<>();
    List<FieldVector> temp = new ArrayList<>();
    int[] nullSlot = new int[nc];
    java.util.Arrays.fill(nullSlot, -1);
    FieldVector[] lastV = new FieldVector[nc];
    int[] lastS = new int[nc];
    FieldVector lit = null;
    int litSlot = -1;
    try {
      for (int j = 0; j < nc; j++) {
        slots.add(new ArrayList<>());
        slotOf.add(new java.util.IdentityHashMap<>());
      }
      for (int k = 0; k < cnt; k++) {
        int r = rows[k];
        Row row = rowObjs[k];
        for (int j = 0; j < nc; j++) {
          FieldVector v;
          int i;
          if ((j >= nkeys && !present[j]) || (want != null && want[j] != null && !want[j][k])
              || (j == seqOut && row != null && !row.hasSeq)) {
            if (nullSlot[j] < 0) {
              FieldVector nv = out[j].getField().createVector(allocator);
              temp.add(nv);
              nv.setInitialCapacity(1);
              nv.allocateNew();
              nv.setNull(0);
              nv.setValueCount(1);
              nullSlot[j] = slots.get(j).size();
              slots.get(j).add(nv);
            }
            which[j][k] = nullSlot[j];
            continue;
          } else if (j < nkeys) {
            if (row != null && row.keyRefs != null) {
              long ref = row.keyRefs[j];
              v = sources.vector(ref);
              i = Sources.index(ref);
            } else {
              v = keyPages[j][r / pageRows];
              i = r % pageRows;
            }
          } else if (row == null) {
            which[j][k] = -1;
            idx[j][k] = r;
            continue;
          } else if (j == seqOut) {
            if (lit == null) {
              lit = out[j].getField().createVector(allocator);
              temp.add(lit);
              lit.setInitialCapacity(cnt);
              lit.allocateNew();
              lit.setValueCount(cnt);
              litSlot = slots.get(j).size();
              slots.get(j).add(lit);
            }
            ((BaseIntVector) lit).setWithPossibleTruncate(k, row.seq);
            which[j][k] = litSlot;
            idx[j][k] = k;
            continue;
          } else if (row.refs[j] >= 0) {
            long ref = row.refs[j];
            v = sources.vector(ref);
            i = Sources.index(ref);
          } else if (row.fresh) {
            long ref = defaults[j];
            v = sources.vector(ref);
            i = Sources.index(ref);
          } else if (early != null && early[j] != null && earlyIdx[k] >= 0) {
            v = early[j];
            i = earlyIdx[k];
          } else {
            which[j][k] = -1;
            idx[j][k] = r;
            continue;
          }
          if (v != lastV[j]) {
            Integer sl = slotOf.get(j).get(v);
            if (sl == null) {
              sl = slots.get(j).size();
              slots.get(j).add(v);
              slotOf.get(j).put(v, sl);
            }
            lastV[j] = v;
            lastS[j] = sl;
          }
          which[j][k] = lastS[j];
          idx[j][k] = i;
        }
      }
      // Pass 2, column by column: the snapshot's cells from its pages (those of one column open
      // at a time), then the column gathered.
      for (int j = 0; j < nc; j++) {
        Map<Integer, FieldVector> open = new HashMap<>();
        try {
          List<FieldVector> sl = slots.get(j);
          int[] w = which[j];
          int[] ix = idx[j];
          FieldVector last = null;
          int lastSlot = -1;
          for (int k = 0; k < cnt; k++) {
            if (w[k] >= 0) continue;
            int r = ix[k];
            FieldVector v = base[j].vectorOf(r, open);
            if (v != last) {
              Integer s2 = slotOf.get(j).get(v);
              if (s2 == null) {
                s2 = sl.size();
                sl.add(v);
                slotOf.get(j).put(v, s2);
              }
              last = v;
              lastSlot = s2;
            }
            w[k] = lastSlot;
            ix[k] = base[j].indexOf(r);
          }
          gather(sl.toArray(new FieldVector[0]), w, ix, cnt, out[j]);
        } finally {
          for (FieldVector t : open.values()) t.close();
        }
      }
    } finally {
      for (FieldVector t : temp) t.close();
    }
  }

  /** The rows live now, ascending. */
  int[] liveRows() {
    return live.stream().toArray();
  }

  @Override
  public void close() {
    for (BaseCol b : base) if (b != null) b.release();
    if (seqBase != null && seqOut < 0) seqBase.release();
    for (FieldVector[] ps : keyPages) for (FieldVector v : ps) v.close();
    keyPages = new FieldVector[0][];
  }

  /**
   * A set of longs (open addressing, one array: an empty slot holds {@link Long#MIN_VALUE}, which
   * is kept apart), to probe many keys without boxing them.
   */
  static final class LongSet {
    private static final long EMPTY = Long.MIN_VALUE;
    private final long[] keys;
    private final int mask;
    private boolean hasEmpty;

    LongSet(int n) {
      int cap = 4;
      while (cap < 2 * n) cap <<= 1;
      keys = new long[cap];
      java.util.Arrays.fill(keys, EMPTY);
      mask = cap - 1;
    }

    private static int slot(long x) {
      x *= 0x9E3779B97F4A7C15L;
      return (int) (x ^ (x >>> 32));
    }

    void add(long k) {
      if (k == EMPTY) {
        hasEmpty = true;
        return;
      }
      int i = slot(k) & mask;
      while (keys[i] != EMPTY) {
        if (keys[i] == k) return;
        i = (i + 1) & mask;
      }
      keys[i] = k;
    }

    boolean contains(long k) {
      if (k == EMPTY) return hasEmpty;
      int i = slot(k) & mask;
      long x;
      while ((x = keys[i]) != EMPTY) {
        if (x == k) return true;
        i = (i + 1) & mask;
      }
      return false;
    }
  }
}
