package io.cdcsink.format;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.hadoop.conf.Configuration;

/** A resolved read of one table version: everything an executor needs, serializable. */
public final class ReadPlan implements java.io.Serializable {
  private static final long serialVersionUID = 1L;
  /** The highest reader protocol version this implementation reads (§2). */
  public static final int READER_VERSION = 2;

  private final String tableUri;
  private final long version;
  private final long commitTimeMs;
  private final TableSchema schema;
  private final BucketPlan[] buckets;
  private final List<VersionInfo> history;
  private final long oldestReadable;
  private final long latest;

  private ReadPlan(String tableUri, long version, long commitTimeMs, TableSchema schema, BucketPlan[] buckets,
                   List<VersionInfo> history, long oldestReadable, long latest) {
    this.tableUri = tableUri;
    this.version = version;
    this.commitTimeMs = commitTimeMs;
    this.schema = schema;
    this.buckets = buckets;
    this.history = history;
    this.oldestReadable = oldestReadable;
    this.latest = latest;
  }

  public String tableUri() { return tableUri; }
  public long version() { return version; }
  public long commitTimeMs() { return commitTimeMs; }
  /** S_v. */
  public TableSchema schema() { return schema; }
  public int numBuckets() { return buckets.length; }
  public BucketPlan bucket(int b) { return buckets[b]; }
  /**
   * Retained versions, oldest first. Its size needs no read; the entries below the last-checkpoint
   * pointer (§8.8) are read, all at once, when one of them is first asked for (a damaged one then
   * raises an {@link java.io.UncheckedIOException} wrapping the {@link CdcSinkFormatException}).
   */
  public List<VersionInfo> history() { return history; }
  /** The oldest readable version when resolved (§8.5). */
  public long oldestReadable() { return oldestReadable; }
  /** The newest committed version when resolved (§8.4). */
  public long latest() { return latest; }

  /** Resolves per docs/format.md §14.1: versionAsOf / timestampAsOfMs may be null (latest). */
  public static ReadPlan resolve(String tableUri, Configuration conf, Long versionAsOf, Long timestampAsOfMs)
      throws CdcSinkFormatException {
    Fs fs = new Fs(tableUri, conf);
    checkProtocol(fs);
    LogState log = LogState.load(fs);
    long v;
    if (versionAsOf != null) {
      v = versionAsOf;
    } else if (timestampAsOfMs != null) {
      // Commit times are non-decreasing (§14.1): a binary search reads few entries below the pointer.
      long lo = log.oldestReadable;
      long hi = log.latest;
      v = -1;
      while (lo <= hi) {
        long mid = lo + (hi - lo) / 2;
        if (log.entry(mid).commitTimeMs <= timestampAsOfMs) {
          v = mid;
          lo = mid + 1;
        } else {
          hi = mid - 1;
        }
      }
      if (v < 0) {
        throw new VersionNotRetainedException(fs.root + ": no retained version was committed at or before "
            + timestampAsOfMs + " ms: the oldest readable version is " + log.oldestReadable + ", committed at "
            + log.entry(log.oldestReadable).commitTimeMs + " ms", log.oldestReadable);
      }
    } else {
      v = log.latest;
    }
    if (v < log.oldestReadable || v > log.latest) {
      throw new VersionNotRetainedException(fs.root + ": version " + v + " is not retained: the oldest readable"
          + " version is " + log.oldestReadable + " and the latest " + log.latest, log.oldestReadable);
    }
    LogEntry ev = log.entry(v);
    TableSchema sv = loadSchema(fs, ev.schemaId);
    BucketPlan[] plans = new BucketPlan[sv.numBuckets()];
    for (int b = 0; b < plans.length; b++) {
      String snap = null;
      long s = -1;
      TreeMap<Long, String> snaps = log.snapshots.getOrDefault(b, new TreeMap<>());
      Map.Entry<Long, String> e = snaps.floorEntry(v);
      if (e != null) {
        s = e.getKey();
        snap = e.getValue();
      }
      List<String> paths = new ArrayList<>();
      List<Long> vs = new ArrayList<>();
      for (Map.Entry<Long, String> seg : log.segments.getOrDefault(b, new TreeMap<>()).subMap(s, false, v, true)
          .entrySet()) {
        vs.add(seg.getKey());
        paths.add(seg.getValue());
      }
      long[] va = new long[vs.size()];
      for (int i = 0; i < va.length; i++) va[i] = vs.get(i);
      plans[b] = new BucketPlan(fs.root, b, v, sv, snap, paths, va, log.oldestReadable);
    }
    List<VersionInfo> hist = new LazyHistory(log);
    return new ReadPlan(fs.root, v, ev.commitTimeMs, sv, plans, hist,
        log.oldestReadable, log.latest);
  }

