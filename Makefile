# The project's entry points. `make run` and `make test` do all set-up on a fresh machine of this
# kind (Debian packages, the control-plane build, the virtualenv), idempotently and quickly when done.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := $(CURDIR)/.venv
VPY := $(VENV)/bin/python
LOGS := $(CURDIR)/.logs
LAB := $(VPY) tests/lab/lab.py
export VMAPI_LAB_LOGS := $(LOGS)

.PHONY: help deps venv lab-up lab-down lab-env image run test lint typecheck layers unit e2e

help:
	@echo "make run       bring the lab up if needed, then run the provider daemon against it"
	@echo "make test      ruff, mypy, layering contracts, unit and e2e tests (brings the lab up)"
	@echo "make lab-up    start kube-apiserver + libvirtd (in its own network namespace);"
	@echo "               NODE=1 adds a kubelet node that runs deploy/'s DaemonSet"
	@echo "make lab-env   print export lines for kubectl, virsh and libvirt-provider"
	@echo "make lab-down  stop the lab and remove everything it created"
	@echo "make image     build the daemon's container image from deploy/Containerfile (no registry)"

deps:
	@mkdir -p $(LOGS)
	@LAB_LOG_DIR=$(LOGS) tests/lab/install-deps.sh

# The stamp depends on pyproject.toml, so a changed dependency list reinstalls; pip's own wheel
# cache (outside the clone) makes a fresh clone's install quick after the first.
$(VENV)/.installed: pyproject.toml | deps
	@echo "venv: installing the project and its test tools into .venv (log: $(LOGS)/venv.log)"
	@{ $(PYTHON) -m venv $(VENV) && $(VPY) -m pip install -q -e '.[dev]'; } >$(LOGS)/venv.log 2>&1 \
	  || { echo "venv: installation failed; see $(LOGS)/venv.log" >&2; tail -n 5 $(LOGS)/venv.log >&2; exit 1; }
	@touch $@

venv: deps $(VENV)/.installed

# NODE=1 also starts the lab's Kubernetes node (containerd, kubelet, kube-scheduler).
lab-up: venv
	@$(LAB) up $(if $(NODE),--node)

lab-down:
	@if [ -x $(VPY) ]; then $(LAB) down; else $(PYTHON) tests/lab/lab.py down; fi

lab-env:
	@$(LAB) env

image: venv
	@$(LAB) image

run: lab-up
	@$(LAB) describe
	@echo
	@$(VPY) -m tests.lab.devrun

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy

layers: venv
	$(VENV)/bin/lint-imports

unit: venv
	$(VPY) -m pytest tests/unit -q

# `make run` on a fresh lab and the teardown check run in a pytest session of their own, after
# every other session's fixtures (controllers they started, CRDs they installed) have been
# cleaned up against a live lab; so does the API server restart, which would cut every other
# test's daemon off.
e2e: lab-up
	$(VPY) -m pytest tests/e2e -q --durations=25 -m "not fresh_lab and not lab_teardown and not apiserver_restart"
	$(VPY) -m pytest tests/e2e -q --durations=10 -m "apiserver_restart or fresh_lab or lab_teardown"

# The static checks, the unit tests and the lab's start use one core or none each: run together
# they take the longest of them (the unit tests) instead of their sum; the e2e tests follow alone.
test:
	@$(MAKE) --no-print-directory -j4 --output-sync=target lint typecheck layers unit lab-up
	@$(MAKE) --no-print-directory e2e
