package io.cdcsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class ChangeFeedOptionsTest {
  private static String error(Map<String, String> options) {
    return assertThrows(IllegalArgumentException.class, () -> ChangeFeedOptions.parse(options))
        .getMessage();
  }

  @Test
  void theChangeFeedIsAskedForByReadChangeFeed() {
    assertTrue(ChangeFeedOptions.wanted(Map.of("READCHANGEFEED", " true")));
    assertFalse(ChangeFeedOptions.wanted(Map.of("readChangeFeed", "FALSE")));
    assertFalse(ChangeFeedOptions.wanted(Map.of()));
    var e = assertThrows(IllegalArgumentException.class,
        () -> ChangeFeedOptions.wanted(Map.of("readChangeFeed", "Yes")));
    assertEquals("cdc_sink: readChangeFeed must be true or false, got 'yes'", e.getMessage());
  }

  @Test
  void versionsColumnsAndMasksAreParsedInAnyCase() {
    ChangeFeedOptions o = ChangeFeedOptions.parse(Map.of("path", "/t", "STARTINGVERSION", " 5 ",
        "endingVersion", "9", "columns", "b, a,b", "setColumnsOnly", "True"));
    assertEquals("/t", o.table.path);
    assertEquals(5L, o.startingVersion);
    assertEquals(9L, o.endingVersion);
    assertNull(o.startingTimestampMs);
    assertNull(o.endingTimestampMs);
    assertEquals(List.of("b", "a", "b"), o.columns); // repeated names: the plan drops them
    assertTrue(o.setColumnsOnly);
    ChangeFeedOptions all = ChangeFeedOptions.parse(Map.of("path", "/t", "startingVersion", "0"));
    assertNull(all.columns);
    assertNull(all.endingVersion);
    assertFalse(all.setColumnsOnly);
  }

  @Test
  void timestampsAreIsoNaiveUtcOrEpochMillis() {
    ChangeFeedOptions o = ChangeFeedOptions.parse(Map.of("path", "/t",
        "startingTimestamp", "2023-11-14 22:13:20.123", "endingTimestamp", "1700000000999"));
    assertEquals(1_700_000_000_123L, o.startingTimestampMs);
    assertEquals(1_700_000_000_999L, o.endingTimestampMs);
    assertNull(o.startingVersion);
  }

  @Test
  void badOptionsGiveThePythonSourcesMessages() {
    assertEquals("cdc_sink: no table path; use spark.read.format(\"cdc_sink\").load(path)",
        error(Map.of("startingVersion", "1")));
    assertEquals("cdc_sink: readChangeFeed needs startingVersion or startingTimestamp",
        error(Map.of("path", "/t", "endingVersion", "3")));
    assertEquals("cdc_sink: startingVersion must be an integer, got 'five'",
        error(Map.of("path", "/t", "startingVersion", "five")));
    assertEquals("cdc_sink: endingVersion must be an integer, got '1.5'",
        error(Map.of("path", "/t", "startingVersion", "1", "endingVersion", "1.5")));
    assertEquals("cdc_sink: give startingVersion or startingTimestamp, not both",
        error(Map.of("path", "/t", "startingVersion", "1", "startingTimestamp", "0")));
    assertEquals("cdc_sink: endingTimestamp is no timestamp: 'yesterday'",
        error(Map.of("path", "/t", "startingVersion", "1", "endingTimestamp", "yesterday")));
    assertEquals("cdc_sink: setColumnsOnly must be true or false, got 'maybe'",
        error(Map.of("path", "/t", "startingVersion", "1", "setColumnsOnly", "Maybe")));
  }
}
