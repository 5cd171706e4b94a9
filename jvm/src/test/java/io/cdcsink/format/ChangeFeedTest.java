package io.cdcsink.format;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;

/** The change feed's plan and reader on the format-1 WAL fixture (tests/storage/data/wal_v1), and its cell copies. */
class ChangeFeedTest {
  private static final String TABLE = Paths.get("..", "tests", "storage", "data", "wal_v1").toAbsolutePath().toString();
  private static final Configuration CONF = new Configuration();

  /** Records per version of every bucket of a plan's buckets (read from {@code plans}). */
  private static Map<Long, Integer> perVersion(List<ChangeBucketPlan> plans) throws Exception {
    Map<Long, Integer> out = new TreeMap<>();
    try (BufferAllocator a = new RootAllocator()) {
      for (ChangeBucketPlan p : plans) {
        try (ChangeReader r = new ChangeReader(p, CONF, a)) {
          Iterator<VectorSchemaRoot> it = r.batches();
          while (it.hasNext()) {
            try (VectorSchemaRoot root = it.next()) {
              BigIntVector v = (BigIntVector) root.getVector("_commit_version");
              for (int i = 0; i < root.getRowCount(); i++) out.merge(v.get(i), 1, Integer::sum);
            }
          }
        }
      }
    }
    return out;
  }

  private static List<ChangeBucketPlan> buckets(ChangePlan p) {
    List<ChangeBucketPlan> out = new ArrayList<>();
    for (int b = 0; b < p.numBuckets(); b++) out.add(p.bucket(b));
    return out;
  }

  @Test
  void aRangeHoldsTheRecordsOfItsVersions() throws Exception {
    long latest = ChangePlan.latestVersion(TABLE, CONF);
    assertEquals(4, latest);
    Map<Long, Integer> whole = perVersion(buckets(ChangePlan.resolve(TABLE, CONF, 0, latest, null, false)));
    Map<Long, Integer> single = new TreeMap<>();
    for (long v = 1; v <= latest; v++) {
      single.putAll(perVersion(buckets(ChangePlan.resolve(TABLE, CONF, v - 1, v, null, false))));
    }
    assertFalse(whole.isEmpty());
    assertEquals(single, whole);
  }

  @Test
  void aRangeGcCollectsWhileReadingIsNotRetainedAndAMissingFileOfARetainedOneIsDamage(
      @org.junit.jupiter.api.io.TempDir Path tmp) throws Exception {
    Path copy = tmp.resolve("t");
    copyTree(Paths.get(TABLE), copy);
    ChangePlan p = ChangePlan.resolve(copy.toString(), CONF, 0, 4, null, false);
    Path wal = copy.resolve("_wal").resolve("0");
    Path victim;
    try (java.util.stream.Stream<Path> files = java.nio.file.Files.list(wal)) {
      victim = files.sorted().findFirst().orElseThrow();
    }
    java.nio.file.Files.delete(victim); // a retained version's file gone: damage, naming it
    BucketReader.FormatRuntimeException damage = assertThrows(BucketReader.FormatRuntimeException.class,
        () -> perVersion(List.of(p.bucket(0))));
    assertFalse(damage.format() instanceof VersionNotRetainedException);
    assertTrue(damage.getMessage().contains(copy.relativize(victim).toString()), damage.getMessage());
    // GC's checkpoint at 3 moves the oldest readable version past the range's start.
    java.nio.file.Files.write(copy.resolve("_log").resolve(String.format("_checkpoint.%020d.json", 3)), new byte[0]);
    BucketReader.FormatRuntimeException gone = assertThrows(BucketReader.FormatRuntimeException.class,
        () -> perVersion(List.of(p.bucket(0))));
    assertTrue(gone.format() instanceof VersionNotRetainedException, gone.getMessage());
    assertTrue(gone.getMessage().contains("the oldest readable version is 3"), gone.getMessage());
    assertEquals(3, ((VersionNotRetainedException) gone.format()).oldestReadable());
  }

