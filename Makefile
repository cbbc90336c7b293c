# nbcompile: `make demo`, `make test`, `make lab`. Each makes .venv itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
TORCH_TEST_VERSION := 2.13.0
export TORCHINDUCTOR_CACHE_DIR ?= $(CURDIR)/.inductor-cache
CONTRACT_TESTS := $(wildcard ../shared/contract_tests)

.PHONY: demo test test-nightly test-matrix matrix-venvs lab venv test-deps chromium schema bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# Stamps: pip runs again only when what it installs from changed, so `make lab` and `make demo` start in
# seconds the second time. The install is editable: a change to nbcompile's Python needs none.
# A change to the extension's TypeScript or CSS rebuilds it (the install builds it).
INSTALLED := $(VENV)/.nbcompile-installed
LAB_INSTALLED := $(VENV)/.jupyterlab-installed

# A torch already in the venv is kept; otherwise the pinned CPU build is installed.
$(INSTALLED): pyproject.toml labextension/package.json $(wildcard labextension/src/*.ts labextension/style/*.css) | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install torch==$(TORCH_TEST_VERSION)
	$(PIP) install -e ".[run]"
	@touch $@

venv: $(INSTALLED)

$(LAB_INSTALLED): $(INSTALLED)
	$(PIP) install "jupyterlab>=4.0,<4.6"
	@touch $@

# Tests pin torch. Installing the package builds the JupyterLab extension (npm, from the registry).
test-deps: $(PY) chromium
	@$(PY) -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$(TORCH_TEST_VERSION)')" 2>/dev/null \
		|| $(PIP) install torch==$(TORCH_TEST_VERSION)
	$(PIP) install -e ".[test]" torch==$(TORCH_TEST_VERSION)
	cd labextension && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; }

# The browser tests drive Debian's Chromium ($$CHROMIUM or /usr/bin/chromium); as root it is installed.
chromium:
	@if [ -n "$$CHROMIUM" ] || command -v chromium >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "chromium not found and not root: the browser tests will be skipped"; fi

# The torch matrix (issue 36): torch 2.11, 2.15, 2.12 and 2.14 (PyPI's builds), each in a venv of its own under
# .matrix/ that lives while its subset of every feature's tests and the quickstart run, then is removed, so the
# disk holds one at a time (benchmarks/torch_matrix.py). A version starts only when the disk has room and
# MATRIX_UNTIL (seconds since the epoch; .ci/run passes its own deadline) leaves time for it; MATRIX_VERSIONS
# (comma-separated) picks versions.
test-matrix:
	$(PYTHON) benchmarks/torch_matrix.py ci $${MATRIX_UNTIL:+--until $$MATRIX_UNTIL} \
		$${MATRIX_VERSIONS:+--versions $$MATRIX_VERSIONS} --out build/torch_matrix.json

# The venvs kept, for work on one version (`benchmarks/torch_matrix.py smoke|bench --versions V`).
matrix-venvs:
	$(PYTHON) benchmarks/torch_matrix.py install

# Executes notebooks/01_quickstart.ipynb headless (widget state and plotly figures kept in the HTML).
demo: venv
	$(PY) -m nbcompile run notebooks/01_quickstart.ipynb --html build/quickstart.html

# The suite runs on two workers (pytest-xdist, a test file per worker at a time): about 33 minutes here against 55
# on one. Its output goes through a pipe: a file that both workers' inherited descriptors share moves under one
# worker's trial while the other writes, which the outside-effect audit would rightly call a moved open file.
# PYTEST_WORKERS= (empty) runs it on one.
PYTEST_WORKERS ?= -n 2 --dist loadfile
test: test-deps
	cd labextension && npx jest --ci
	$(VENV)/bin/ruff check nbcompile tests benchmarks notebooks
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	set -o pipefail; $(PY) -m pytest tests $(CONTRACT_TESTS) -q -rfEs --durations=30 $(PYTEST_WORKERS) 2>&1 | cat

# The click-invariant state machine with ten times the sequences `make test` runs (tests/test_click_invariants.py).
test-nightly: test-deps
	NBCOMPILE_CLICK_EXAMPLES=$${NBCOMPILE_CLICK_EXAMPLES:-500} $(PY) -m pytest tests/test_click_invariants.py -q

lab: $(LAB_INSTALLED)
	$(VENV)/bin/jupyter lab notebooks/ $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

# The JSON schema from the dataclasses, then the extension's TypeScript types from the schema.
schema: $(PY)
	$(PY) -c "from nbcompile.model.schema import write_schema; write_schema()"
	cd labextension && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; } && npm run --silent schema-types

bench: venv
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/toggle_latency.py
	$(PY) benchmarks/panel_scale.py
	$(PY) benchmarks/recompiles.py

clean:
	rm -rf $(VENV) build dist .inductor-cache .pytest_cache nbcompile/labextension labextension/lib labextension/node_modules
