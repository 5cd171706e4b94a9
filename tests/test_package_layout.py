"""The product apart from its test tooling: every module of ``cdc_sink`` is named in
docs/architecture.md's layer table, no source of the product speaks of the test kit's
tools, a wheel of the root project holds no test-kit, demo or broker module, and
``cdc-sink demo`` without the kit says what to install."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = REPO / "cdc_sink"
ARCHITECTURE = REPO / "docs" / "architecture.md"

#: Words only the test tooling has any business with (the kit's Docker and broker code).
TOOLING_WORDS = ("testcontainers", "debootstrap", "docker_engine", "LocalKafka")

#: Module names of the test kit that must not be in the product's wheel.
KIT_MODULES = ("broker", "kraft", "container", "handle", "docker_engine", "reference")


def _product_modules() -> list[str]:
    """Every module of the product, as its path under ``cdc_sink/`` (``storage/wal.py``)."""
    return sorted(
        p.relative_to(PRODUCT).as_posix()
        for p in PRODUCT.rglob("*.py")
        if "__pycache__" not in p.parts
    )


def _layer_table() -> list[str]:
    """The rows of the layer table (the markdown table after "Modules, lowest layer")."""
    text = ARCHITECTURE.read_text()
    start = text.index("Modules, lowest layer first")
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return rows


def _named_modules(rows: list[str]) -> set[str]:
    """The modules a layer table names: ``a.py`` or ``pkg/a.py`` in backticks, where a bare
    file name belongs to the last package (``pkg/``) named before it in its row; a
    package's own ``__init__.py`` is named by the package."""
    named: set[str] = set()
    for row in rows:
        if row.startswith("| *the test kit"):
            continue  # outside the product
        package = ""
        for token in re.findall(r"`([^`]+)`", row):
            if token.endswith("/") and re.fullmatch(r"[a-z_]+/", token):
                package = token
                named.add(f"{token}__init__.py")
            elif token.endswith(".py") and "/" in token:
                named.add(token)
            elif re.fullmatch(r"[A-Za-z0-9_]+\.py", token):
                named.add(package + token)
    return named


def test_every_module_of_the_product_is_named_in_the_architecture_layer_table() -> None:
    rows = _layer_table()
    assert rows, "docs/architecture.md has no layer table"
    named = _named_modules(rows)
    missing = [m for m in _product_modules() if m not in named]
    assert not missing, f"modules missing from docs/architecture.md's layer table: {missing}"
    assert any(row.startswith("| *the test kit") for row in rows), "no row for the test kit"


def test_no_source_of_the_product_mentions_the_test_tooling() -> None:
    offenders = []
    for path in sorted(PRODUCT.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".so", ".pyc"):
            continue
        text = path.read_text(errors="replace")
        offenders += [f"{path.relative_to(REPO)}: {word}" for word in TOOLING_WORDS if word in text]
    assert not offenders


def _wheel_names(tmp_path: Path) -> list[str]:
    """The file names in a wheel of the root project, built from a copy of its sources."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        PRODUCT, src / "cdc_sink", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp_path / "wheels"),
            str(src),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp_path / "wheels").glob("cdc_sink-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_the_wheel_of_the_product_holds_no_test_kit_demo_or_broker(tmp_path: Path) -> None:
    names = _wheel_names(tmp_path)
    assert "cdc_sink/table.py" in names  # the product is there
    packages = {n.split("/", 1)[0] for n in names}
    assert packages <= {"cdc_sink", *(p for p in packages if p.endswith(".dist-info"))}
    modules = [n for n in names if n.endswith(".py")]
    offenders = [
        n
        for n in modules
        if "/demo/" in n or Path(n).stem in KIT_MODULES or n.startswith("cdc_sink_testkit")
    ]
    assert not offenders
    pom = [n for n in names if n.endswith("pom.xml")]
    # Spark's Kafka source and Hadoop's S3A (the checkpoint on S3), no broker profile
    assert sorted(pom) == ["cdc_sink/kafka/pom.xml", "cdc_sink/kafka/s3a-pom.xml"]


# A fresh interpreter in which the test kit is not installed (a finder ahead of the others
# says it does not exist).
_WITHOUT_THE_KIT = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "cdc_sink_testkit":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
from cdc_sink.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_cdc_sink_demo_without_the_test_kit_says_what_to_install(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_THE_KIT, "demo", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert out.returncode == 1
    assert "pip install -e testkit" in out.stderr
    assert "Traceback" not in out.stderr
    assert not any(tmp_path.iterdir())  # nothing was started


def test_cdc_sink_demo_help_needs_no_test_kit() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_THE_KIT, "demo", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert "--apply-mode" in out.stdout
