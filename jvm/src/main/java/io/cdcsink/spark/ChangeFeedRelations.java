package io.cdcsink.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import scala.Option;
import scala.PartialFunction$;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

/**
 * An analyzer rule: a catalog's cdc_sink table read with {@code readChangeFeed=true} among the
 * read's options is its change feed, as in Delta. {@code spark.read.option("readChangeFeed",
 * "true").option("startingVersion", 5).table("cdc.inventory.orders")}, or in SQL {@code SELECT
 * … FROM cdc.inventory.orders WITH ('readChangeFeed' = 'true', 'startingVersion' = '5')}: the
 * relation of the table ({@link CdcSinkTable}) becomes that of its change feed
 * ({@link ChangeFeedTable}) with the same options. The feed's columns the table also has keep
 * their attribute ids, so a query's references resolved against the table stay valid.
 */
final class ChangeFeedRelations extends Rule<LogicalPlan> {
  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    return plan.resolveOperatorsUp(PartialFunction$.MODULE$.fromFunction(
        new AbstractFunction1<LogicalPlan, LogicalPlan>() {
          @Override
          public LogicalPlan apply(LogicalPlan node) {
            return node instanceof DataSourceV2Relation r && r.table() instanceof CdcSinkTable
                && ChangeFeedOptions.wanted(r.options()) ? feedOf(r) : node;
          }
        }));
  }

  private static LogicalPlan feedOf(DataSourceV2Relation r) {
    Map<String, String> options = new HashMap<>(r.options().asCaseSensitiveMap());
    options.putAll(TableChanges.locationOf((CdcSinkTable) r.table()));
    DataSourceV2Relation feed = TableChanges.relation(options, r.catalog(), r.identifier());
    Map<String, AttributeReference> before = new HashMap<>();
    for (AttributeReference a : CollectionConverters.asJava(r.output())) {
      before.put(a.name(), a);
    }
    List<AttributeReference> output = new ArrayList<>();
    for (AttributeReference a : CollectionConverters.asJava(feed.output())) {
      AttributeReference old = before.get(a.name());
      output.add(old != null && old.dataType().equals(a.dataType()) ? a.withExprId(old.exprId()) : a);
    }
    return feed.copy(feed.table(), CollectionConverters.asScala(output).toList(), r.catalog(),
        r.identifier(), feed.options(), Option.empty());
  }
}
