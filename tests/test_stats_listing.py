"""``cdc-sink stats ROOT``: given a root holding tables (a directory whose children, or
children's children, are tables), it lists each table with its version, live rows, last
commit time and schema id."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

import cdc_sink
from cdc_sink.cli import main
from cdc_sink_testkit.s3 import SeaweedS3
from tests.fixtures import ID_V

SCHEMA = {**ID_V, "num_buckets": 2}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Three tables: two children of the root (one with a schema change), one nested a
    level deeper; beside them a directory that is no table, and a hidden one."""
    opts = cdc_sink.TableOptions.for_tests()
    customers = cdc_sink.create_table(tmp_path / "inventory.customers", SCHEMA, options=opts)
    customers.apply([{"op": "upsert", "key": {"id": i}, "set": {"v": "a"}} for i in range(7)])
    customers.apply([{"op": "delete", "key": {"id": 0}}])
    orders = cdc_sink.create_table(tmp_path / "inventory.orders", SCHEMA, options=opts)
    orders.apply([{"op": "upsert", "key": {"id": i}, "set": {"v": "b"}} for i in range(3)])
    orders.add_column("w", "int64")
    cdc_sink.create_table(tmp_path / "billing" / "invoices", SCHEMA, options=opts)
    (tmp_path / "notes" / "deeper").mkdir(parents=True)
    (tmp_path / ".hidden").mkdir()
    return tmp_path


def test_stats_of_a_root_lists_every_table_json(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stats", str(root), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["root"] == str(root)
    rows = {r["table"]: r for r in got["tables"]}
    assert list(rows) == ["billing/invoices", "inventory.customers", "inventory.orders"]
    for name, row in rows.items():
        table = cdc_sink.open_table(root / name)
        entry = table.log.read(table.version)
        assert row == {
            "table": name,
            "version": table.version,
            "live_rows": table.read().num_rows,
            "commit_time_ms": entry.commit_time_ms,
            "schema_id": table.schema.schema_id,
        }
    assert [rows[n]["live_rows"] for n in rows] == [0, 6, 3]
    assert [rows[n]["version"] for n in rows] == [0, 2, 2]
    assert [rows[n]["schema_id"] for n in rows] == [0, 0, 1]


def test_stats_of_a_root_prints_a_table_per_line(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stats", str(root)]) == 0
    out = capsys.readouterr().out
    assert "tables under" in out and "last commit (UTC)" in out
    cells = [[c.strip() for c in ln.split("│")[1:-1]] for ln in out.splitlines() if "│" in ln]
    rows = {c[0]: c[1:] for c in cells if c[0] and c[0] != "table"}
    assert list(rows) == ["billing/invoices", "inventory.customers", "inventory.orders"]
    table = cdc_sink.open_table(root / "inventory.customers")
    when = dt.datetime.fromtimestamp(
        table.log.read(table.version).commit_time_ms / 1000, dt.timezone.utc
    )
    version, rows_, commit, schema_id = rows["inventory.customers"]
    assert (version, rows_, schema_id) == ("2", "6", "0")
    assert commit == when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    assert rows["inventory.orders"][3] == "1"


def test_a_table_that_cannot_be_read_is_shown_and_fails_the_command(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = root / "inventory.broken"
    broken.mkdir()
    # what a create_table that crashed before version 0 leaves: the identity file alone
    (broken / "_table.json").write_bytes((root / "inventory.orders" / "_table.json").read_bytes())
    assert main(["stats", str(root), "--json"]) == 1
    rows = {r["table"]: r for r in json.loads(capsys.readouterr().out)["tables"]}
    assert "never created completely" in rows["inventory.broken"]["error"]
    assert rows["inventory.orders"]["live_rows"] == 3


def test_a_directory_without_tables_is_still_no_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert main(["stats", str(tmp_path)]) == 1
    assert "no cdc_sink table" in capsys.readouterr().err


def test_stats_of_an_object_store_root(
    s3_server: SeaweedS3, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On S3 the tables are found by one listing of the root's prefix; the command takes
    its credentials from the environment."""
    root = s3_server.url(f"root-{uuid.uuid4().hex}")
    options = s3_server.storage_options()
    opts = cdc_sink.TableOptions.for_tests()
    for name, n in (("inventory.customers", 4), ("inventory.orders", 2), ("db/t", 1)):
        t = cdc_sink.create_table(f"{root}/{name}", SCHEMA, options=opts, storage_options=options)
        t.apply([{"op": "upsert", "key": {"id": i}, "set": {"v": "x"}} for i in range(n)])
    env = {
        "AWS_ENDPOINT_URL": options["endpoint"],
        "AWS_REGION": options["region"],
        "AWS_ACCESS_KEY_ID": options["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": options["secret_access_key"],
        "AWS_ALLOW_HTTP": "true",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["stats", root, "--json"]) == 0, capsys.readouterr().err
    rows = {r["table"]: r for r in json.loads(capsys.readouterr().out)["tables"]}
    assert {n: (r["version"], r["live_rows"]) for n, r in rows.items()} == {
        "db/t": (1, 1),
        "inventory.customers": (1, 4),
        "inventory.orders": (1, 2),
    }
