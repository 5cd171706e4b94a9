package io.cdcsink.format;

/** One column of a table schema (docs/format.md §7). */
public final class Column implements java.io.Serializable {
  private static final long serialVersionUID = 1L;
  private final int id;
  private final String name;
  private final String type;
  private final boolean nullable;
  private final boolean isKey;
  private final Object defaultValue;

  public Column(int id, String name, String type, boolean nullable, boolean isKey, Object defaultValue) {
    this.id = id;
    this.name = name;
    this.type = type;
    this.nullable = nullable;
    this.isKey = isKey;
    this.defaultValue = defaultValue;
  }

  public int id() { return id; }
  public String name() { return name; }
  /** The type in the spelling of docs/format.md §5.4, e.g. "int64" or "decimal(18,2)". */
  public String type() { return type; }
  public boolean nullable() { return nullable; }
  public boolean isKey() { return isKey; }
  /** The column's default as JSON-decoded Java value (Long, Double, Boolean, String, BigDecimal) or null. */
  public Object defaultValue() { return defaultValue; }

  @Override
  public String toString() {
    return name + "#" + id + ":" + type + (isKey ? " key" : "") + (nullable ? "" : " not null");
  }
}
