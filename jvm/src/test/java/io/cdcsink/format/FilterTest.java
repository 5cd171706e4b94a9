package io.cdcsink.format;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Page statistics and the bucket function of {@link Filter}. */
class FilterTest {
  private static final JsonNodeFactory J = JsonNodeFactory.instance;

  private static long hash1(Object physical, String type) {
    return Filter.hashValue(physical, type, 42L);
  }

  @Test
  void theBucketFunctionMatchesTheSpecsTestVectors() {
    assertEquals(-6698625589789238999L, hash1(BigInteger.ONE, "int32"));
    assertEquals(-7001672635703045582L, hash1(BigInteger.ONE, "int64"));
    assertEquals(1423657621850124518L, hash1("abc".getBytes(StandardCharsets.UTF_8), "string"));
    assertEquals(-7444071767201028348L, hash1(new byte[0], "string"));
    assertEquals(3242891694566951137L, hash1(Filter.physical(LocalDate.of(2024, 1, 1), "date32"), "date32"));
    assertEquals(-3802813071951760351L,
        hash1(Filter.physical(new BigDecimal("12.34"), "decimal128(10, 2)"), "decimal128(10, 2)"));
    assertEquals(804797035677707363L,
        hash1(Filter.physical(new BigDecimal("12.34"), "decimal128(20, 2)"), "decimal128(20, 2)"));
    assertEquals(-5252525462095825812L, hash1(-0.0, "float64"));
    assertEquals(-6698625589789238999L, hash1(true, "bool"));
    long h = Filter.hashValue(BigInteger.valueOf(42), "int64", 42L);
    assertEquals(-5675976695912159569L, Filter.hashValue("x".getBytes(StandardCharsets.UTF_8), "string", h));
    byte[] longer = new byte[100];
    for (int i = 0; i < longer.length; i++) longer[i] = (byte) i;
    assertEquals(XxHash64.hash(longer, 0, 100, 7), XxHash64.hash(longer.clone(), 0, 100, 7));
  }

  @Test
  void keyLookupsNameTheirBuckets() {
    TableSchema s = new TableSchema(List.of(new Column(0, "id", "int64", false, true, null),
        new Column(1, "v", "string", true, false, null)), List.of("id"), 4, 0, null);
    assertArrayEquals(new int[] {2}, Filter.buckets(s, List.of(new Filter("id", "=", 1L))));
    assertArrayEquals(new int[] {0, 1, 2, 3}, Filter.buckets(s, List.of(new Filter("v", "=", "a"))));
    assertArrayEquals(new int[] {0, 1, 2, 3}, Filter.buckets(s, List.of(new Filter("id", ">", 1L))));
    assertEquals(0, Filter.buckets(s, List.of(new Filter("id", "in", List.of()))).length);
    assertEquals(0, Filter.buckets(s, List.of(new Filter("id", "=", 1L), new Filter("id", "=", 2L))).length);
  }

  @Test
  void statisticsExcludeOnlyWhatTheyProve() {
    JsonNode lo = J.numberNode(10);
    JsonNode hi = J.numberNode(20);
    assertFalse(new Filter("c", "<", 10L).mayMatch(lo, hi, 8, 0, "int64"));
    assertTrue(new Filter("c", "<=", 10L).mayMatch(lo, hi, 8, 0, "int64"));
    assertFalse(new Filter("c", ">", 20L).mayMatch(lo, hi, 8, 0, "int64"));
    assertFalse(new Filter("c", "=", 21L).mayMatch(lo, hi, 8, 0, "int64"));
    assertTrue(new Filter("c", "in", List.of(3L, 15L)).mayMatch(lo, hi, 8, 0, "int64"));
    assertFalse(new Filter("c", "is_null", null).mayMatch(lo, hi, 8, 0, "int64"));
    assertFalse(new Filter("c", "=", 15L).mayMatch(J.nullNode(), J.nullNode(), 8, 8, "int64"));
    assertTrue(new Filter("c", "=", 15L).mayMatch(J.nullNode(), J.nullNode(), 8, 0, "int64"));
    assertFalse(new Filter("c", "!=", 10L).mayMatch(lo, lo, 8, 0, "int64"));
    // stats_format 1 and physical forms
    JsonNode d = J.objectNode().put("date", "2024-01-02");
    assertFalse(new Filter("c", ">", LocalDate.of(2024, 1, 2)).mayMatch(d, d, 1, 0, "date32"));
    JsonNode dec = J.objectNode().put("dec", "1.50");
    assertTrue(new Filter("c", "=", new BigDecimal("1.5")).mayMatch(dec, dec, 1, 0, "decimal128(10, 2)"));
    assertFalse(new Filter("c", "=", new BigDecimal("1.51")).mayMatch(dec, dec, 1, 0, "decimal128(10, 2)"));
    assertTrue(new Filter("c", "=", new BigDecimal("1.505")).mayMatch(dec, dec, 1, 0, "decimal128(10, 2)"));
    assertFalse(new Filter("c", ">", "b").mayMatch(J.textNode("a"), J.textNode("b"), 2, 0, "string"));
    assertTrue(new Filter("c", "=", 0.0).mayMatch(J.numberNode(-0.0), J.numberNode(-0.0), 1, 0, "float64"));
  }
}
