package io.cdcsink.format;

import java.util.List;
import org.apache.arrow.vector.types.pojo.Schema;

/** The schema S_v of a table version (docs/format.md §7). */
public final class TableSchema implements java.io.Serializable {
  private static final long serialVersionUID = 1L;
  private final List<Column> columns;

  public TableSchema(List<Column> columns) {
    this.columns = List.copyOf(columns);
  }

  public List<Column> columns() {
    return columns;
  }

  public Schema arrowSchema() {
    throw new UnsupportedOperationException("not yet");
  }
}
