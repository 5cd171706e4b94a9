"""Child processes of the race tests (a module of its own: spawned children import it)."""

from __future__ import annotations

from typing import Any

from cdc_sink.storage.objectstore import ObjectExists, store_for


def race_put_if_absent(
    url: str,
    options: dict[str, str] | None,
    keys: list[str],
    racer: int,
    barrier: Any,
    results: Any,
) -> None:
    """For each key in turn: wait for every racer at ``barrier``, then try to create the
    key with this racer's payload; report ``(key, racer, "won" | "lost" | error)``."""
    store = store_for(url, options, check_conditional_writes=False)
    for key in keys:
        barrier.wait(timeout=120)
        try:
            store.put_if_absent(key, payload(racer))
            outcome = "won"
        except ObjectExists:
            outcome = "lost"
        except Exception as exc:  # reported, so the test names it
            outcome = f"error: {type(exc).__name__}: {exc}"
        results.put((key, racer, outcome))


def payload(racer: int) -> bytes:
    """What racer ``racer`` writes."""
    return f"written by racer {racer}".encode()