  static TableSchema loadSchema(Fs fs, int schemaId) throws CdcSinkFormatException {
    String p = String.format("_schema/%08d.json", schemaId);
    TableSchema s = TableSchema.parse(fs.read(p), p);
    if (s.schemaId() != schemaId) throw new CdcSinkFormatException(p + ": holds schema id " + s.schemaId());
    return s;
  }

  /** §2: refuse a table of a newer reader version before opening anything else. */
  static void checkProtocol(Fs fs) throws CdcSinkFormatException {
    byte[] d = fs.readOrNull("_table.json");
    if (d == null) throw new CdcSinkFormatException(fs.root + ": not a cdc_sink table (no _table.json)");
    JsonNode o = Json.parse(d, "_table.json");
    for (String key : new String[] {"reader_version", "writer_version"}) {
      JsonNode n = o.get(key);
      if (n != null && (!n.isIntegralNumber() || !n.canConvertToLong() || n.longValue() < 1)) {
        throw new CdcSinkFormatException("_table.json: " + key + " is not a positive integer (damaged table)");
      }
    }
    long rv = o.has("reader_version") ? o.get("reader_version").longValue() : 1;
    if (rv > READER_VERSION) {
      throw new CdcSinkFormatException(fs.root + ": the table needs reader version " + rv
          + "; this reader implements reader version " + READER_VERSION + " (unsupported table version)");
    }
  }

  /** The log: latest, oldest readable, the retained entries, the history (§8.4-8.7). */
  static final class LogState {
    /** The pointer's file (§8.8). */
    static final String POINTER = "_log/_last_checkpoint";
    final Fs fs;
    long latest;
    /** The version of the last-checkpoint pointer the history started from, or -1 (listed log). */
    long pointer = -1;
    long oldestReadable;
    final Map<Long, LogEntry> entries = new HashMap<>();
    final Map<Integer, TreeMap<Long, String>> snapshots = new HashMap<>();
    final Map<Integer, TreeMap<Long, String>> segments = new HashMap<>();

    LogState(Fs fs) {
      this.fs = fs;
    }

    /** The entry of retained version u, read when not read yet (below the pointer). */
    synchronized LogEntry entry(long u) throws CdcSinkFormatException {
      LogEntry e = entries.get(u);
      if (e == null) {
        e = readEntry(fs, u);
        entries.put(u, e);
      }
      return e;
    }

