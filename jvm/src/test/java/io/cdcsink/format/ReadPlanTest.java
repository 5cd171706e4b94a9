package io.cdcsink.format;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Iterator;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;

/** Resolving and reading the repository's format-1 WAL fixture (tests/storage/data/wal_v1). */
class ReadPlanTest {
  private static final Path TABLE = Paths.get("..", "tests", "storage", "data", "wal_v1").toAbsolutePath();
  private static final Configuration CONF = new Configuration();

  private static long rows(BucketPlan plan, List<String> columns) throws Exception {
    long n = 0;
    try (BufferAllocator a = new RootAllocator(); BucketReader r = new BucketReader(plan, CONF, a, columns)) {
      Iterator<VectorSchemaRoot> it = r.batches();
      while (it.hasNext()) {
        try (VectorSchemaRoot root = it.next()) {
          n += root.getRowCount();
          assertEquals(columns == null ? plan.schema().columns().size() : columns.size(),
              root.getFieldVectors().size());
        }
      }
    }
    return n;
  }

  @Test
  void resolvesTheLatestVersionAndItsHistory() throws Exception {
    ReadPlan p = ReadPlan.resolve(TABLE.toString(), CONF, null, null);
    assertEquals(4, p.version());
    assertEquals(5, p.history().size());
    assertEquals("create", p.history().get(0).operation());
    assertEquals(p.numBuckets(), p.schema().numBuckets());
    assertEquals(p.schema().columns().size(), p.schema().arrowSchema().getFields().size());
  }

  @Test
  void aVersionOutsideTheLogNamesTheOldestReadable() {
    VersionNotRetainedException e = assertThrows(VersionNotRetainedException.class,
        () -> ReadPlan.resolve(TABLE.toString(), CONF, 99L, null));
    assertTrue(e.getMessage().contains("oldest readable version is 0"), e.getMessage());
    assertEquals(0, e.oldestReadable());
    VersionNotRetainedException t = assertThrows(VersionNotRetainedException.class,
        () -> ReadPlan.resolve(TABLE.toString(), CONF, null, 0L));
    assertTrue(t.getMessage().contains("oldest readable version is 0"), t.getMessage());
  }

  @Test
  void aTimestampPicksTheNewestVersionCommittedBeforeIt() throws Exception {
    ReadPlan latest = ReadPlan.resolve(TABLE.toString(), CONF, null, null);
    VersionInfo v2 = latest.history().get(2);
    ReadPlan p = ReadPlan.resolve(TABLE.toString(), CONF, null, v2.commitTimeMs());
    assertTrue(p.version() >= 2);
    assertTrue(p.commitTimeMs() <= v2.commitTimeMs());
  }

  @Test
  void aSerializedPlanReadsTheSameRowsWithAndWithoutPruning() throws Exception {
    ReadPlan p = ReadPlan.resolve(TABLE.toString(), CONF, null, null);
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream o = new ObjectOutputStream(bytes)) {
      o.writeObject(p);
    }
    ReadPlan back;
    try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
      back = (ReadPlan) in.readObject();
    }
    long all = 0;
    long pruned = 0;
    long counted = 0;
    String key = p.schema().primaryKey().get(0);
    for (int b = 0; b < p.numBuckets(); b++) {
      all += rows(p.bucket(b), null);
      pruned += rows(back.bucket(b), List.of(key));
      counted += rows(back.bucket(b), List.of());
    }
    assertTrue(all > 0);
    assertEquals(all, pruned);
    assertEquals(all, counted);
  }
}
