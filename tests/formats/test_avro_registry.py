"""The test kit's schema registry: which release runs on which Java, and the running one
(started once per session by the ``schema_registry`` fixture) behaves like Confluent's."""

from __future__ import annotations

import pytest

from cdc_sink_testkit.registry import Java, LocalRegistry, RegistryStartError, choose_release


def test_java_21_or_newer_runs_apicurio_3_else_apicurio_2_on_java_17():
    j17, j21, j25 = Java("/a/java", 17), Java("/b/java", 21), Java("/c/java", 25)
    assert choose_release([j25, j17]) == (3, j25)
    assert choose_release([j17, j21]) == (3, j21)
    assert choose_release([j17]) == (2, j17)
    with pytest.raises(RegistryStartError, match="Java 17 or newer"):
        choose_release([Java("/d/java", 11)])
    with pytest.raises(RegistryStartError, match="found: none"):
        choose_release([])


def test_the_session_registry_is_backward_compatible_and_assigns_ids(
    schema_registry: LocalRegistry,
):
    assert schema_registry.request("GET", "/config") == {"compatibilityLevel": "BACKWARD"}
    v1 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    sid = schema_registry.register("kit-check-value", v1)
    got = schema_registry.request("GET", f"/schemas/ids/{sid}")
    assert isinstance(got, dict) and '"name":"a"' in got["schema"].replace(" ", "")
    # BACKWARD: a new required field without a default cannot read old data
    bad = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "int"}],
    }
    with pytest.raises(OSError, match="409"):
        schema_registry.register("kit-check-value", bad)
