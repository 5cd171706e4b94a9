"""Grafana provisioning files of dashboards/provisioning/: a Prometheus data source and a
file provider that loads the dashboards folder, in the format Grafana reads as is."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from tests.dashboards.dashboard_files import DASHBOARD_JSON, PROVISIONING, committed_dashboard


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), path
    return data


def _files(kind: str) -> list[Path]:
    found = sorted((PROVISIONING / kind).glob("*.y*ml"))
    assert found, f"no provisioning file in {PROVISIONING / kind}"
    return found


def test_datasource_is_a_default_prometheus_with_an_http_url() -> None:
    sources = [ds for path in _files("datasources") for ds in _load(path)["datasources"]]
    for path in _files("datasources"):
        assert _load(path)["apiVersion"] == 1
    assert len(sources) == 1
    ds = sources[0]
    assert ds["type"] == "prometheus"
    assert ds["access"] == "proxy"  # Grafana's server queries Prometheus, not the browser
    assert ds["isDefault"] is True
    assert ds["name"] and ds["uid"]
    url = urlparse(ds["url"])
    assert url.scheme == "http" and url.hostname and url.port == 9090
    assert ds["jsonData"]["timeInterval"].endswith("s")
    # the dashboard's datasource variable preselects this data source
    variables = {v["name"]: v for v in committed_dashboard()["templating"]["list"]}
    assert variables["datasource"]["current"]["value"] == ds["name"]


def test_dashboard_provider_loads_the_dashboards_folder_from_files() -> None:
    providers = [p for path in _files("dashboards") for p in _load(path)["providers"]]
    for path in _files("dashboards"):
        assert _load(path)["apiVersion"] == 1
    assert len(providers) == 1
    p = providers[0]
    assert p["type"] == "file"
    assert p["name"] and p["folder"]
    assert p["orgId"] == 1
    assert isinstance(p["updateIntervalSeconds"], int)
    path = p["options"]["path"]
    assert path.startswith("/")  # Grafana resolves relative paths against its own cwd
    assert p["options"]["foldersFromFilesStructure"] is False


def test_dashboard_json_is_loadable_by_a_file_provider() -> None:
    """What Grafana's file provider needs of a dashboard file: JSON with a title, a uid
    and a schema version, no instance-specific numeric id, panels."""
    dash = committed_dashboard()
    assert DASHBOARD_JSON.parent == PROVISIONING.parent
    assert dash["title"] and dash["uid"] == "cdc-sink-overview"
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    assert dash.get("id") is None
    assert dash["panels"]
