"""The object-store backends every contract test runs on: a local directory and the S3
endpoint of a real SeaweedFS server (started once per test session, stopped at its end;
each test gets a prefix of its own in the server's bucket)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cdc_sink.storage.objectstore import ObjectStore, store_for
from cdc_sink_testkit.s3 import SeaweedS3

BACKENDS = ("local", "s3")


@dataclass(frozen=True)
class Target:
    """Where a test's store lives: what any process needs to open it."""

    backend: str
    url: str
    options: dict[str, str] = field(default_factory=dict)

    def open(self, *, check_conditional_writes: bool = True) -> ObjectStore:
        """A new store on the target."""
        return store_for(
            self.url, self.options or None, check_conditional_writes=check_conditional_writes
        )


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """A fresh, empty place on each backend: a directory, or a new prefix on S3."""
    if request.param == "local":
        return Target("local", str(tmp_path / "store"))
    server: SeaweedS3 = request.getfixturevalue("s3_server")
    return Target("s3", server.url(f"t-{uuid.uuid4().hex}"), server.storage_options())


@pytest.fixture
def store(target: Target) -> ObjectStore:
    """The store of :func:`target`, opened (on S3: after the conditional-create probe)."""
    return target.open()
