package io.cdcsink.format;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Iterator;
import java.util.Map;
import java.util.TreeMap;

/** A log entry (docs/format.md §8.2): the fields a reader needs. */
final class LogEntry {
  final long version;
  final String kind;
  final int schemaId;
  final long commitTimeMs;
  final String appId;
  final Long batchId;
  /** bucket -> segment path (or null) */
  final Map<Integer, String> segments = new TreeMap<>();
  /** bucket -> snapshot path (or null) */
  final Map<Integer, String> snapshots = new TreeMap<>();
  /** bucket -> pre-images path (§12), for the buckets whose reference names one */
  final Map<Integer, String> images = new TreeMap<>();

  private LogEntry(long version, String kind, int schemaId, long commitTimeMs, String appId, Long batchId) {
    this.version = version;
    this.kind = kind;
    this.schemaId = schemaId;
    this.commitTimeMs = commitTimeMs;
    this.appId = appId;
    this.batchId = batchId;
  }

  static String name(long v) {
    return String.format("_log/%020d.json", v);
  }

  /** Parses an entry's payload; a field that does not fit is corruption. */
  static LogEntry parse(byte[] d, int off, int len, String path, long expectVersion) throws CdcSinkFormatException {
    JsonNode o = Json.parse(d, off, len, path);
    long version = Json.integer(o, "version", path);
    if (version != expectVersion) {
      throw new CdcSinkFormatException(path + ": entry names version " + version + ", not " + expectVersion);
    }
    JsonNode k = o.get("kind");
    String kind = k == null || k.isNull() ? "data" : k.asText();
    int schemaId = (int) Json.integer(o, "schema_id", path);
    long ct = Json.integer(o, "commit_time_ms", path);
    JsonNode a = o.get("app_id");
    String appId = a == null || a.isNull() ? null : a.asText();
    Long batchId = Json.optInteger(o, "batch_id", path);
    LogEntry e = new LogEntry(version, kind, schemaId, ct, appId, batchId);
    JsonNode buckets = o.get("buckets");
    if (buckets != null && !buckets.isNull()) {
      if (!buckets.isObject()) throw new CdcSinkFormatException(path + ": buckets is not an object");
      Iterator<Map.Entry<String, JsonNode>> it = buckets.fields();
      while (it.hasNext()) {
        Map.Entry<String, JsonNode> b = it.next();
        int bucket = Json.idKey(b.getKey(), "bucket", path);
        JsonNode ref = b.getValue();
        JsonNode seg = ref.get("segment");
        if (seg != null && !seg.isNull()) e.segments.put(bucket, Json.path(seg, Json.SEGMENT, "segment", path));
        JsonNode snap = ref.get("snapshot");
        if (snap != null && !snap.isNull()) e.snapshots.put(bucket, Json.path(snap, Json.SNAPSHOT, "snapshot", path));
        JsonNode img = ref.get("images");
        if (img != null && !img.isNull()) e.images.put(bucket, Json.path(img, Json.IMAGES, "images", path));
      }
    }
    JsonNode rej = o.get("rejects");
    if (rej != null && !rej.isNull()) Json.path(rej, Json.REJECTS, "rejects", path);
    return e;
  }
}
