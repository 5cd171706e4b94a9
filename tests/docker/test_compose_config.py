"""docker/compose.yaml: ``docker-compose config`` accepts it, what it mounts for
Prometheus and Grafana is where dashboards/ expects it, and its defaults are closed:
Grafana has no default admin password (compose refuses to start without
``GRAFANA_ADMIN_PASSWORD``) and every listener binds 127.0.0.1."""

from __future__ import annotations

import os
import secrets
import subprocess
from typing import Any

import yaml

from tests.docker.engine import COMPOSE_FILE, REPO, require_engine


def _run_config(compose: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*compose, "-f", str(COMPOSE_FILE), "config"],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def _config(compose: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """``compose config`` of the file (with a random Grafana admin password unless
    ``env`` names one)."""
    env = dict(os.environ if env is None else env)
    env.setdefault("GRAFANA_ADMIN_PASSWORD", secrets.token_urlsafe(16))
    proc = _run_config(compose, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = yaml.safe_load(proc.stdout)
    assert isinstance(data, dict)
    return data


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """target -> source of a service's volumes (compose 1.29 prints the short syntax,
    compose v2 the long one)."""
    out: dict[str, str] = {}
    for m in service.get("volumes", []):
        if isinstance(m, str):
            source, target = m.split(":")[:2]
        else:
            source, target = m["source"], m["target"]
        out[target] = source
    return out


def test_compose_config_accepts_the_file_and_every_service_uses_the_host_network() -> None:
    cfg = _config(require_engine())
    services = cfg["services"]
    assert set(services) == {
        "kafka",
        "topics",
        "producer",
        "job",
        "prometheus",
        "grafana",
        "registry",
    }
    # the schema registry only with the Avro profile, and on loopback
    assert services["registry"]["profiles"] == ["avro"]
    assert services["registry"]["environment"]["REGISTRY_HOST"] == "127.0.0.1"
    assert services["registry"]["environment"]["QUARKUS_HTTP_HOST"] == "127.0.0.1"
    for name, svc in services.items():
        assert svc.get("network_mode") == "host", name
        assert "ports" not in svc, name
    assert services["job"]["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    mounts = _mounts(services["job"])
    named = set(cfg["volumes"])
    assert mounts["/data"] in named and mounts["/checkpoints"] in named


def test_image_names_and_ports_are_variables() -> None:
    env = dict(
        os.environ,
        KAFKA_IMAGE="local/kafka:1",
        JOB_IMAGE="local/job:1",
        PROMETHEUS_IMAGE="local/prom:1",
        GRAFANA_IMAGE="local/grafana:1",
        REGISTRY_IMAGE="local/registry:1",
        KAFKA_PORT="19092",
        METRICS_PORT="19108",
        REGISTRY_PORT="18081",
        ORDERS_FORMAT="debezium-avro",
        CLIENT_PROPERTIES="/opt/cdc_sink/avro.properties",
    )
    services = _config(require_engine(), env)["services"]
    assert services["kafka"]["image"] == "local/kafka:1"
    for name in ("topics", "producer", "job"):
        assert services[name]["image"] == "local/job:1"
    assert services["prometheus"]["image"] == "local/prom:1"
    assert services["grafana"]["image"] == "local/grafana:1"
    assert "PLAINTEXT://127.0.0.1:19092" in services["kafka"]["environment"]["KAFKA_LISTENERS"]
    assert "127.0.0.1:19092" in services["job"]["command"]
    assert services["job"]["environment"]["CDC_SINK_METRICS_PORT"] == "19108"
    assert services["registry"]["image"] == "local/registry:1"
    assert services["registry"]["environment"]["REGISTRY_PORT"] == "18081"
    for name in ("producer", "job"):
        env_of = services[name]["environment"]
        assert env_of["REGISTRY_URL"] == "http://127.0.0.1:18081/apis/ccompat/v7"
        assert env_of["CDC_SINK_CLIENT_PROPERTIES"] == "/opt/cdc_sink/avro.properties"
        assert "debezium-avro" in services[name]["command"]


def test_grafana_and_prometheus_mount_what_dashboards_provisions() -> None:
    services = _config(require_engine())["services"]
    graf = _mounts(services["grafana"])
    provisioning = REPO / "dashboards" / "provisioning"
    assert graf["/etc/grafana/provisioning"] == str(provisioning)
    # the file provider's path is where the dashboards folder is mounted
    provider = yaml.safe_load((provisioning / "dashboards" / "cdc_sink.yaml").read_text())[
        "providers"
    ][0]
    assert graf[provider["options"]["path"]] == str(REPO / "dashboards")
    assert list((REPO / "dashboards").glob("*.json")), "no dashboard JSON to provision"
    env = services["grafana"]["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    # the provisioned data source is the compose's Prometheus
    ds = yaml.safe_load((provisioning / "datasources" / "cdc_sink_prometheus.yaml").read_text())[
        "datasources"
    ][0]
    assert any(
        a.endswith(f"127.0.0.1:{ds['url'].rsplit(':', 1)[1]}")
        for a in services["prometheus"]["command"]
    )

    prom = _mounts(services["prometheus"])
    rules = REPO / "dashboards" / "alerts" / "cdc_sink_rules.yml"
    assert prom["/etc/prometheus/rules/cdc_sink_rules.yml"] == str(rules)
    assert yaml.safe_load(rules.read_text())["groups"]
    prom_cfg = yaml.safe_load((REPO / "docker" / "prometheus.yml").read_text())
    assert prom_cfg["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    target = prom_cfg["scrape_configs"][0]["static_configs"][0]["targets"][0]
    assert target == f"127.0.0.1:{services['job']['environment']['CDC_SINK_METRICS_PORT']}"


def test_grafana_has_no_default_admin_password() -> None:
    compose = require_engine()
    env = {k: v for k, v in os.environ.items() if k != "GRAFANA_ADMIN_PASSWORD"}
    for unset in (env, {**env, "GRAFANA_ADMIN_PASSWORD": ""}):
        proc = _run_config(compose, unset)
        assert proc.returncode != 0
        assert "GRAFANA_ADMIN_PASSWORD" in proc.stdout + proc.stderr
    password = secrets.token_urlsafe(16)
    services = _config(compose, {**env, "GRAFANA_ADMIN_PASSWORD": password})["services"]
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == password


def test_every_listener_binds_loopback() -> None:
    services = _config(require_engine())["services"]
    kafka = services["kafka"]["environment"]
    for key in ("KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS"):
        for listener in kafka[key].split(","):
            assert listener.split("://", 1)[1].startswith("127.0.0.1:"), (key, listener)
    assert kafka["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith("1@127.0.0.1:")
    assert services["job"]["environment"]["CDC_SINK_METRICS_HOST"] == "127.0.0.1"
    assert services["grafana"]["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    prometheus = services["prometheus"]["command"]
    assert any(a.startswith("--web.listen-address=127.0.0.1:") for a in prometheus)
