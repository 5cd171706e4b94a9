package io.cdcsink.spark;

import io.cdcsink.format.ReadPlan;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.NamespaceChange;
import org.apache.spark.sql.connector.catalog.SupportsNamespaces;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.catalog.TableInfo;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A read-only catalog of the cdc_sink tables under a root: {@code SELECT … FROM
 * cdc.inventory.customers}, {@code VERSION AS OF}, {@code TIMESTAMP AS OF}.
 *
 * <pre>
 * spark.sql.catalog.cdc=io.cdcsink.spark.CdcSinkCatalog
 * spark.sql.catalog.cdc.root=s3a://lake/inventory     (any Hadoop URL or a local path)
 * spark.sql.catalog.cdc.fs.s3a.endpoint=…             (optional: Hadoop settings of its reads)
 * </pre>
 *
 * <p>A table is a directory holding {@code _table.json}. The whole-database job names its
 * tables {@code db.table} (or {@code db.schema.table}), one directory of that name under the
 * root: the parts before the last dot are the namespace, so {@code inventory.customers} is
 * {@code cdc.inventory.customers}. A table in a sub-directory ({@code root/inventory/customers})
 * is named the same way. {@code cat.db.table.history} (or {@code cat.db.`table$history`}) is
 * the table's history, one row per retained version ({@link HistoryTable}). Creating,
 * altering and dropping tables or namespaces is refused.
 */
public final class CdcSinkCatalog implements TableCatalog, SupportsNamespaces {
  private static final String MARKER = "_table.json";

  private String name;
  private String root;
  private Map<String, String> readOptions;

  @Override
  public void initialize(String name, CaseInsensitiveStringMap options) {
    this.name = name;
    String r = options.get("root");
    if (r == null || r.isBlank()) {
      throw new IllegalArgumentException("cdc_sink: catalog " + name + " needs a root: set "
          + "spark.sql.catalog." + name + ".root to the directory or URL of its tables");
    }
    this.root = r.strip().replaceAll("/+$", "");
    this.readOptions = new HashMap<>(options.asCaseSensitiveMap());
    this.readOptions.remove("root");
  }

  @Override
  public String name() {
    return name;
  }

  // ------------------------------------------------------------------ tables

  @Override
  public Identifier[] listTables(String[] namespace) throws NoSuchNamespaceException {
    List<Identifier> out = new ArrayList<>();
    for (String[] t : tables()) {
      String[] ns = Arrays.copyOf(t, t.length - 1);
      if (Arrays.equals(ns, namespace)) {
        out.add(Identifier.of(ns, t[t.length - 1]));
      }
    }
    if (out.isEmpty() && namespace.length > 0 && !namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    return out.toArray(new Identifier[0]);
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    return load(ident, null, null);
  }

  @Override
  public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
    long v;
    try {
      v = Long.parseLong(version.strip());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("cdc_sink: VERSION AS OF takes a version number, got '"
          + version + "'");
    }
    return load(ident, v, null);
  }

  @Override
  public Table loadTable(Identifier ident, long timestampMicros) throws NoSuchTableException {
    return load(ident, null, Math.floorDiv(timestampMicros, 1000L));
  }

  @Override
  public boolean tableExists(Identifier ident) {
    return locate(ident) != null;
  }

  private Table load(Identifier ident, Long version, Long timestampMs) throws NoSuchTableException {
    String uri = locate(ident);
    if (uri == null) {
      Identifier of = historyOf(ident);
      String table = of == null ? null : locate(of);
      if (table == null) {
        throw new NoSuchTableException(ident);
      }
      ReadPlan plan = SparkHadoop.resolveAt(options(table), SparkHadoop.sessionConf(), null, null);
      return new HistoryTable(name + "." + ident, plan.history());
    }
    ReadOptions base = options(uri);
    ReadPlan plan = SparkHadoop.resolveAt(base, SparkHadoop.sessionConf(), version, timestampMs);
    String display = name + "." + ident;
    return new CdcSinkTable(display, plan, base, CdcSinkTable.fullSchema(plan));
  }

  private ReadOptions options(String uri) {
    Map<String, String> opts = new HashMap<>(readOptions);
    opts.put("path", uri);
    return ReadOptions.parse(opts);
  }

  /** The table whose history {@code ident} names ({@code t$history}, {@code t.history}), or null. */
  private static Identifier historyOf(Identifier ident) {
    String n = ident.name();
    if (n.endsWith("$history") && n.length() > "$history".length()) {
      return Identifier.of(ident.namespace(), n.substring(0, n.length() - "$history".length()));
    }
    String[] ns = ident.namespace();
    if (n.equalsIgnoreCase("history") && ns.length > 0) {
      return Identifier.of(Arrays.copyOf(ns, ns.length - 1), ns[ns.length - 1]);
    }
    return null;
  }

