package io.cdcsink.format;

import com.fasterxml.jackson.databind.JsonNode;
import java.math.BigDecimal;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;

/** The schema S_v of a table version (docs/format.md §7). */
public final class TableSchema implements java.io.Serializable {
  private static final long serialVersionUID = 1L;
  private final List<Column> columns;
  private final List<String> primaryKey;
  private final int numBuckets;
  private final int schemaId;
  private final String sequenceColumn;

  public TableSchema(List<Column> columns) {
    this(columns, keyNames(columns), 1, 0, null);
  }

  public TableSchema(List<Column> columns, List<String> primaryKey, int numBuckets, int schemaId,
                     String sequenceColumn) {
    this.columns = List.copyOf(columns);
    this.primaryKey = List.copyOf(primaryKey);
    this.numBuckets = numBuckets;
    this.schemaId = schemaId;
    this.sequenceColumn = sequenceColumn;
  }

  private static List<String> keyNames(List<Column> cols) {
    List<String> out = new ArrayList<>();
    for (Column c : cols) if (c.isKey()) out.add(c.name());
    return out;
  }

  /** The columns in table order. */
  public List<Column> columns() {
    return columns;
  }

  /** The key columns' names in key order. */
  public List<String> primaryKey() {
    return primaryKey;
  }

  public int numBuckets() {
    return numBuckets;
  }

  public int schemaId() {
    return schemaId;
  }

  /** The sequence column's name, or null. */
  public String sequenceColumn() {
    return sequenceColumn;
  }

  /** The column of a name, or null. */
  public Column column(String name) {
    for (Column c : columns) if (c.name().equals(name)) return c;
    return null;
  }

  /** The column of an id, or null. */
  public Column columnById(int id) {
    for (Column c : columns) if (c.id() == id) return c;
    return null;
  }

  /** The key columns in key order. */
  public List<Column> keyColumns() {
    List<Column> out = new ArrayList<>();
    for (String k : primaryKey) out.add(column(k));
    return out;
  }

  /** Required value columns (§7): not nullable, no default, not the sequence column. */
  public boolean isRequired(Column c) {
    return !c.isKey() && !c.nullable() && c.defaultValue() == null && !c.name().equals(sequenceColumn);
  }

  /** The Arrow field of a column (§5.4 type, the column's nullability). */
  public static Field field(Column c) {
    return new Field(c.name(), new FieldType(c.nullable(), Types.arrow(c.type()), null), null);
  }

  /** The §5.4 Arrow types, names = column names, in table order. */
  public Schema arrowSchema() {
    List<Field> fields = new ArrayList<>();
    for (Column c : columns) fields.add(field(c));
    return new Schema(fields);
  }

  /** The Arrow schema of some of the columns, in the order given. */
  public Schema arrowSchema(List<String> names) {
    List<Field> fields = new ArrayList<>();
    for (String n : names) fields.add(field(column(n)));
    return new Schema(fields);
  }

  /** Parses a schema file (§7). */
  static TableSchema parse(byte[] data, String path) throws CdcSinkFormatException {
    JsonNode o = Json.parse(data, path);
    JsonNode pkNode = o.get("primary_key");
    List<String> pk = new ArrayList<>();
    if (pkNode != null && pkNode.isTextual()) {
      pk.add(pkNode.textValue());
    } else if (pkNode != null && pkNode.isArray()) {
      for (JsonNode k : pkNode) {
        if (!k.isTextual()) throw new CdcSinkFormatException(path + ": primary_key is not a list of names");
        pk.add(k.textValue());
      }
    } else {
      throw new CdcSinkFormatException(path + ": primary_key is missing");
    }
    Set<String> keySet = new HashSet<>(pk);
    JsonNode cols = o.get("columns");
    if (cols == null || !cols.isArray()) throw new CdcSinkFormatException(path + ": columns is not a list");
    List<Column> columns = new ArrayList<>();
    Set<Integer> used = new HashSet<>();
    for (JsonNode c : cols) if (c.has("id")) used.add(c.get("id").intValue());
    int auto = 0;
    for (JsonNode c : cols) {
      if (!c.isObject()) throw new CdcSinkFormatException(path + ": a column is not an object");
      JsonNode nameN = c.get("name");
      JsonNode typeN = c.get("type");
      if (nameN == null || !nameN.isTextual() || typeN == null || !typeN.isTextual()) {
        throw new CdcSinkFormatException(path + ": a column lacks its name or type");
      }
      String type = Types.canonical(typeN.textValue());
      if (type == null) {
        throw new CdcSinkFormatException(path + ": column " + nameN.textValue() + ": unsupported type "
            + typeN.textValue());
      }
      int id;
      if (c.has("id")) {
        id = (int) Json.integer(c, "id", path);
      } else {
        while (used.contains(auto)) auto++;
        id = auto++;
      }
      String name = nameN.textValue();
      boolean isKey = keySet.contains(name);
      JsonNode nn = c.get("nullable");
      boolean nullable = nn == null ? !isKey : nn.asBoolean();
      Object def = null;
      JsonNode d = c.get("default");
      if (d != null && !d.isNull()) def = parseDefault(d, type, path + ": column " + name);
      columns.add(new Column(id, name, type, nullable, isKey, def));
    }
    for (String k : pk) {
      boolean found = false;
      for (Column c : columns) found |= c.name().equals(k);
      if (!found) throw new CdcSinkFormatException(path + ": primary key column " + k + " is not a column");
    }
    int nb = o.has("num_buckets") ? (int) Json.integer(o, "num_buckets", path) : 1;
    int sid = o.has("schema_id") ? (int) Json.integer(o, "schema_id", path) : 0;
    JsonNode seq = o.get("sequence_column");
    return new TableSchema(columns, pk, nb, sid, seq == null || seq.isNull() ? null : seq.asText());
  }

  /**
   * A default as a Java value of the column's type: Long (ints; micros for timestamps), Integer
   * (date32 days), Double, Boolean, String, byte[] (binary), BigDecimal (decimals, at the scale).
   */
  static Object parseDefault(JsonNode d, String type, String where) throws CdcSinkFormatException {
    try {
      switch (type) {
        case "int8": case "int16": case "int32": case "int64":
          return d.isBoolean() ? (d.booleanValue() ? 1L : 0L) : d.bigIntegerValue().longValueExact();
        case "float32": case "float64":
          return d.isBoolean() ? (d.booleanValue() ? 1.0 : 0.0) : d.asDouble();
        case "bool":
          return d.isBoolean() ? d.booleanValue() : d.asInt() != 0;
        case "string":
          return d.asText();
        case "binary":
          return Base64.getDecoder().decode(d.asText());
        case "date32":
          return (int) LocalDate.parse(d.asText().substring(0, 10)).toEpochDay();
        case "timestamp[us, UTC]": {
          String s = d.asText().replace(' ', 'T');
          if (s.endsWith("Z")) s = s.substring(0, s.length() - 1) + "+00:00";
          OffsetDateTime t;
          try {
            t = OffsetDateTime.parse(s);
          } catch (java.time.format.DateTimeParseException e) {
            t = LocalDateTime.parse(s).atOffset(ZoneOffset.UTC);
          }
          java.time.Instant i = t.toInstant();
          return ChronoUnit.MICROS.between(java.time.Instant.EPOCH, i);
        }
        default: {
          int scale = ((org.apache.arrow.vector.types.pojo.ArrowType.Decimal) Types.arrow(type)).getScale();
          return new BigDecimal(d.asText()).setScale(scale);
        }
      }
    } catch (RuntimeException e) {
      throw new CdcSinkFormatException(where + ": default is not a valid " + type);
    }
  }
}
