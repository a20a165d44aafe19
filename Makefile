# FIX Lab. Two commands on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CODEC_SAMPLES ?= 50000
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
APT := $(shell command -v apt-get 2>/dev/null)

.PHONY: install system-deps browser docker-engine compose-up compose-up-cluster run run-cluster test test-fast bench chaos lint docs course screenshots clean

system-deps:
	@command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 || { \
	  echo "make: installing redis-server and redis-cli (Debian packages)"; \
	  apt-get update -qq && apt-get install -y -qq redis-server redis-tools >/dev/null; }
	@# The TLS port (docs/security.md): stunnel4 in front of the plain acceptor, openssl for a
	@# self-signed certificate (the quickfix build has no SSL of its own).
	@command -v stunnel4 >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1 || { \
	  echo "make: installing stunnel4 and openssl (Debian packages) for the TLS port"; \
	  apt-get update -qq && apt-get install -y -qq stunnel4 openssl >/dev/null; }

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/pip install -q --upgrade pip wheel setuptools
	@if ! $(BIN)/python -c 'import quickfix' 2>/dev/null; then \
	  echo "make: building quickfix 1.16.0 from source: PyPI has no wheel, the first build compiles"; \
	  echo "      the C++ engine and its SWIG wrapper (about 9 minutes on 2 cores; cached afterwards)."; \
	  $(BIN)/pip install -v quickfix==1.16.0 2>&1 | $(BIN)/python deploy/build_progress.py; \
	  $(BIN)/python -c 'import quickfix' || { echo "make: quickfix did not build"; exit 1; }; \
	fi
	@echo "make: installing FIX Lab and its Python packages into $(VENV)"
	@$(BIN)/pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

install: system-deps $(STAMP)

browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "make: installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

# Docker: Debian's docker.io and debootstrap, the Compose v2 plugin (tools/compose.py). `make test`
# asks for it only with FIXLAB_DOCKER_TESTS=1 (.ci/run sets it), which also lets
# tests/e2e/test_compose_docker.py run; without it that test skips and says how to enable it.
docker-engine:
	@$(PY) -m tools.compose install || echo "make: no Docker engine here: tests/e2e/test_compose_docker.py will skip"

# `docker compose up` of docker-compose.yml, for real: installs the engine if missing, starts dockerd
# if none runs, builds the base images when no registry has them, builds fixlab:local, prints the
# page's address; Ctrl-C brings it down. No venv needed. FIXLAB_HOST_WHEELS=0 compiles quickfix in
# the image instead of reusing this host's wheel (deploy/README.md).
compose-up:
	@$(PY) -m tools.compose up

compose-up-cluster:
	@$(PY) -m tools.compose up -f deploy/compose.cluster.yml

# FIX over TLS on 9898 beside the plain 9878 (docs/security.md); FIXLAB_FIX_TLS_PORT=0 turns it off.
run: install
	@FIXLAB_FIX_TLS_PORT=$${FIXLAB_FIX_TLS_PORT-9898} $(BIN)/python -m services

# The same stack on a private 3-master Redis Cluster (data in .run/cluster/), two matcher shards and
# two gateways (deploy/SCALING.md): prints the page's address and each gateway's FIX address.
run-cluster: install
	@$(BIN)/python -m services --cluster

# Four pytest workers (pytest-xdist) on two cores: the suite mostly waits, and four take it to
# ~10 min against ~16 with two (docs/tests.md). Each module stays on one worker, the heavy modules of
# a lane (xdist_group "serial" or "faults") run one after another (tests/conftest.py). The 25 slowest
# tests are printed; every test's time is in .run/pytest.xml (tools/test_times.py sums it per lane).
PYTEST_WORKERS ?= 4
# The unit tests are CPU-bound: one worker a core.
FAST_WORKERS ?= 2
test: install browser lint screenshots
	@if [ "$${FIXLAB_DOCKER_TESTS:-0}" = 1 ]; then $(MAKE) --no-print-directory docker-engine; fi
	@mkdir -p .run && $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=25 --junitxml=.run/pytest.xml

# Everything that starts no stack: the unit tests, on two workers (docs/tests.md).
test-fast: install
	@$(BIN)/python -m pytest -n $(FAST_WORKERS) --dist loadgroup tests/unit

