# The two commands a fresh machine needs: `make demo` and `make test`.
# Both create .venv and install gpuadvisor with its dev tools and the `report` extra (the plots
# of `gpuadvisor demo` and `simulate --plots`: matplotlib) first.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: demo test lint format bench clean system-deps render

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
# long-term store).
# scripts/system_deps.sh maps each binary to its package and installs only the packages of the
# binaries missing (a kubectl from the Kubernetes apt repository stays: Debian's kubernetes-client
# conflicts with it), then says which binaries found are versions the tests cannot use.
system-deps:
	sh scripts/system_deps.sh

test: $(STAMP) system-deps
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check gpuadvisor tests bench scripts
	$(BIN)/ruff format --check gpuadvisor tests bench scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format gpuadvisor tests bench scripts
	$(BIN)/ruff check --fix gpuadvisor tests bench scripts

# The rules, dashboards and PrometheusRule in the repository, rendered from the package's own
# (gpuadvisor/data/alerts, gpuadvisor/data/grafana; tests/sinks/monitoring/test_render.py holds them equal).
render: $(STAMP)
	$(BIN)/gpuadvisor render rules --output alerts
	$(BIN)/gpuadvisor render dashboards --output grafana
	$(BIN)/gpuadvisor render prometheusrule --output deploy/kubernetes/prometheus-operator

bench: $(STAMP)
	$(BIN)/python bench/simulator.py

clean:
	rm -rf $(VENV) demo-output .mypy_cache .ruff_cache .pytest_cache .hypothesis
