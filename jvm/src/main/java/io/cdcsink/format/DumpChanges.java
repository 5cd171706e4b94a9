package io.cdcsink.format;

import java.io.FileOutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
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
 * {@code DumpChanges @<listFile>}: writes change records through {@link ChangePlan} and
 * {@link ChangeReader}, every bucket, as Arrow IPC files. Each line of the list file is
 * {@code <tableUri>\t<outDir>\t<start:end,...>\t<columns|*>\t<setColumnsOnly 0|1>} ({@code columns}
 * comma-separated, {@code *}: all); each range's records go to {@code <outDir>/<start>_<end>.arrow},
 * or its error message to {@code <outDir>/<start>_<end>.error} (and stderr; exit code 2).
 *
 * <p>{@code DumpChanges --bench <tableUri> <start> <end> [repeat] [set]}: times reading the
 * changes of (start, end] (all buckets, one thread) after a warm-up, printing wall and CPU seconds
 * per run and their medians.
 */
public final class DumpChanges {
  private DumpChanges() {}

  public static void main(String[] args) throws Exception {
    if (args.length >= 4 && args[0].equals("--bench")) {
      bench(args[1], Long.parseLong(args[2]), Long.parseLong(args[3]),
          args.length > 4 ? Integer.parseInt(args[4]) : 3, args.length > 5 && args[5].equals("set"));
      return;
    }
    if (args.length != 1 || !args[0].startsWith("@")) {
      System.err.println("usage: DumpChanges @<listFile> | --bench <tableUri> <start> <end> [repeat] [set]");
      System.exit(2);
    }
    int rc = 0;
    Configuration conf = new Configuration();
    try (BufferAllocator alloc = new RootAllocator()) {
      for (String line : Files.readAllLines(Paths.get(args[0].substring(1)))) {
        if (line.isBlank()) continue;
        String[] f = line.split("\t");
        Path out = Paths.get(f[1]);
        Files.createDirectories(out);
        List<String> cols = f[3].equals("*") ? null : Arrays.asList(f[3].split(","));
        boolean set = f[4].equals("1");
        for (String range : f[2].split(",")) {
          String[] se = range.split(":");
          long s = Long.parseLong(se[0]);
          long e = Long.parseLong(se[1]);
          String name = s + "_" + e;
          try {
            write(f[0], conf, alloc, s, e, cols, set, out.resolve(name + ".arrow"));
          } catch (Exception ex) {
            String m = DumpTable.message(ex);
            System.err.println(f[0] + " (" + name + "): " + m);
            Files.writeString(out.resolve(name + ".error"), m);
            rc = 2;
          }
        }
      }
    }
    System.exit(rc);
  }

  /** Reads every bucket's changes; returns the record count (written to {@code file} unless null). */
  static long write(String uri, Configuration conf, BufferAllocator alloc, long start, long end, List<String> cols,
                    boolean set, Path file) throws Exception {
    ChangePlan plan = ChangePlan.resolve(uri, conf, start, end, cols, set);
    long rows = 0;
    try (VectorSchemaRoot sink = VectorSchemaRoot.create(plan.arrowSchema(), alloc)) {
      FileOutputStream fo = file == null ? null : new FileOutputStream(file.toFile());
      ArrowFileWriter w = fo == null ? null : new ArrowFileWriter(sink, null, fo.getChannel());
      try {
        if (w != null) w.start();
        VectorLoader loader = new VectorLoader(sink);
        for (int b = 0; b < plan.numBuckets(); b++) {
          try (ChangeReader r = new ChangeReader(plan.bucket(b), conf, alloc)) {
            Iterator<VectorSchemaRoot> it = r.batches();
            while (it.hasNext()) {
              try (VectorSchemaRoot root = it.next()) {
                rows += root.getRowCount();
                if (w == null) continue;
                try (ArrowRecordBatch rb = new VectorUnloader(root).getRecordBatch()) {
                  loader.load(rb);
                  w.writeBatch();
                }
              }
            }
          }
        }
        if (w != null) w.end();
      } finally {
        if (w != null) w.close();
        if (fo != null) fo.close();
      }
    }
    return rows;
  }

  static void bench(String uri, long start, long end, int repeat, boolean set) throws Exception {
    Configuration conf = new Configuration();
    try (BufferAllocator alloc = new RootAllocator()) {
      ScanBench.timed(repeat, () -> write(uri, conf, alloc, start, end, null, set, null) + " records");
    }
  }
}
