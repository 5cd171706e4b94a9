"""dashboards/alerts/cdc_sink_rules.yml: valid for Prometheus (``promtool check rules``),
and every alert fires on the synthetic series that must fire it and only on those
(``promtool test rules`` on dashboards/alerts/cdc_sink_rules_test.yml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.dashboards.dashboard_files import (
    METRICS,
    RULES,
    RULES_TEST,
    exposed_names,
    metric_names,
    promtool,
)

ALERTS = {
    "CdcSinkNoCommitWhileLagging",
    "CdcSinkFreshnessHigh",
    "CdcSinkDeadLetterRateHigh",
    "CdcSinkGcFailing",
    "CdcSinkBatchesFailing",
    "CdcSinkKafkaLagHigh",
    "CdcSinkTableStopped",
}


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [r for g in doc["groups"] for r in g["rules"]]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], capture_output=True, text=True, check=False, timeout=60
    )


def test_promtool_check_rules() -> None:
    proc = _run("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in proc.stdout


def test_promtool_test_rules() -> None:
    proc = _run("test", "rules", str(RULES_TEST))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_is_unit_tested_both_ways() -> None:
    """Each alert has a test time where it fires and one where nothing fires."""
    doc = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))
    fires: set[str] = set()
    silent: set[str] = set()
    for t in doc["tests"]:
        for case in t["alert_rule_test"]:
            (fires if case["exp_alerts"] else silent).add(case["alertname"])
    assert {r["alert"] for r in _rules()} == ALERTS
    assert fires == ALERTS
    assert silent == ALERTS


def test_rules_read_cdc_sink_metrics_and_label_table_and_app_id() -> None:
    known = set().union(*(exposed_names(m) for m in METRICS))
    for r in _rules():
        names = metric_names(r["expr"])
        assert names and names <= known, (r["alert"], names - known)
        assert r["labels"]["severity"] in ("warning", "critical")
        assert r["annotations"]["summary"] and r["annotations"]["description"]
        assert "$labels.table" in r["annotations"]["summary"]
        assert "by (table, app_id" in r["expr"]


def test_rule_tests_catch_a_wrong_threshold(tmp_path: Path) -> None:
    """promtool test rules fails when a rule's threshold moves (the tests bite)."""
    for f in (RULES, RULES_TEST):
        shutil.copy(f, tmp_path / f.name)
    broken = tmp_path / RULES.name
    text = broken.read_text(encoding="utf-8")
    assert text.count(") > 30\n") == 1
    broken.write_text(text.replace(") > 30\n", ") > 90\n"), encoding="utf-8")
    proc = _run("test", "rules", str(tmp_path / RULES_TEST.name))
    assert proc.returncode != 0
    assert "CdcSinkFreshnessHigh" in proc.stdout + proc.stderr
