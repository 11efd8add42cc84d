# duet: setup, run, test. GNU make.
#   make setup                 venv + project (editable, dev extras) + the JVM jars (Maven)
#                              + class-data-sharing archives of the broker's and Spark's JVMs
#                              + headless Chromium and its driver (Debian packages, browser tests)
#                              + Debian's PostgreSQL server (Dagster's storage in the tests)
#                              + SeaweedFS (weed, built from its pinned Go module: the object store)
#   make run ARGS="..."        .venv/bin/duet run ARGS
#   make test PYTEST_ARGS=...  pytest (TEST_WORKERS=N: in N pytest-xdist workers, one test
#                              file per worker at a time; ~33 min with 2 on 2 cores)
#   make clean                 remove the copied jars and caches (not the venv, not the lake)
#   make distclean             clean, and remove the venv

SHELL := /bin/bash
.DEFAULT_GOAL := test

# The venv's interpreter: the distribution's CPython 3.11+ when there is one (Debian builds
# it with PGO and LTO and links it statically: the flights speed phase spends ~17 % less CPU
# than on a default pyenv build, which is unoptimized and links libpython as a shared
# library; see docs/scale-and-benchmarks.md, "The full year"), else python3 on PATH. Override: make setup PYTHON=...
SYSTEM_PYTHON := $(shell /usr/bin/python3 -c 'import sys; print(sys.executable if sys.version_info >= (3, 11) else "")' 2>/dev/null)
PYTHON ?= $(or $(SYSTEM_PYTHON),python3)
VENV := .venv
DUET_HOME ?= $(CURDIR)/.duet
JARS := $(DUET_HOME)/jars
MVN ?= mvn
MVN_FLAGS ?= -q -B
ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist workers of make test (0: the tests run in this process). Each worker starts its
# own broker, Spark session and browser (~3 GiB) and has its own speed-layer state root and
# DAGSTER_HOME (tests/conftest.py); --dist loadfile keeps a file's tests (and its module
# fixtures) on one worker, and --no-loadscope-reorder keeps conftest's order, the longest
# files first (tests/file_durations.json), instead of xdist's default, the files with the
# most tests first: that handed the long one-test files (the soak, the cluster faults) out
# last, and a fresh clone of 8a34636 ran its last ~20 of 51 min on one worker; longest first,
# 98031a9 took 33:21 (1,379 tests, 65.9 worker-minutes: the two workers ended together, so
# the suite itself must shrink to fit 25 min), 33f11a1 39:55 (1,383 passed, 79.0 worker-minutes,
# the CPU 90 % busy throughout by vmstat: only less work in the tests shortens it), 0446c08
# 39:49 (1,386 passed). Earlier fresh clones on this 2-core machine:
# 22:03 quiet (1,343 passed), 42:09 beside other engineers' benchmarks at load 12-20, 25:43
# at load 4-9 (1,379 passed, 5b8fa73), against 45:46 in one process on a quiet CI machine.
TEST_WORKERS ?= 2

VENV_STAMP := $(VENV)/.installed
KAFKA_STAMP := $(JARS)/kafka/.copied
DELTA_STAMP := $(JARS)/delta/.copied
BROWSER_STAMP := $(DUET_HOME)/.browser
POSTGRES_STAMP := $(DUET_HOME)/.postgres
CDS_STAMP := $(DUET_HOME)/cds/.built
# SeaweedFS's weed (the local S3-compatible object store of `duet objectstore` and the
# tests; docs/object-storage.md), built from its pinned Go module. Its go.mod has replace
# directives, so `go install module@version` refuses it: the rule downloads the module and
# builds ./weed inside it. GOTOOLCHAIN=auto fetches a newer Go when the module asks for one.
WEED_VERSION := v0.0.0-20261109003541-7506e5f91cd6
WEED := $(DUET_HOME)/bin/weed
WEED_STAMP := $(DUET_HOME)/bin/.weed-$(WEED_VERSION)
GO ?= $(shell command -v go || echo /usr/local/go/bin/go)
GO_ENV := GOTOOLCHAIN=$${GOTOOLCHAIN:-auto} GOFLAGS=-mod=mod GOPATH=$(DUET_HOME)/go GOMODCACHE=$(DUET_HOME)/go/pkg/mod GOCACHE=$(DUET_HOME)/go/cache
# Debian's chromium + chromium-driver (same version), for the browser tests.
BROWSER_PACKAGES := chromium chromium-driver fonts-dejavu-core
SUDO := $(shell test "$$(id -u)" = 0 || echo sudo)

