package io.cdcsink.format;

import java.io.FileOutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.VectorUnloader;
import org.apache.arrow.vector.ipc.ArrowFileWriter;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.hadoop.conf.Configuration;

/**
 * {@code DumpTable <tableUri> <outDir> <v1,v2,...|all|latest>}: writes each version's rows (all
 * columns, all buckets) as an Arrow IPC file {@code <outDir>/<v>.arrow}. Errors go to stderr with
 * exit code 2. With {@code -Dcdcsink.time=true} it prints the read time per version.
 */
public final class DumpTable {
  private DumpTable() {}

  public static void main(String[] args) {
    if (args.length != 3) {
      System.err.println("usage: DumpTable <tableUri> <outDir> <v1,v2,...|all|latest>");
      System.exit(2);
    }
    try {
      run(args[0], Paths.get(args[1]), args[2]);
    } catch (Exception e) {
      Throwable t = e instanceof BucketReader.FormatRuntimeException ? e.getCause() : e;
      System.err.println("cdc_sink: " + t.getClass().getSimpleName() + ": " + t.getMessage());
      System.exit(2);
    }
  }

  static void run(String uri, Path outDir, String which) throws Exception {
    Configuration conf = new Configuration();
    List<Long> versions = new ArrayList<>();
    if (which.equals("all")) {
      for (VersionInfo vi : ReadPlan.resolve(uri, conf, null, null).history()) versions.add(vi.version());
    } else if (which.equals("latest")) {
      versions.add(ReadPlan.resolve(uri, conf, null, null).version());
    } else {
      for (String s : which.split(",")) versions.add(Long.parseLong(s.trim()));
    }
    Files.createDirectories(outDir);
    boolean time = Boolean.getBoolean("cdcsink.time");
    try (BufferAllocator alloc = new RootAllocator()) {
      for (long v : versions) {
        long t0 = System.nanoTime();
        ReadPlan plan = ReadPlan.resolve(uri, conf, v, null);
        long rows = 0;
        try (VectorSchemaRoot sink = VectorSchemaRoot.create(plan.schema().arrowSchema(), alloc);
             FileOutputStream fo = new FileOutputStream(outDir.resolve(v + ".arrow").toFile());
             ArrowFileWriter w = new ArrowFileWriter(sink, null, fo.getChannel())) {
          w.start();
          VectorLoader loader = new VectorLoader(sink);
          for (int b = 0; b < plan.numBuckets(); b++) {
            try (BucketReader r = new BucketReader(plan.bucket(b), conf, alloc, null)) {
              Iterator<VectorSchemaRoot> it = r.batches();
              while (it.hasNext()) {
                try (VectorSchemaRoot root = it.next();
                     ArrowRecordBatch rb = new VectorUnloader(root).getRecordBatch()) {
                  loader.load(rb);
                  rows += root.getRowCount();
                  w.writeBatch();
                }
              }
            }
          }
          w.end();
        }
        if (time) {
          System.out.printf("version %d: %d rows in %.3f s%n", v, rows, (System.nanoTime() - t0) / 1e9);
        }
      }
    }
  }
}
