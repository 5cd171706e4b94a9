# cdc_sink: two commands do all the set-up on a fresh machine.
#   make demo   - the main job on embedded defaults (local Kafka + Spark)
#   make test   - make lint, then every test: unit, model-based, crash, integration
#                 (real Kafka + Spark)
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: install demo test unit lint bench clean

# Installs every extra (spark, kafka, metrics, cli) and the dev tools; pip picks the newest
# pyspark of the supported range (docs/compatibility.md). The editable install compiles
# the JSON decoders' C scan (cdc_sink/formats/_cscan.c), the flat JSON pass
# (cdc_sink/formats/_cflat.c), the numpy buffer cache (cdc_sink/runtime/_npcache.c), the
# byte split of compressed pages (cdc_sink/storage/_cbytesplit.c) and the key index's slot
# placement, lookup probe and salted key hash (cdc_sink/tablet/_cslots.c) in place, so a change to any
# of them reinstalls.
# Then the test kit (testkit/: the local Kafka broker, Docker tooling, reference model,
# demo), a distribution of its own that the tests, benchmarks and `make demo` need.
$(STAMP): pyproject.toml testkit/pyproject.toml cdc_sink/formats/_cscan.c \
	    cdc_sink/formats/_cflat.c cdc_sink/formats/_cjson.h cdc_sink/formats/_cgrammar.h \
	    cdc_sink/runtime/_npcache.c cdc_sink/storage/_cbytesplit.c cdc_sink/tablet/_cslots.c \
	    cdc_sink/_cmodule.h
	@command -v javac >/dev/null && command -v mvn >/dev/null || { \
	  echo "installing Java 17 (a JDK: the JVM connector is compiled) and Maven with apt"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    openjdk-17-jdk-headless maven >/dev/null; }
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  echo "installing Prometheus and promtool with apt (dashboard and alert-rule tests)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends prometheus >/dev/null; }
	@command -v cc >/dev/null || { \
	  echo "installing a C compiler with apt (the C extensions; the chaos suite's fsync fault)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends gcc libc6-dev >/dev/null; }
	@$(PYTHON) -c "import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join( \
	    sysconfig.get_paths()['include'], 'Python.h')))" || { \
	  echo "installing Python's C headers with apt (the C extensions)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends python3-dev >/dev/null; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all,dev]'
	$(PY) -m pip install -q -e ./testkit
	touch $(STAMP)

# The JVM connector (jvm/: format("cdc_sink") and the SQL catalog in Java, docs/format.md
# read through Hadoop's FileSystem): Maven compiles it against the jars of the installed
# pyspark (nothing of Spark is downloaded), runs its JUnit tests, and the jar is copied
# where cdc_sink finds it (cdc_sink/spark/session.py's CONNECTOR_JAR, the wheel's package
# data); rebuilt when a source under jvm/ changes.
JAR         = cdc_sink/_jars/cdc-sink-spark.jar
JVM_SOURCES = jvm/pom.xml $(shell find jvm/src -type f 2>/dev/null)

$(JAR): $(STAMP) $(JVM_SOURCES)
	cd jvm && mvn -q -Dpyspark.jars="$$($(abspath $(PY)) -c 'import os, pyspark; \
	    print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')" package
	mkdir -p $(dir $(JAR)) && cp jvm/target/cdc-sink-spark.jar $(JAR)

install: $(STAMP) $(JAR)

# lint-imports checks the import contracts of pyproject.toml's [tool.importlinter]: the
# product never imports the test kit, lower layers never import higher ones, the engine
# never imports Spark or a Kafka client, the sink's apply modes never import each other.
lint: $(STAMP)
	$(VENV)/bin/ruff check cdc_sink testkit tests benchmarks streaming_jobs dashboards docker
	$(VENV)/bin/ruff format --check cdc_sink testkit tests benchmarks streaming_jobs dashboards docker
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: $(STAMP) $(JAR)
	$(PY) -m pytest -q -m "not integration"

test: $(STAMP) $(JAR) lint
	$(PY) -m pytest -q -p no:cacheprovider; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; fi; exit $$rc

demo: $(STAMP) $(JAR)
	$(PY) -m cdc_sink.cli demo

bench: $(STAMP)
	$(PY) benchmarks/engine.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache jvm/target $(JAR)