export DUET_HOME

.PHONY: setup run test clean distclean

setup: $(VENV_STAMP) $(KAFKA_STAMP) $(DELTA_STAMP) $(BROWSER_STAMP) $(CDS_STAMP) $(POSTGRES_STAMP) $(WEED_STAMP)

$(VENV_STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV) || { \
		echo "$(PYTHON) -m venv failed: installing Debian's python3-venv"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends python3-venv \
		&& $(PYTHON) -m venv $(VENV); }
	@$(VENV)/bin/python -c 'import sys; print("venv interpreter:", sys.version.split()[0], sys.base_prefix)'
	$(VENV)/bin/pip install -q -e '.[dev]'
	@touch $@

# Copy into a fresh folder, then swap it in: no stale jars from an older pom survive, and
# a broker starting meanwhile never sees a half-copied folder.
$(KAFKA_STAMP): jvm/kafka/pom.xml
	@rm -rf $(JARS)/kafka.tmp && mkdir -p $(JARS)/kafka.tmp
	$(MVN) $(MVN_FLAGS) -f jvm/kafka/pom.xml dependency:copy-dependencies \
		-DoutputDirectory=$(JARS)/kafka.tmp -DincludeScope=runtime
	@touch $(JARS)/kafka.tmp/.copied
	@rm -rf $(JARS)/kafka && mv $(JARS)/kafka.tmp $(JARS)/kafka

$(DELTA_STAMP): jvm/delta/pom.xml
	@rm -rf $(JARS)/delta.tmp && mkdir -p $(JARS)/delta.tmp
	$(MVN) $(MVN_FLAGS) -f jvm/delta/pom.xml dependency:copy-dependencies \
		-DoutputDirectory=$(JARS)/delta.tmp -DexcludeTransitive=true
	@touch $(JARS)/delta.tmp/.copied
	@rm -rf $(JARS)/delta && mv $(JARS)/delta.tmp $(JARS)/delta

# The broker's and Spark's classes parsed and verified once, mapped by every later JVM of
# theirs (a cold start ~1.5x faster); ~2.5 min, once. Rebuilt when the venv or the jars
# change; an archive that no longer matches the JVM or the jars is ignored
# (speed_layer/runtime/jvm_cds.py). A failed build warns and leaves the JVMs without it.
$(CDS_STAMP): $(VENV_STAMP) $(KAFKA_STAMP) $(DELTA_STAMP)
	$(VENV)/bin/python -m speed_layer.runtime.kraft_cds_build || echo "WARNING: no CDS archive for the Kafka broker: it starts without one"
	$(VENV)/bin/python -m batch_layer.spark_cds_build || echo "WARNING: no CDS archive for Spark: its driver starts without one"
	@mkdir -p $(dir $@) && touch $@

$(BROWSER_STAMP):
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; else \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
			--no-install-recommends $(BROWSER_PACKAGES); fi
	@mkdir -p $(DUET_HOME) && touch $@

# Debian's PostgreSQL server (initdb, pg_ctl in /usr/lib/postgresql/<major>/bin): the tests
# start a throwaway cluster of it on loopback for Dagster's storage (pipelines/dagster/postgres_server.py).
$(POSTGRES_STAMP):
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; else \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
			--no-install-recommends postgresql; fi
	@mkdir -p $(DUET_HOME) && touch $@

# ~10 min of 2 cores the first time (a large Go program); the module cache stays in
# $(DUET_HOME)/go for a rebuild.
$(WEED_STAMP):
	@mkdir -p $(DUET_HOME)/bin
	dir=$$($(GO_ENV) $(GO) mod download -json github.com/seaweedfs/seaweedfs@$(WEED_VERSION) \
		| sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && test -n "$$dir" \
		&& cd "$$dir" && $(GO_ENV) $(GO) build -o $(WEED).tmp ./weed
	@mv $(WEED).tmp $(WEED) && rm -f $(DUET_HOME)/bin/.weed-* && touch $@

run: setup
	$(VENV)/bin/duet run $(ARGS)

test: setup
	$(VENV)/bin/python -m pytest -p xdist -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# Caches and the copied jars (not the venv, not the lake).
clean:
	rm -rf $(DUET_HOME)/jars .pytest_cache .hypothesis spark-warehouse metastore_db derby.log
	find . -path ./.git -prune -o -path ./$(VENV) -prune -o -name __pycache__ -type d -prune \
		-exec rm -rf {} +

# Also the venv.
distclean: clean
	rm -rf $(VENV)