    /**
     * Loads the log (§8.4-§8.7). The listing names every entry (Hadoop's FileSystem has no
     * start-after); with a usable last-checkpoint pointer (§8.8) only the entries above its
     * version are read, else every entry from the newest valid checkpoint (or 0).
     */
    static LogState load(Fs fs) throws CdcSinkFormatException {
      TreeSet<Long> listed = new TreeSet<>();
      TreeSet<Long> checkpoints = new TreeSet<>();
      for (String name : fs.list("_log")) {
        if (Json.ENTRY.matcher(name).matches()) listed.add(Long.parseLong(name.substring(0, 20)));
        else if (Json.CHECKPOINT.matcher(name).matches()) checkpoints.add(Long.parseLong(name.substring(12, 32)));
      }
      if (listed.isEmpty()) throw new CdcSinkFormatException(fs.root + ": the table has no committed version");
      LogState st = new LogState(fs);
      long n = listed.last();
      String np = LogEntry.name(n);
      byte[] d = fs.read(np);
      Framing.Result r = Framing.read(d, np, Framing.LOG, true);
      if (r.records.isEmpty() && r.tornTail && unfinished(d)) {
        if (n == 0) throw new CdcSinkFormatException(fs.root + ": the table has no committed version");
        if (!listed.contains(n - 1)) throw new CdcSinkFormatException(LogEntry.name(n - 1) + ": missing file (log damaged)");
        st.latest = n - 1;
      } else if (r.records.size() == 1 && !r.tornTail) {
        st.latest = n;
        Framing.Record rec = r.records.get(0);
        st.entries.put(n, LogEntry.parse(d, rec.payloadOffset, rec.length, np, n));
      } else {
        throw new CdcSinkFormatException(np + ": offset " + r.goodEnd + ": log entry is damaged (corruption)");
      }
      long first = st.latest;
      while (first > 0 && listed.contains(first - 1)) first--;
      long newestCkp = checkpoints.isEmpty() ? -1 : checkpoints.floor(st.latest) == null ? -1 : checkpoints.floor(st.latest);
      st.oldestReadable = Math.max(first, newestCkp);
      if (st.loadPointer(listed, checkpoints)) return st;
      // The newest valid checkpoint (bad framing, CRC or JSON: skipped).
      long start = 0;
      for (Long c : checkpoints.descendingSet()) {
        if (c > st.latest) continue;
        if (st.loadCheckpoint(fs, c)) {
          start = c;
          break;
        }
      }
      if (start < first) {
        throw new CdcSinkFormatException(fs.root + ": the log is damaged: entries " + start + " .. " + (first - 1)
            + " are missing and no valid checkpoint replaces them");
      }
      st.readEntries(fs, start, st.latest);
      st.addEntries(start == 0 ? 0 : start + 1);
      return st;
    }

    /** Adds the segments and snapshots of the read entries from..latest to the history. */
    private void addEntries(long from) {
      for (long u = from; u <= latest; u++) {
        LogEntry e = entries.get(u);
        for (Map.Entry<Integer, String> s : e.segments.entrySet()) {
          segments.computeIfAbsent(s.getKey(), k -> new TreeMap<>()).put(u, s.getValue());
        }
        for (Map.Entry<Integer, String> s : e.snapshots.entrySet()) {
          snapshots.computeIfAbsent(s.getKey(), k -> new TreeMap<>()).put(Json.versionOf(s.getValue()), s.getValue());
        }
      }
    }