  private static void copyTree(Path from, Path to) throws java.io.IOException {
    try (java.util.stream.Stream<Path> all = java.nio.file.Files.walk(from)) {
      for (Path x : (Iterable<Path>) all::iterator) {
        Path t = to.resolve(from.relativize(x).toString());
        if (java.nio.file.Files.isDirectory(x)) java.nio.file.Files.createDirectories(t);
        else java.nio.file.Files.copy(x, t);
      }
    }
  }

  @Test
  void aSerializedBucketPlanReadsTheSameRecords() throws Exception {
    ChangePlan p = ChangePlan.resolve(TABLE, CONF, 0, 4, null, true);
    List<ChangeBucketPlan> copies = new ArrayList<>();
    for (ChangeBucketPlan b : buckets(p)) {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      try (ObjectOutputStream o = new ObjectOutputStream(bytes)) {
        o.writeObject(b);
      }
      try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
        copies.add((ChangeBucketPlan) in.readObject());
      }
    }
    assertEquals(perVersion(buckets(p)), perVersion(copies));
  }

  @Test
  void theSchemaHasKeysFirstThenMasksThenTheMetaColumns() throws Exception {
    ChangePlan p = ChangePlan.resolve(TABLE, CONF, 0, 4, null, true);
    List<Field> f = p.arrowSchema().getFields();
    int nkeys = 0;
    for (Column c : p.columns()) if (c.isKey()) nkeys++;
    assertTrue(p.columns().get(0).isKey());
    assertEquals(p.columns().size() * 2 - nkeys + 3, f.size());
    assertEquals("_set_" + p.columns().get(nkeys).name(), f.get(p.columns().size()).getName());
    assertEquals(List.of("_change_type", "_commit_version", "_commit_timestamp"),
        List.of(f.get(f.size() - 3).getName(), f.get(f.size() - 2).getName(), f.get(f.size() - 1).getName()));
    for (Field x : f.subList(f.size() - 3, f.size())) assertFalse(x.isNullable());
    assertEquals(p.columns().size() + 3, ChangePlan.resolve(TABLE, CONF, 0, 4, null, false).arrowSchema()
        .getFields().size());
  }

  @Test
  void badRangesAndColumnsAreRefused() {
    CdcSinkFormatException order = assertThrows(CdcSinkFormatException.class,
        () -> ChangePlan.resolve(TABLE, CONF, 3, 2, null, false));
    assertTrue(order.getMessage().contains("start 3 is after end 2"), order.getMessage());
    VersionNotRetainedException late = assertThrows(VersionNotRetainedException.class,
        () -> ChangePlan.resolve(TABLE, CONF, 2, 9, null, false));
    assertTrue(late.getMessage().contains("the oldest readable version is 0"), late.getMessage());
    assertEquals(0, late.oldestReadable());
    CdcSinkFormatException col = assertThrows(CdcSinkFormatException.class,
        () -> ChangePlan.resolve(TABLE, CONF, 0, 4, List.of("no_such"), false));
    assertTrue(col.getMessage().contains("no_such") && col.getMessage().contains("version 4"), col.getMessage());
  }

  @Test
  void timestampsNameTheVersionsCommittedAroundThem() throws Exception {
    List<VersionInfo> h = ReadPlan.resolve(TABLE, CONF, null, null).history();
    for (VersionInfo vi : h) {
      long t = vi.commitTimeMs();
      long atOrBefore = ChangePlan.versionAtOrBefore(TABLE, CONF, t);
      long atOrAfter = ChangePlan.versionAtOrAfter(TABLE, CONF, t);
      assertTrue(atOrBefore >= vi.version() && h.get((int) atOrBefore).commitTimeMs() == t);
      assertTrue(atOrAfter <= vi.version() && h.get((int) atOrAfter).commitTimeMs() == t);
    }
    assertThrows(VersionNotRetainedException.class, () -> ChangePlan.versionAtOrBefore(TABLE, CONF, 0));
    assertEquals(0, ChangePlan.versionAtOrAfter(TABLE, CONF, 0));
    assertEquals(5, ChangePlan.versionAtOrAfter(TABLE, CONF, Long.MAX_VALUE / 2));
  }

  @Test
  void gatheredCellsEqualArrowsCopyFromSafe() {
    try (BufferAllocator a = new RootAllocator();
         VarCharVector s0 = new VarCharVector("s", a);
         VarCharVector s1 = new VarCharVector("s", a);
         BigIntVector l0 = new BigIntVector("l", a);
         BigIntVector l1 = new BigIntVector("l", a)) {
      String[] vals = {"a", null, "", "ünï ünï ünï ünï ünï ünï ünï ünï", null, "z".repeat(5000)};
      for (VarCharVector v : new VarCharVector[] {s0, s1}) v.allocateNew();
      for (BigIntVector v : new BigIntVector[] {l0, l1}) v.allocateNew();
      for (int i = 0; i < vals.length; i++) {
        if (vals[i] == null) {
          s0.setNull(i);
          l0.setNull(i);
        } else {
          s0.setSafe(i, vals[i].getBytes(StandardCharsets.UTF_8));
          l0.setSafe(i, i * 1000L);
        }
        s1.setSafe(i, ("other " + i).getBytes(StandardCharsets.UTF_8));
        l1.setSafe(i, -i);
      }
      for (org.apache.arrow.vector.FieldVector v : new org.apache.arrow.vector.FieldVector[] {s0, s1, l0, l1}) {
        v.setValueCount(vals.length);
      }
      int n = 40;
      int[] which = new int[n];
      int[] idx = new int[n];
      for (int k = 0; k < n; k++) {
        which[k] = k % 3 == 0 ? 1 : 0;
        idx[k] = (k * 5) % vals.length;
      }
      org.apache.arrow.vector.FieldVector[][] pairs = {{s0, s1}, {l0, l1}};
      for (org.apache.arrow.vector.FieldVector[] src : pairs) {
        try (org.apache.arrow.vector.FieldVector ours = src[0].getField().createVector(a);
             org.apache.arrow.vector.FieldVector arrows = src[0].getField().createVector(a)) {
          ChangeState.gather(src, which, idx, n, ours);
          arrows.allocateNew();
          for (int k = 0; k < n; k++) arrows.copyFromSafe(idx[k], k, src[which[k]]);
          arrows.setValueCount(n);
          assertEquals(n, ours.getValueCount());
          for (int k = 0; k < n; k++) {
            assertEquals(arrows.isNull(k), ours.isNull(k));
            if (!arrows.isNull(k)) assertEquals(arrows.getObject(k), ours.getObject(k));
          }
        }
      }
    }
  }

  @Test
  void aLongSetHoldsWhatWasAdded() {
    ChangeState.LongSet s = new ChangeState.LongSet(3);
    long[] in = {0, -1, Long.MIN_VALUE, 42, 42, 1L << 40};
    for (long x : in) s.add(x);
    for (long x : in) assertTrue(s.contains(x));
    for (long x : new long[] {1, -2, Long.MAX_VALUE, 43}) assertFalse(s.contains(x));
  }

  @Test
  void equalityIsArrowsComputeEqual() {
    try (BufferAllocator a = new RootAllocator();
         org.apache.arrow.vector.Float8Vector x = new org.apache.arrow.vector.Float8Vector("x", a)) {
      x.allocateNew(4);
      x.set(0, Double.NaN);
      x.set(1, 0.0);
      x.set(2, -0.0);
      x.setNull(3);
      x.setValueCount(4);
      assertFalse(ChangeReader.same(x, 0, x, 0)); // NaN differs from itself
      assertTrue(ChangeReader.same(x, 1, x, 2)); // -0.0 equals 0.0
      assertTrue(ChangeReader.same(x, 3, x, 3)); // two nulls are the same
      assertFalse(ChangeReader.same(x, 1, x, 3));
    }
  }
}
