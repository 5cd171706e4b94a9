# cdc_sink: two commands do all the set-up on a fresh machine.
#   make demo   - the main job on embedded defaults (local Kafka + Spark)
#   make test   - every test: unit, model-based, crash, integration (real Kafka + Spark)
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: install demo test unit lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check cdc_sink tests benchmarks streaming_jobs
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(PY) -m pytest -q -m "not integration"

test: $(STAMP) lint
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m cdc_sink.cli demo

bench: $(STAMP)
	$(PY) benchmarks/engine.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
