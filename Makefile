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

.PHONY: demo test lint scenarios bench clean

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
	$(BIN)/perfkit run inference_latency --bundle data/scenarios/p95-prefill-interference -o out/demo

lint: $(DEVSTAMP)
	$(BIN)/ruff check perfkit tests benchmarks
	$(BIN)/ruff format --check perfkit tests benchmarks
	$(PY) -m perfkit.tools.check_notebooks runbooks

test: lint
	PATH=$(BIN):$$PATH $(PY) -m pytest -q -p no:cacheprovider tests

scenarios: $(STAMP)
	$(BIN)/perfkit generate --all -o data/scenarios

bench: $(DEVSTAMP)
	PATH=$(BIN):$$PATH $(PY) benchmarks/run_all.py

clean:
	rm -rf out .pytest_cache