bench: install
	@$(BIN)/python -m services.bench.suite
	@# 4x8 for each FIX version (4.4, 4.2, 5.0 SP2) on one lean exchange, alternated, side by side.
	@$(BIN)/python -m services.bench.versions
	@# Issue 32: 1x1 and 4x8 over the TLS port (stunnel4 on both sides) and plain, alternated, side by side.
	@$(BIN)/python -m services.bench.tls --rounds 3
	@# A lone order's round trip hop by hop (shared/hoptrace.py), beside the engine alone and the relay.
	@$(BIN)/python -m benchmarks.hops --out benchmarks/results/hops.json
	@# The exchange's own steps for one order, warm and with the CPU caches flushed between orders.
	@$(BIN)/python -m benchmarks.cold --out benchmarks/results/cold.json
	@$(BIN)/python -m benchmarks.gcpolicy --out benchmarks/results/gcpolicy.json
	@# Issue 31: 10,000 resting orders in a call uncrossed in the engine (target < 50 ms), and continuous
	@# trading's core figures against the commit before the call auctions came, in turns.
	@$(BIN)/python -m benchmarks.uncross --baseline 9f49845 --rounds 10 --out benchmarks/results/uncross.json
	@# ... and end to end: 10,000 call orders from one strict QuickFIX session, the SetPhase that opens
	@# the book to the last of its reports at the client (target < 1 s).
	@$(BIN)/python -m benchmarks.uncross --orders 10000 --repeat 3 --e2e --out benchmarks/results/uncross-e2e.json
	@# Issue 34: the terminal client's start-up per FIX version, in turns (target < 2 s), and a session's
	@# resident cost per version.
	@$(BIN)/python -m benchmarks.client --runs 5 --startup-only --out benchmarks/results/client-startup.json
	@$(BIN)/python -m benchmarks.session_memory --sessions 100 --out benchmarks/results/session-memory.json
	@# 8x32 through the runner's stack: 1 shard / 2 shards on one redis-server / 2 shards on a
	@# 3-master cluster, side by side, and the model of N shards (deploy/SCALING.md section 5).
	@$(BIN)/python -m benchmarks.shards_stack
	@# Seed 004's method for every adapter: CODEC_SAMPLES timed samples of 32 operations each after
	@# a tenth as many untimed. The project's codec first (~8 min), then the QuickFIX rows (~19 min) and
	@# simplefix (~25 min) side by side, one per core. `make bench CODEC_SAMPLES=2000` for a quick look
	@# (not seed 004's method).
	@$(BIN)/python -m benchmarks.codec --samples $(CODEC_SAMPLES) --warmup $$(($(CODEC_SAMPLES) / 10)) --adapter shared.fix
	@$(BIN)/python -m benchmarks.codec --samples $(CODEC_SAMPLES) --warmup $$(($(CODEC_SAMPLES) / 10)) --adapter QuickFIX --merge & pid=$$!; \
	 $(BIN)/python -m benchmarks.codec --samples $(CODEC_SAMPLES) --warmup $$(($(CODEC_SAMPLES) / 10)) --adapter simplefix --merge; rc=$$?; \
	 wait $$pid && exit $$rc

# Issue 13's fault suite: kill -9 parts of a `make run` stack under load, count lost and duplicated
# orders (docs/RELIABILITY.md). `make test` runs it shortened (tests/e2e/test_chaos.py).
chaos: install
	@$(BIN)/python -m benchmarks.chaos

DOCS_PORT ?= 8000
docs: install
	@echo "make: the documentation site at http://127.0.0.1:$(DOCS_PORT)/ (Ctrl-C stops it)"
	@NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict -a 127.0.0.1:$(DOCS_PORT)

# The README's and the site's screenshots, from a fresh stack of their own: the lab page in chromium
# (Playwright) and the terminal client's full screen (Textual's SVG). `make test` retakes them, so the
# committed pictures are those of the last tested tree (commit them with the change that moved them);
# tests/e2e/test_screenshots.py checks what the tool draws, in a temporary folder.
screenshots: install browser
	@$(BIN)/python -m tools.screenshots --out docs/images

# The course's wire excerpts (docs/course/wire/), each lesson's scenario played against a fresh stack;
# tests/e2e/test_course.py fails when one is stale.
course: install
	@$(BIN)/python -m tools.course

lint: install
	@echo "make: ruff and mypy"
	@$(BIN)/ruff check shared services tests deploy benchmarks tools
	@$(BIN)/mypy

clean:
	rm -rf .run .pytest_cache .mypy_cache .ruff_cache