    /**
     * §8.8: starts the history from the last-checkpoint pointer and reads only the entries
     * above its version c. False (the caller reads the log from the newest checkpoint) when the
     * pointer is missing, its framing, CRC or JSON is bad, its entry is not of c, a checkpoint
     * above c was listed (GC passed it), the listed entries above c are not exactly c+1..n, or
     * c is above the latest committed version. An intact pointer naming a path of the wrong
     * kind is corruption.
     */
    boolean loadPointer(TreeSet<Long> listed, TreeSet<Long> checkpoints) throws CdcSinkFormatException {
      byte[] d = fs.readOrNull(POINTER);
      if (d == null) return false;
      JsonNode ckpt;
      JsonNode entryNode;
      long c;
      try {
        List<Framing.Record> recs = Framing.readExactly(d, POINTER, Framing.POINTER, 1);
        JsonNode o = Json.parse(d, recs.get(0).payloadOffset, recs.get(0).length, POINTER);
        ckpt = o.get("checkpoint");
        entryNode = o.get("entry");
        if (ckpt == null || !ckpt.isObject() || entryNode == null || !entryNode.isObject()) return false;
        c = Json.integer(ckpt, "version", POINTER);
        if (Json.integer(entryNode, "version", POINTER) != c) return false;
      } catch (CdcSinkFormatException e) {
        return false;
      }
      if (c < 0 || c > latest) return false;
      if (!checkpoints.isEmpty() && checkpoints.last() > c) return false;
      java.util.NavigableSet<Long> tail = listed.tailSet(c, false);
      if (!tail.isEmpty() && (tail.first() != c + 1 || tail.last() - c != tail.size())) return false;
      byte[] eb;
      try {
        eb = Json.MAPPER.writeValueAsBytes(entryNode);
      } catch (java.io.IOException e) {
        return false;
      }
      LogEntry ce = LogEntry.parse(eb, 0, eb.length, POINTER, c);
      addCheckpoint(ckpt, POINTER);
      entries.put(c, ce);
      readEntries(fs, c + 1, latest);
      addEntries(c + 1);
      pointer = c;
      return true;
    }
    /** Reads entries lo..hi not read yet, several at a time (an object store's latency). */
    void readEntries(Fs fs, long lo, long hi) throws CdcSinkFormatException {
      List<Long> todo = new ArrayList<>();
      for (long u = lo; u <= hi; u++) if (!entries.containsKey(u)) todo.add(u);
      if (todo.size() <= 2) {
        for (long u : todo) entries.put(u, readEntry(fs, u));
        return;
      }
      java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(
          Math.min(16, todo.size()), r -> {
            Thread t = new Thread(r, "cdc_sink-log-reader");
            t.setDaemon(true);
            return t;
          });
      try {
        List<java.util.concurrent.Future<LogEntry>> fs2 = new ArrayList<>();
        for (long u : todo) fs2.add(pool.submit(() -> readEntry(fs, u)));
        for (int i = 0; i < todo.size(); i++) {
          try {
            entries.put(todo.get(i), fs2.get(i).get());
          } catch (java.util.concurrent.ExecutionException e) {
            if (e.getCause() instanceof CdcSinkFormatException) throw (CdcSinkFormatException) e.getCause();
            throw new CdcSinkFormatException(LogEntry.name(todo.get(i)) + ": " + e.getCause(), e.getCause());
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CdcSinkFormatException("interrupted while reading the log", e);
          }
        }
      } finally {
        pool.shutdownNow();
      }
    }

    static LogEntry readEntry(Fs fs, long u) throws CdcSinkFormatException {
      String p = LogEntry.name(u);
      byte[] b = fs.read(p);
      Framing.Record rec = Framing.readExactly(b, p, Framing.LOG, 1).get(0);
      return LogEntry.parse(b, rec.payloadOffset, rec.length, p, u);
    }

    /**
     * §8.4: an unfinished entry holds no complete record: shorter than 16 bytes, all zero, or
     * ending before the end of its first record's payload (a complete record failing its CRC is
     * corruption, not an unfinished entry).
     */
    static boolean unfinished(byte[] d) {
      if (d.length < 16) return true;
      boolean zero = true;
      for (byte b : d) zero &= b == 0;
      if (zero) return true;
      long len = Framing.u32(d, 8) & 0xffffffffL;
      return 16 + len > d.length;
    }

    /** Loads checkpoint c into the history; false when its framing, CRC or JSON is bad. */
    boolean loadCheckpoint(Fs fs, long c) throws CdcSinkFormatException {
      String p = String.format("_log/_checkpoint.%020d.json", c);
      byte[] d = fs.readOrNull(p);
      if (d == null) return false;
      JsonNode o;
      try {
        List<Framing.Record> recs = Framing.readExactly(d, p, Framing.CHECKPOINT, 1);
        o = Json.parse(d, recs.get(0).payloadOffset, recs.get(0).length, p);
        if (Json.integer(o, "version", p) != c) return false;
      } catch (CdcSinkFormatException e) {
        return false;
      }
      addCheckpoint(o, p);
      return true;
    }