  /** The URI of the table {@code ident} names, or null. */
  private String locate(Identifier ident) {
    List<String> parts = new ArrayList<>(Arrays.asList(ident.namespace()));
    parts.add(ident.name());
    List<String> candidates = new ArrayList<>();
    candidates.add(String.join(".", parts)); // the whole-database job's db.table
    for (int i = parts.size() - 1; i >= 1; i--) { // sub-directories for the namespace's parts
      candidates.add(String.join("/", parts.subList(0, i)) + "/"
          + String.join(".", parts.subList(i, parts.size())));
    }
    try {
      FileSystem fs = fs();
      for (String c : candidates) {
        Path p = new Path(root + "/" + c);
        if (fs.exists(new Path(p, MARKER))) {
          return p.toString();
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException("cdc_sink: cannot look for " + ident + " under " + root, e);
    }
    return null;
  }

  /** Every table under the root, as name parts (namespace then name). */
  private List<String[]> tables() {
    List<String[]> out = new ArrayList<>();
    try {
      FileSystem fs = fs();
      Path top = new Path(root);
      if (!fs.exists(top)) {
        return out;
      }
      for (FileStatus d : fs.listStatus(top)) {
        if (!d.isDirectory() || d.getPath().getName().startsWith("_")) {
          continue;
        }
        String dir = d.getPath().getName();
        if (fs.exists(new Path(d.getPath(), MARKER))) {
          out.add(dir.split("\\."));
          continue;
        }
        for (FileStatus s : fs.listStatus(d.getPath())) {
          if (s.isDirectory() && fs.exists(new Path(s.getPath(), MARKER))) {
            List<String> parts = new ArrayList<>(List.of(dir));
            parts.addAll(Arrays.asList(s.getPath().getName().split("\\.")));
            out.add(parts.toArray(new String[0]));
          }
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException("cdc_sink: cannot list the tables under " + root, e);
    }
    return out;
  }

  private FileSystem fs() throws IOException {
    Map<String, String> opts = new HashMap<>(readOptions);
    opts.put("path", root);
    ReadOptions o = ReadOptions.parse(opts);
    Configuration conf = o.hadoopConf(SparkHadoop.sessionConf());
    return new Path(o.path).getFileSystem(conf);
  }

  @Override
  public Table createTable(Identifier ident, TableInfo info) {
    throw readOnly("create table " + ident);
  }

  @Override
  public Table createTableLike(Identifier ident, TableInfo info, Table source) {
    throw readOnly("create table " + ident);
  }

  @Override
  public Table alterTable(Identifier ident, TableChange... changes) {
    throw readOnly("alter table " + ident);
  }

  @Override
  public boolean dropTable(Identifier ident) {
    throw readOnly("drop table " + ident);
  }

  @Override
  public void renameTable(Identifier oldIdent, Identifier newIdent) {
    throw readOnly("rename table " + oldIdent);
  }

  // ------------------------------------------------------------------ namespaces

  @Override
  public String[][] listNamespaces() {
    Set<List<String>> out = new LinkedHashSet<>();
    for (String[] t : tables()) {
      if (t.length > 1) {
        out.add(List.of(t[0]));
      }
    }
    return out.stream().map(l -> l.toArray(new String[0])).toArray(String[][]::new);
  }

  @Override
  public String[][] listNamespaces(String[] namespace) throws NoSuchNamespaceException {
    Set<List<String>> out = new LinkedHashSet<>();
    boolean seen = namespace.length == 0;
    for (String[] t : tables()) {
      if (t.length - 1 > namespace.length
          && Arrays.equals(Arrays.copyOf(t, namespace.length), namespace)) {
        out.add(Arrays.asList(Arrays.copyOf(t, namespace.length + 1)));
        seen = true;
      } else if (t.length - 1 == namespace.length
          && Arrays.equals(Arrays.copyOf(t, namespace.length), namespace)) {
        seen = true;
      }
    }
    if (!seen) {
      throw new NoSuchNamespaceException(namespace);
    }
    return out.stream().map(l -> l.toArray(new String[0])).toArray(String[][]::new);
  }

  @Override
  public boolean namespaceExists(String[] namespace) {
    if (namespace.length == 0) {
      return true;
    }
    for (String[] t : tables()) {
      if (t.length - 1 >= namespace.length
          && Arrays.equals(Arrays.copyOf(t, namespace.length), namespace)) {
        return true;
      }
    }
    return false;
  }

  @Override
  public Map<String, String> loadNamespaceMetadata(String[] namespace)
      throws NoSuchNamespaceException {
    if (!namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    return Map.of("location", root + (namespace.length == 0 ? "" : "/" + String.join("/", namespace)));
  }

  @Override
  public void createNamespace(String[] namespace, Map<String, String> metadata) {
    throw readOnly("create namespace " + String.join(".", namespace));
  }

  @Override
  public void alterNamespace(String[] namespace, NamespaceChange... changes) {
    throw readOnly("alter namespace " + String.join(".", namespace));
  }

  @Override
  public boolean dropNamespace(String[] namespace, boolean cascade) {
    throw readOnly("drop namespace " + String.join(".", namespace));
  }

  private UnsupportedOperationException readOnly(String what) {
    return new UnsupportedOperationException("cdc_sink: catalog " + name + " is read-only (" + what
        + "): tables are created and written by the cdc_sink sink");
  }
}
