package io.cdcsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;

class ReadOptionsTest {
  @Test
  void pathVersionAndColumnsAreParsedInAnyCase() {
    ReadOptions o = ReadOptions.parse(Map.of("PATH", "/t", "VersionAsOf", " 42 ", "columns", "b, a"));
    assertEquals("/t", o.path);
    assertEquals(42L, o.versionAsOf);
    assertNull(o.timestampAsOfMs);
    assertEquals(List.of("b", "a"), o.columns);
  }

  @Test
  void theSessionCatalogsLocationIsThePath() {
    assertEquals("/t", ReadOptions.parse(Map.of("location", "/t")).path);
  }

  @Test
  void noPathIsAClearError() {
    var e = assertThrows(IllegalArgumentException.class, () -> ReadOptions.parse(Map.of()));
    assertTrue(e.getMessage().contains("no table path"));
  }

  @Test
  void versionAndTimestampTogetherIsAnError() {
    var e = assertThrows(IllegalArgumentException.class,
        () -> ReadOptions.parse(Map.of("path", "/t", "versionAsOf", "1", "timestampAsOf", "0")));
    assertTrue(e.getMessage().contains("not both"));
  }

  @Test
  void malformedOptionsAreRefused() {
    assertThrows(IllegalArgumentException.class,
        () -> ReadOptions.parse(Map.of("path", "/t", "versionAsOf", "one")));
    assertThrows(IllegalArgumentException.class,
        () -> ReadOptions.parse(Map.of("path", "/t", "columns", "a,,b")));
    assertThrows(IllegalArgumentException.class,
        () -> ReadOptions.parse(Map.of("path", "/t", "columns", "a,a")));
    assertThrows(IllegalArgumentException.class,
        () -> ReadOptions.parse(Map.of("path", "/t", "timestampAsOf", "yesterday")));
  }

  @Test
  void timestampsAreIsoOrEpochMillisNaiveOnesUtc() {
    assertEquals(1_700_000_000_123L, ReadOptions.parseTimestampMs("1700000000123"));
    assertEquals(1_700_000_000_123L, ReadOptions.parseTimestampMs("2023-11-14T22:13:20.123Z"));
    assertEquals(1_700_000_000_123L, ReadOptions.parseTimestampMs("2023-11-14T22:13:20.123+00:00"));
    assertEquals(1_700_000_000_123L, ReadOptions.parseTimestampMs("2023-11-15T00:13:20.123+02:00"));
    assertEquals(1_700_000_000_123L, ReadOptions.parseTimestampMs("2023-11-14 22:13:20.123"));
    assertEquals(1_699_920_000_000L, ReadOptions.parseTimestampMs("2023-11-14"));
  }

  @Test
  void anS3TableIsReadThroughS3aWithItsStorageOptionsScopedToItsBucket() {
    ReadOptions o = ReadOptions.parse(Map.of(
        "path", "s3://lake/db/t",
        "storage.endpoint", "http://127.0.0.1:8333",
        "storage.region", "us-east-1",
        "storage.access_key_id", "AK",
        "storage.secret_access_key", "SK"));
    assertEquals("s3a://lake/db/t", o.path);
    Configuration conf = o.hadoopConf(new Configuration(false));
    assertEquals("http://127.0.0.1:8333", conf.get("fs.s3a.bucket.lake.endpoint"));
    assertEquals("us-east-1", conf.get("fs.s3a.bucket.lake.endpoint.region"));
    assertEquals("true", conf.get("fs.s3a.bucket.lake.path.style.access"));
    assertEquals("false", conf.get("fs.s3a.bucket.lake.connection.ssl.enabled"));
    assertEquals("AK", conf.get("fs.s3a.bucket.lake.access.key"));
    assertFalse(o.toString().contains("SK")); // no secret in what a log may print
  }

  @Test
  void hadoopSettingsAmongTheOptionsApplyToTheRead() {
    ReadOptions o = ReadOptions.parse(Map.of(
        "path", "/t", "fs.s3a.endpoint", "e", "spark.hadoop.fs.s3a.region", "r"));
    Configuration conf = o.hadoopConf(new Configuration(false));
    assertEquals("e", conf.get("fs.s3a.endpoint"));
    assertEquals("r", conf.get("fs.s3a.region"));
  }

  @Test
  void aLocalPathIsReadableAndAnUnknownSchemeIsNot() {
    Configuration conf = new Configuration(false);
    assertTrue(ReadOptions.parse(Map.of("path", "/t")).readableByHadoop(conf));
    assertTrue(ReadOptions.parse(Map.of("path", "file:///t")).readableByHadoop(conf));
    assertFalse(ReadOptions.parse(Map.of("path", "nosuchfs://b/t")).readableByHadoop(conf));
  }
}
