# Two commands: `make demo` and `make test`. Both create .venv unless a virtualenv is active.
ifdef VIRTUAL_ENV
VENV := $(VIRTUAL_ENV)
else
VENV := .venv
endif
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.perfkit-installed
DEVSTAMP := $(VENV)/.perfkit-dev-installed

.PHONY: demo test test-all lint servers scenarios bench clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	$(PY) -m ipykernel install --prefix $(VENV) --name python3 >/dev/null
	touch $@

$(DEVSTAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

demo: $(STAMP)
	$(BIN)/perfkit run inference_latency --bundle data/scenarios/p95-prefill-interference -o out/demo --force

lint: $(DEVSTAMP)
	$(BIN)/ruff check perfkit tests benchmarks
	$(BIN)/ruff format --check perfkit tests benchmarks
	$(BIN)/mypy perfkit
	$(PY) -m perfkit.app.runner.check_notebooks runbooks

# The real servers the integration tests start (Debian packages). Installed when missing and we
# can (root with apt-get); otherwise stop at once with the one command to run.
SERVERS := prometheus:prometheus promtool:prometheus victoria-metrics:victoria-metrics prometheus-alertmanager:prometheus-alertmanager
servers:
	@need=$$(for s in $(SERVERS); do command -v $${s%%:*} >/dev/null || echo $${s##*:}; done | sort -u | tr '\n' ' '); \
	if [ -n "$$need" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing $$need(Debian packages)"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$need; \
	  else \
	    echo "the integration tests need: $$need"; \
	    echo "run: sudo apt-get install -y --no-install-recommends $$need"; exit 1; \
	  fi; \
	fi

# `make test` leaves out the tests marked slow (live drills, the heaviest simulations) and runs the
# rest on JOBS processes (pytest-xdist; a test file stays on one, so its module fixtures are built
# once): the suite is CPU-bound in one process, and two halve it on a 2-core machine. JOBS=0 runs
# them in this process. `make test-all` (what CI runs) adds the slow tests, one at a time (a live
# drill needs the CPUs to itself to keep its clock), and the mutation check.
MARKS ?= not slow
JOBS ?= 2
test: servers lint
	PATH=$(BIN):$$PATH $(PY) -m pytest -q -p no:cacheprovider -n $(JOBS) --dist loadfile -m "$(MARKS)" tests

# test-all adds the mutation check: each named wrong version of a detector, the gate, the pacing or
# the trace reader must fail its tests (tests/mutation/run_mutations.py, run in a copy of the tree).
test-all:
	$(MAKE) test
	PATH=$(BIN):$$PATH $(PY) -m pytest -q -p no:cacheprovider -m slow tests
	PATH=$(BIN):$$PATH $(PY) tests/mutation/run_mutations.py

scenarios: $(STAMP)
	$(BIN)/perfkit generate --all -o data/scenarios

bench: $(DEVSTAMP)
	PATH=$(BIN):$$PATH $(PY) benchmarks/run_all.py

clean:
	rm -rf out .pytest_cache
