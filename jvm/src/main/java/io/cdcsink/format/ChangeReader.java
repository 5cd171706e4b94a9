package io.cdcsink.format;

import java.util.Iterator;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.hadoop.conf.Configuration;

/**
 * The change records of one bucket, ordered by version, as Arrow batches of
 * {@link ChangePlan#arrowSchema()}; the caller closes each root; close() frees the rest.
 */
public final class ChangeReader implements AutoCloseable {
  public ChangeReader(ChangeBucketPlan plan, Configuration conf, BufferAllocator allocator) {
  }

  public Iterator<VectorSchemaRoot> batches() throws CdcSinkFormatException {
    throw new UnsupportedOperationException("not yet");
  }

  @Override
  public void close() {}
}
