package io.cdcsink.spark;

import io.cdcsink.format.BucketReader;
import io.cdcsink.format.CdcSinkFormatException;
import io.cdcsink.format.ChangeReader;
import java.io.IOException;
import java.util.Iterator;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Arrow batches of one bucket as {@link ColumnarBatch}es of {@link DirectArrowColumnVector}s over
 * the reader's vectors: no copy, no row conversion. The batches come from a {@link BucketReader}
 * (the live rows of a version) or a {@link ChangeReader} (the bucket's change records). A batch
 * is valid until the next call to {@link #next()}, which closes it.
 */
final class BucketBatchReader implements PartitionReader<ColumnarBatch> {
  private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(BucketBatchReader.class);

  /** What hands out a bucket's Arrow batches. */
  @FunctionalInterface
  interface Batches {
    Iterator<VectorSchemaRoot> get() throws CdcSinkFormatException;
  }

  /** A reader's batches, and what frees the rest of its memory. */
  record Source(Batches batches, Runnable close) {}

  private final BufferAllocator allocator;
  private final Source reader;
  private final List<String> columns;
  private Iterator<VectorSchemaRoot> roots;
  private VectorSchemaRoot current;
  private ColumnarBatch batch;

  /** The live rows of {@code partition}'s bucket ({@code countBy}: the column read for none). */
  BucketBatchReader(BucketPartition partition, Configuration conf, List<String> columns, String countBy,
                    List<io.cdcsink.format.Filter> filters) {
    this("cdc_sink bucket " + partition.bucket, columns, allocator -> {
      List<String> read = columns.isEmpty() ? List.of(countBy) : columns;
      BucketReader r = new BucketReader(partition.plan, conf, allocator, read, filters);
      return new Source(r::batches, r::close);
    });
  }

  /** The change records of {@code partition}'s bucket; {@code columns}: those Spark reads. */
  BucketBatchReader(ChangeFeedPartition partition, Configuration conf, List<String> columns) {
    this("cdc_sink changes of bucket " + partition.plan.bucket(), columns, allocator -> {
      ChangeReader r = new ChangeReader(partition.plan, conf, allocator);
      return new Source(r::batches, r::close);
    });
  }

  private BucketBatchReader(String name, List<String> columns,
                            java.util.function.Function<BufferAllocator, Source> open) {
    this.columns = columns;
    this.allocator = ArrowUtils.rootAllocator().newChildAllocator(name, 0, Long.MAX_VALUE);
    Source s;
    try {
      s = open.apply(allocator);
    } catch (RuntimeException e) {
      allocator.close();
      throw e;
    }
    this.reader = s;
  }

  @Override
  public boolean next() throws IOException {
    release();
    if (roots == null) {
      try {
        roots = reader.batches().get();
      } catch (CdcSinkFormatException e) {
        throw SparkHadoop.unchecked(e);
      }
    }
    while (roots.hasNext()) {
      VectorSchemaRoot root = roots.next();
      if (root.getRowCount() == 0) {
        root.close();
        continue;
      }
      current = root;
      ColumnVector[] vectors = new ColumnVector[columns.size()];
      for (int i = 0; i < vectors.length; i++) {
        vectors[i] = DirectArrowColumnVector.of(root.getVector(columns.get(i)));
      }
      batch = new ColumnarBatch(vectors, root.getRowCount());
      return true;
    }
    return false;
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  /**
   * Closes the batches a query left unread (a LIMIT): their memory is the allocator's until
   * each root is closed.
   */
  private void drain() {
    try {
      while (roots != null && roots.hasNext()) {
        roots.next().close();
      }
    } catch (RuntimeException e) { // the task failed already: what it read is what it has
      LOG.debug("cdc_sink: draining a bucket reader after a failure: {}", e.toString());
    }
  }

  private void release() {
    batch = null; // the vectors are the root's: closing the root frees them
    if (current != null) {
      current.close();
      current = null;
    }
  }

  @Override
  public void close() {
    release();
    try {
      drain();
      reader.close().run();
    } finally {
      try {
        allocator.close();
      } catch (IllegalStateException e) { // a leak: say so, the task's result stands
        LOG.warn("cdc_sink: bucket reader closed with memory outstanding: {}", e.getMessage());
      }
    }
  }
}