    /**
     * Starts the history with a checkpoint's snapshots and segments: a pointer's
     * {@code extra.snapshots} (every snapshot of the history, §8.8) replaces
     * {@code bucket_snapshots}.
     */
    void addCheckpoint(JsonNode o, String p) throws CdcSinkFormatException {
      JsonNode extra = o.get("extra");
      JsonNode whole = extra == null ? null : extra.get("snapshots");
      if (whole != null && whole.isObject()) {
        addPairs(whole, snapshots, Json.SNAPSHOT, "snapshot", p);
      } else {
        JsonNode bs = o.get("bucket_snapshots");
        if (bs != null && bs.isObject()) {
          Iterator<Map.Entry<String, JsonNode>> it = bs.fields();
          while (it.hasNext()) {
            Map.Entry<String, JsonNode> b = it.next();
            if (b.getValue().isNull()) continue;
            String path = Json.path(b.getValue(), Json.SNAPSHOT, "snapshot", p);
            snapshots.computeIfAbsent(bucketId(b.getKey(), p), k -> new TreeMap<>()).put(Json.versionOf(path), path);
          }
        }
      }
      JsonNode segs = extra == null ? null : extra.get("segments");
      if (segs != null && segs.isObject()) addPairs(segs, segments, Json.SEGMENT, "segment", p);
    }

    /** Per bucket, {@code [[version, path], ...]} into a history map, every path checked. */
    private static void addPairs(JsonNode perBucket, Map<Integer, TreeMap<Long, String>> into,
                                 java.util.regex.Pattern kind, String kindName, String p)
        throws CdcSinkFormatException {
      Iterator<Map.Entry<String, JsonNode>> it = perBucket.fields();
      while (it.hasNext()) {
        Map.Entry<String, JsonNode> b = it.next();
        int bucket = bucketId(b.getKey(), p);
        if (!b.getValue().isArray()) throw new CdcSinkFormatException(p + ": malformed " + kindName + " list");
        for (JsonNode pair : b.getValue()) {
          if (!pair.isArray() || pair.size() != 2 || !pair.get(0).isIntegralNumber()) {
            throw new CdcSinkFormatException(p + ": malformed " + kindName + " list of bucket " + bucket);
          }
          long u = pair.get(0).longValue();
          String path = Json.path(pair.get(1), kind, kindName, p);
          into.computeIfAbsent(bucket, k -> new TreeMap<>()).put(u, path);
        }
      }
    }

    private static int bucketId(String key, String p) throws CdcSinkFormatException {
      return Json.idKey(key, "bucket", p);
    }
  }

  /**
   * The retained versions, oldest first: the size is known from the listing, and the entries
   * below the last-checkpoint pointer (not read to resolve) are read, all at once, when one of
   * them is first asked for. Serialized as a plain list.
   */
  static final class LazyHistory extends java.util.AbstractList<VersionInfo> implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    private final transient LogState log;

    LazyHistory(LogState log) {
      this.log = log;
    }

    @Override
    public int size() {
      return (int) (log.latest - log.oldestReadable + 1);
    }

    @Override
    public VersionInfo get(int i) {
      if (i < 0 || i >= size()) throw new IndexOutOfBoundsException(i);
      long u = log.oldestReadable + i;
      LogEntry x;
      try {
        synchronized (log) {
          if (!log.entries.containsKey(u)) log.readEntries(log.fs, log.oldestReadable, log.latest);
          x = log.entries.get(u);
        }
      } catch (CdcSinkFormatException e) {
        throw new java.io.UncheckedIOException(e);
      }
      return new VersionInfo(u, x.commitTimeMs, x.kind, x.appId, x.batchId);
    }

    private Object writeReplace() {
      return Collections.unmodifiableList(new ArrayList<>(this));
    }
  }
}
