package io.cdcsink.format;

import java.io.FileOutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
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
 * {@code DumpTable <tableUri> <outDir> <v1,v2,...|all|latest> [--filter col,op,json]...}: writes each version's rows (all
 * columns, all buckets) as an Arrow IPC file {@code <outDir>/<v>.arrow}. Errors go to stderr with
 * exit code 2. With {@code -Dcdcsink.time=true} it prints the read time per version. Beside each
 * {@code <v>.arrow} it writes {@code <v>.plan}: the version, its commit time, and per bucket the
 * snapshot and segments the plan reads; and with {@code all}, {@code history.txt}: the retained
 * versions.
 *
 * <p>{@code DumpTable @<listFile>} dumps many tables in one JVM: each line of the file is
 * {@code <tableUri>\t<outDir>\t<versions>[\t<col,op,json>...]}; a table that fails has its message written to
 * {@code <outDir>/error.txt} and to stderr, the others are still dumped, and the exit code is 2
 * if any failed.
 *
 * <p>A filter {@code col,op,json} ({@link Filter}'s ops; the value as JSON: a number, bool or
 * string, an array for {@code in}, nothing for {@code is_null}; binaries as base64 strings, dates
 * as days, timestamps as microseconds, decimals as strings) is handed to every {@link BucketReader}
 * (converted to the column's type in each version's schema; a column the version lacks is not
 * used): the dump holds the rows the reader returned, which may include rows that do not match.
 */
public final class DumpTable {
  private DumpTable() {}

  public static void main(String[] args) throws java.io.IOException {
    if (args.length == 1 && args[0].startsWith("@")) {
      System.exit(runMany(Paths.get(args[0].substring(1))));
    }
    List<String> filters = new ArrayList<>();
    for (int i = 3; i + 1 < args.length && args[i].equals("--filter"); i += 2) filters.add(args[i + 1]);
    if (args.length < 3 || args.length != 3 + 2 * filters.size()) {
      System.err.println("usage: DumpTable <tableUri> <outDir> <v1,v2,...|all|latest> [--filter col,op,json]...");
      System.exit(2);
    }
    try {
      run(args[0], Paths.get(args[1]), args[2], filters);
    } catch (Exception e) {
      System.err.println(message(e));
      System.exit(2);
    }
  }

  static String message(Throwable e) {
    Throwable t = e instanceof BucketReader.FormatRuntimeException || e instanceof java.io.UncheckedIOException
        ? e.getCause() : e;
    return "cdc_sink: " + t.getClass().getSimpleName() + ": " + t.getMessage();
  }

  static int runMany(Path list) throws java.io.IOException {
    int rc = 0;
    for (String line : Files.readAllLines(list)) {
      if (line.isBlank()) continue;
      String[] f = line.split("\t");
      Path out = Paths.get(f[1]);
      try {
        run(f[0], out, f[2], Arrays.asList(f).subList(3, f.length));
      } catch (Exception e) {
        String m = message(e);
        System.err.println(f[0] + ": " + m);
        Files.createDirectories(out);
        Files.writeString(out.resolve("error.txt"), m);
        rc = 2;
      }
    }
    return rc;
  }

  /** The version, commit time, schema id and every bucket's snapshot and segments. */
  static String planText(ReadPlan plan) {
    StringBuilder t = new StringBuilder();
    t.append(plan.version()).append('\t').append(plan.commitTimeMs()).append('\t')
        .append(plan.schema().schemaId()).append('\n');
    for (int b = 0; b < plan.numBuckets(); b++) {
      BucketPlan bp = plan.bucket(b);
      t.append(b).append('\t').append(bp.snapshotPath()).append('\t').append(bp.segmentPaths()).append('\n');
    }
    return t.toString();
  }

  /** A filter argument {@code col,op,json} with its value converted to the column's type in {@code s}. */
  static Filter filter(String arg, TableSchema s) throws CdcSinkFormatException {
    String[] p = arg.split(",", 3);
    Column c = s.column(p[0]);
    if (c == null) return null;
    Object value = null;
    if (p.length == 3 && !p[2].isEmpty()) {
      byte[] b = p[2].getBytes(java.nio.charset.StandardCharsets.UTF_8);
      try {
        value = javaValue(Json.MAPPER.readTree(b), c.type());
      } catch (java.io.IOException e) {
        throw new CdcSinkFormatException("filter " + arg + ": the value is not JSON");
      }
    }
    return new Filter(p[0], p[1], value);
  }

  static Object javaValue(com.fasterxml.jackson.databind.JsonNode n, String type) {
    if (n == null || n.isNull()) return null;
    if (n.isArray()) {
      List<Object> out = new ArrayList<>();
      for (com.fasterxml.jackson.databind.JsonNode x : n) out.add(javaValue(x, type));
      return out;
    }
    switch (type) {
      case "int8": case "int16": case "int32": case "int64": case "timestamp[us, UTC]": return n.longValue();
      case "date32": return n.intValue();
      case "float32": return n.floatValue();
      case "float64": return n.doubleValue();
      case "bool": return n.booleanValue();
      case "string": return n.textValue();
      case "binary": return java.util.Base64.getDecoder().decode(n.textValue());
      default: return new java.math.BigDecimal(n.asText());
    }
  }

  static void run(String uri, Path outDir, String which) throws Exception {
    run(uri, outDir, which, List.of());
  }

  static void run(String uri, Path outDir, String which, List<String> filterArgs) throws Exception {
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
    if (which.equals("all")) {
      StringBuilder hist = new StringBuilder();
      for (VersionInfo vi : ReadPlan.resolve(uri, conf, null, null).history()) {
        hist.append(vi.version()).append('\t').append(vi.commitTimeMs()).append('\t').append(vi.operation())
            .append('\t').append(vi.appId()).append('\t').append(vi.batchId()).append('\n');
      }
      Files.writeString(outDir.resolve("history.txt"), hist);
    }
    boolean time = Boolean.getBoolean("cdcsink.time");
    try (BufferAllocator alloc = new RootAllocator()) {
      for (long v : versions) {
        long t0 = System.nanoTime();
        ReadPlan plan = ReadPlan.resolve(uri, conf, v, null);
        Files.writeString(outDir.resolve(v + ".plan"), planText(plan));
        List<Filter> filters = new ArrayList<>();
        for (String a : filterArgs) {
          Filter f = filter(a, plan.schema());
          if (f != null) filters.add(f);
        }
        long rows = 0;
        try (VectorSchemaRoot sink = VectorSchemaRoot.create(plan.schema().arrowSchema(), alloc);
             FileOutputStream fo = new FileOutputStream(outDir.resolve(v + ".arrow").toFile());
             ArrowFileWriter w = new ArrowFileWriter(sink, null, fo.getChannel())) {
          w.start();
          VectorLoader loader = new VectorLoader(sink);
          for (int b = 0; b < plan.numBuckets(); b++) {
            try (BucketReader r = new BucketReader(plan.bucket(b), conf, alloc, null, filters)) {
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
