package io.cdcsink.format;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.regex.Pattern;

/** JSON payloads (docs/format.md §5.2) and the path kinds of §4.1. */
final class Json {
  private Json() {}

  /**
   * JSON payloads. The Python writer writes an infinite float (a float column's default, a
   * page statistic) as the non-standard {@code Infinity} / {@code -Infinity} (docs/format.md §1
   * says no value is infinite) and reads it back, so this reader accepts them too.
   */
  static final ObjectMapper MAPPER = new ObjectMapper()
      .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
      .enable(JsonParser.Feature.ALLOW_NON_NUMERIC_NUMBERS);

  static final Pattern SEGMENT = Pattern.compile("_wal/[0-9]+/[0-9]{20}-[0-9a-f]+\\.wal");
  static final Pattern SNAPSHOT = Pattern.compile("_snapshots/[0-9]+/[0-9]{20}-[0-9a-f]+\\.manifest");
  static final Pattern PAGES = Pattern.compile("_pages/[0-9]+/[0-9]{20}-[0-9a-f]+\\.pages");
  static final Pattern REJECTS = Pattern.compile("_rejects/[0-9]{20}-[0-9a-f]+\\.arrow");
  static final Pattern IMAGES = Pattern.compile("_change_data/[0-9]+/[0-9]{20}-[0-9a-f]+\\.arrow");
  static final Pattern ENTRY = Pattern.compile("[0-9]{20}\\.json");
  static final Pattern CHECKPOINT = Pattern.compile("_checkpoint\\.[0-9]{20}\\.json");

  static JsonNode parse(byte[] d, int off, int len, String path) throws CdcSinkFormatException {
    return parse(MAPPER, d, off, len, path);
  }

  static JsonNode parse(ObjectMapper mapper, byte[] d, int off, int len, String path) throws CdcSinkFormatException {
    try {
      JsonNode n = mapper.readTree(d, off, len);
      if (n == null || !n.isObject()) throw new CdcSinkFormatException(path + ": payload is not a JSON object");
      return n;
    } catch (java.io.IOException e) {
      if (e instanceof CdcSinkFormatException) throw (CdcSinkFormatException) e;
      throw new CdcSinkFormatException(path + ": payload is not valid JSON");
    }
  }

  static JsonNode parse(byte[] d, String path) throws CdcSinkFormatException {
    return parse(d, 0, d.length, path);
  }

  /** An exact integer field (a JSON integer that fits in 64 bits). */
  static long integer(JsonNode obj, String key, String path) throws CdcSinkFormatException {
    JsonNode n = obj.get(key);
    if (n == null || !n.isIntegralNumber() || !n.canConvertToLong()) {
      throw new CdcSinkFormatException(path + ": field '" + key + "' is missing or not an integer");
    }
    return n.longValue();
  }

  static Long optInteger(JsonNode obj, String key, String path) throws CdcSinkFormatException {
    JsonNode n = obj.get(key);
    if (n == null || n.isNull()) return null;
    return integer(obj, key, path);
  }

  /** An object key naming an id (a bucket's or a column's: a decimal string, §5.2). */
  static int idKey(String key, String what, String path) throws CdcSinkFormatException {
    try {
      return Integer.parseInt(key);
    } catch (NumberFormatException e) {
      throw new CdcSinkFormatException(path + ": " + what + " id " + key + " is not a number");
    }
  }

  /** A stored path of a kind, checked before it is opened (§4.1). */
  static String path(JsonNode n, Pattern kind, String kindName, String where) throws CdcSinkFormatException {
    if (n == null || !n.isTextual() || !kind.matcher(n.textValue()).matches()) {
      throw new CdcSinkFormatException(where + ": a stored path is not a valid " + kindName + " path");
    }
    return n.textValue();
  }

  /** The version of a file of kinds segment/snapshot/pages/...: the 20 digits its name starts with. */
  static long versionOf(String path) {
    String name = path.substring(path.lastIndexOf('/') + 1);
    return Long.parseLong(name.substring(0, 20));
  }
}
