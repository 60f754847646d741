# The two commands a fresh machine needs: `make demo` and `make test`.
# Both create .venv and install gpuadvisor with its dev tools and the `report` extra (the plots
# of `gpuadvisor demo` and `simulate --plots`: matplotlib) first.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
COMPILED_DIR := build/compiled
COMPILED := $(COMPILED_DIR)/.built-stamp

.PHONY: demo test lint format bench clean system-deps render compiled

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,report]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpuadvisor demo --output demo-output

# Real components the tests start on 127.0.0.1 (Debian packages; README.md, Layout: tests/):
# Prometheus + promtool, Alertmanager + amtool, node_exporter, a single-node Slurm 22.05 with munge
# and accounting (slurmdbd on MariaDB; sacct), systemd-analyze (checks the shipped units),
# shellcheck (the Slurm prolog and epilog), kubectl (`kubectl kustomize` builds deploy/kubernetes)
# chromium (opens the whatif report headless) and VictoriaMetrics (whatif --prometheus against a
# long-term store); gcc (the fake libnvidia-ml, the compiled build) and Python's headers.
# scripts/system_deps.sh maps each binary to its package and installs only the packages of the
# binaries missing (a kubectl from the Kubernetes apt repository stays: Debian's kubernetes-client
# conflicts with it), then says which binaries found are versions the tests cannot use. Python's
# headers: Debian's for a Debian Python that lacks them (PYTHON_INCLUDE, its include folder).
system-deps:
	PYTHON_INCLUDE="$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
	  sh scripts/system_deps.sh

# The whole suite on the sources, then the replay core's tests again on the compiled build
# (tests/compiled checks that it is the compiled one, and that it replays as the sources do).
test: $(STAMP) system-deps $(COMPILED)
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	GPUADVISOR_TEST_BUILD=$(COMPILED_DIR) $(BIN)/python -m pytest $(PYTEST_ARGS) \
	  tests/compiled tests/analysis tests/simulation

# The compiled build (setup.py, GPUADVISOR_COMPILE=1: the modules of pyproject.toml's
# [tool.gpuadvisor] compiled, with mypyc), as a wheel unpacked into build/compiled: the
# package as it installs, kept out of the checkout, where it would shadow the sources.
compiled: $(COMPILED)

$(COMPILED): $(STAMP) setup.py pyproject.toml $(shell find gpuadvisor -name '*.py')
	rm -rf $(COMPILED_DIR) build/compiled-wheel build/lib.* build/temp.* build/bdist.*
	GPUADVISOR_COMPILE=1 $(BIN)/python -m pip wheel --quiet --no-build-isolation --no-deps \
	  --wheel-dir build/compiled-wheel .
	$(BIN)/python -m zipfile -e build/compiled-wheel/gpuadvisor-*.whl $(COMPILED_DIR)
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check gpuadvisor tests bench scripts setup.py
	$(BIN)/ruff format --check gpuadvisor tests bench scripts setup.py
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format gpuadvisor tests bench scripts setup.py
	$(BIN)/ruff check --fix gpuadvisor tests bench scripts setup.py

# The rules, dashboards and PrometheusRule in the repository, rendered from the package's own
# (gpuadvisor/data/alerts, gpuadvisor/data/grafana; tests/sinks/monitoring/test_render.py holds them equal).
render: $(STAMP)
	$(BIN)/gpuadvisor render rules --output alerts
	$(BIN)/gpuadvisor render dashboards --output grafana
	$(BIN)/gpuadvisor render prometheusrule --output deploy/kubernetes/prometheus-operator

bench: $(STAMP)
	$(BIN)/python bench/simulator.py

clean:
	rm -rf $(VENV) demo-output .mypy_cache .ruff_cache .pytest_cache .hypothesis build
