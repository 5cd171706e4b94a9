package io.cdcsink.spark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * cdc_sink's SQL extensions: the table-valued function {@code table_changes(table, start [,
 * end])} ({@link TableChanges}), a table's change feed in SQL, and a catalog table read with
 * the {@code readChangeFeed} option as its change feed ({@link ChangeFeedRelations}).
 *
 * <pre>
 * spark.sql.extensions=io.cdcsink.spark.CdcSinkExtensions
 * SELECT * FROM table_changes('cdc.inventory.orders', 5, 9)          -- versions 5..9
 * SELECT * FROM table_changes('/lake/inventory.orders', '2026-12-06 10:00:00')
 * SELECT * FROM cdc.inventory.orders WITH ('readChangeFeed' = 'true', 'startingVersion' = '5')
 * </pre>
 */
public final class CdcSinkExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectTableFunction(TableChanges.description());
    extensions.injectResolutionRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        return new ChangeFeedRelations();
      }
    });
    return BoxedUnit.UNIT;
  }
}
