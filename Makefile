# perfsuite: `make quick` sets up and runs the default sweep; `make test` sets up and runs the tests.
# Both create .venv with the CPU build of torch. On a GPU box with torch already installed, use
# `make gpu-setup` (installs into the current Python, keeps its torch) and run `perfsuite` directly.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup quick test bench lint gpu-setup gpu-check clean chromium slurm

$(STAMP): pyproject.toml requirements/cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements/cpu.txt
	$(BIN)/python -m pip install --quiet -e '.[triton,plots,dev]'
	touch $(STAMP)

setup: $(STAMP)

quick: setup
	$(BIN)/perfsuite run scenarios/quick.toml --out reports/quick

# both cores (pytest-xdist; the benchmark front end's own pytest runs without it)
test: setup
	$(BIN)/python -m pytest -q -n auto --dist worksteal

bench: setup
	$(BIN)/python -m pytest benchmarks -q --benchmark-json reports/bench.json
	$(BIN)/perfsuite report reports/bench.json --out reports/bench.html

# Headless Chromium for tests/test_report_browser.py (skipped without it). Debian / Ubuntu, as root or via sudo.
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
	  echo "chromium: $$(command -v chromium || command -v chromium-browser)"; \
	else \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; \
	fi

# tests/test_slurm.py runs scripts/slurm/ on a one-node Slurm it starts itself (skipped without these)
slurm:
	@if command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1; then \
	  echo "slurm: $$(command -v slurmctld), munge: $$(command -v munged)"; \
	else \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends slurm-wlm munge; \
	fi

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# Offline: no build isolation (setuptools from the box, not downloaded) and no index; the dependencies
# from the box when it has them all, else perfsuite alone (what is missing is then named on first use).
GPU_SETUP_ARGS ?=
GPU_SETUP := $(PYTHON) -m pip install --no-build-isolation --no-index $(GPU_SETUP_ARGS)
gpu-setup:
	$(GPU_SETUP) -e . || { echo "gpu-setup: a dependency is not on this box: perfsuite alone (--no-deps)"; \
	  $(GPU_SETUP) --no-deps -e .; }

# The GPU check in one command of at most 8 minutes (BUDGET_S): its stages under their own budgets, then
# everything packed into at most 8 files in GPU_CHECK_OUT ($OUT on a lent machine). See scripts/gpu_check.sh.
GPU_CHECK_OUT ?= $(or $(OUT),reports/gpu-check)
gpu-check:
	PYTHON=$(PYTHON) bash scripts/gpu_check.sh $(GPU_CHECK_OUT)

clean:
	rm -rf $(VENV) reports/quick reports/bench.json reports/bench.html
