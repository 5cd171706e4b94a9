package io.cdcsink.format;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.hadoop.conf.Configuration;

/**
 * {@code ScanBench <tableUri> [repeat] [col1,col2,...|-]} ("-": no column, a count): times a full read of the latest version
 * through ReadPlan + BucketReader (all buckets, one thread), printing wall and CPU seconds per run.
 */
public final class ScanBench {
  private ScanBench() {}

  public static void main(String[] args) throws Exception {
    String uri = args[0];
    int repeat = args.length > 1 ? Integer.parseInt(args[1]) : 3;
    List<String> cols = args.length > 2 ? (args[2].equals("-") ? List.of() : Arrays.asList(args[2].split(","))) : null;
    Configuration conf = new Configuration();
    try (BufferAllocator alloc = new RootAllocator()) {
      timed(repeat, () -> {
        ReadPlan plan = ReadPlan.resolve(uri, conf, null, null);
        long rows = 0;
        for (int b = 0; b < plan.numBuckets(); b++) {
          try (BucketReader r = new BucketReader(plan.bucket(b), conf, alloc, cols)) {
            Iterator<VectorSchemaRoot> it = r.batches();
            while (it.hasNext()) {
              try (VectorSchemaRoot root = it.next()) {
                rows += root.getRowCount();
              }
            }
          }
        }
        return rows + " rows, " + (cols == null ? "all" : String.valueOf(cols.size())) + " columns";
      });
    }
  }

  /** One timed run: what it read, for its line. */
  interface Run {
    String run() throws Exception;
  }

  /**
   * Runs {@code body} once as a warm-up and {@code repeat} times measured, printing each run's
   * wall seconds and CPU seconds (the main thread's and the process's), then the medians.
   */
  static void timed(int repeat, Run body) throws Exception {
    ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    com.sun.management.OperatingSystemMXBean os =
        (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    List<Double> walls = new ArrayList<>();
    List<Double> cpus = new ArrayList<>();
    for (int i = 0; i <= repeat; i++) { // run 0 is a warm-up
      long t0 = System.nanoTime();
      long c0 = mx.getCurrentThreadCpuTime();
      long p0 = os.getProcessCpuTime();
      String what = body.run();
      double wall = (System.nanoTime() - t0) / 1e9;
      double cpu = (mx.getCurrentThreadCpuTime() - c0) / 1e9;
      double proc = (os.getProcessCpuTime() - p0) / 1e9;
      System.out.printf("%s: %s: %.3f s wall, %.3f s CPU (main thread), %.3f s CPU (process)%n",
          i == 0 ? "warm-up" : "run " + i, what, wall, cpu, proc);
      if (i > 0) {
        walls.add(wall);
        cpus.add(cpu);
      }
    }
    walls.sort(null);
    cpus.sort(null);
    System.out.printf("median of %d: %.3f s wall, %.3f s CPU%n", walls.size(), walls.get(walls.size() / 2),
        cpus.get(cpus.size() / 2));
  }
}
