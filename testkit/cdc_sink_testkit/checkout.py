"""The clone of the repository the test kit is installed from, and its ``docker/`` tools.

The kit is installed editable from a clone (``pip install -e testkit``), so the
repository's other folders are at hand: ``docker/`` holds the Dockerfiles and
``docker/images.py``, the image builder for machines without a registry, which is not a
package of its own (``docker`` is the name of the Docker SDK's package). The container
broker (:mod:`cdc_sink_testkit.kafka.container`) and ``tests/docker`` load it with
:func:`docker_images`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["DOCKER_IMAGES_MODULE", "docker_images", "repo_root"]

#: The name ``docker/images.py`` is imported under (in :data:`sys.modules`).
DOCKER_IMAGES_MODULE = "cdc_sink_docker_images"


def repo_root() -> Path | None:
    """The clone the kit is installed from, when it holds ``docker/Dockerfile`` (else None:
    a non-editable install, or a copy without ``docker/``)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "docker" / "Dockerfile").is_file() else None


def docker_images() -> ModuleType:
    """``docker/images.py`` of the clone, imported once.

    Raises:
        FileNotFoundError: The kit is not installed from a clone that has it.
    """
    loaded = sys.modules.get(DOCKER_IMAGES_MODULE)
    if loaded is not None:
        return loaded
    root = repo_root()
    path = None if root is None else root / "docker" / "images.py"
    if path is None or not path.is_file():
        raise FileNotFoundError(
            "docker/images.py not found: install the test kit from a clone (pip install -e testkit)"
        )
    spec = importlib.util.spec_from_file_location(DOCKER_IMAGES_MODULE, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[DOCKER_IMAGES_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[DOCKER_IMAGES_MODULE]
        raise
    return module
