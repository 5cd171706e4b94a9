package io.cdcsink.format;

import java.util.Iterator;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.hadoop.conf.Configuration;

/** Reads the live rows of one bucket at the plan's version (merge-on-read §14.2-14.5). */
public final class BucketReader implements AutoCloseable {
  public BucketReader(BucketPlan plan, Configuration conf, BufferAllocator allocator, List<String> columns) {
  }

  public Iterator<VectorSchemaRoot> batches() throws CdcSinkFormatException {
    throw new UnsupportedOperationException("not yet");
  }

  @Override
  public void close() {
  }
}
