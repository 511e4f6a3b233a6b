# The two commands that matter: `make demo` and `make test`. Both bootstrap the venv.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
COV_FLOOR ?= 88
TIERS := unit tools integration infrastructure contract e2e

.PHONY: demo test setup gates lint format typecheck cfn-lint complexity layers scan pytest bench build deploy clean stress node-install node-test $(TIERS)

# This machine's environment sets PYTHONDONTWRITEBYTECODE=1, so every Python process compiled
# every module it imported, every time: a consumer process's start-up took 0.97 CPU-s instead of
# 0.5, a pytest collection 10 instead of 2.6. Every target here caches bytecode, in one folder
# inside the venv (never beside the sources, so the checkout and the Lambda artifact stay clean;
# `make clean` removes it with the venv).
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache

UV_VERSION := 0.13.9
UV := $(BIN)/uv
UV_STAMP := $(VENV)/.uv-$(UV_VERSION)
# The interpreter is the one named by PYTHON, never one uv would download.
export UV_PYTHON_DOWNLOADS := never
# Both environments are installed by uv (a single pinned wheel, bootstrapped with the venv's own
# pip): it resolves and installs the dev set in seconds where pip took a minute and a half.
# pip stays in .venv: `serenity-allocator build` and the cold-start bench call `python -m pip`
# for the Lambda platform's wheels.
$(UV_STAMP):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION) 2>&1 | grep -v '^WARNING: Location' ; test $${PIPESTATUS[0]:-0} -eq 0
	@touch $(UV_STAMP)

$(STAMP): pyproject.toml $(UV_STAMP)
	@$(UV) pip install -q -p $(BIN)/python -e '.[dev]'
	@$(BIN)/python -c "import serenity_allocator" && touch $(STAMP)

demo: $(STAMP)
	$(BIN)/serenity-allocator demo

# Two steps: every environment installs side by side (the dev and scan venvs, the Node client's
# node_modules, awscli v1); then pytest on every core, with the Node client's tests and the
# gates (two at a time) beside it. pytest is the long pole, and its harness scenarios spend
# much of their time waiting on their processes: the gates and the Node tests fill that idle
# core time instead of adding their minute before and after it (measured in docs/testing.md).
# -k: every job reports even when one fails (the exit status is still non-zero); -Otarget:
# each job's output is printed as one block when it ends, never interleaved.
test:
	@$(MAKE) --no-print-directory setup
	@$(MAKE) --no-print-directory -k -j3 --output-sync=target pytest node-test gates

setup:
	@$(MAKE) --no-print-directory -j4 $(STAMP) $(SCAN_STAMP) $(NODE_STAMP) $(AWSCLI_STAMP)

gates:
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint typecheck cfn-lint complexity layers scan

lint: $(STAMP)
	$(BIN)/ruff check src tools tests bench
	$(BIN)/ruff format --check src tools tests bench

format: $(STAMP)
	$(BIN)/ruff format src tools tests bench
	$(BIN)/ruff check --fix src tools tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

cfn-lint: $(STAMP)
	$(BIN)/cfn-lint template.yaml

# Cyclomatic complexity (radon ranks: A 1-5, B 6-10, C 11-20): every function of the product,
# the tools and the benchmarks stays at B (<= 10), with no exception. The simulator's route
# table is data (simulator/model.py _ROUTES, write_gate.WRITE_ROUTES) and its dispatch a table,
# so it needs none.
complexity: $(STAMP)
	$(BIN)/xenon --max-absolute B --max-modules B --max-average A src tools bench

# The layering contract ([tool.importlinter] in pyproject.toml): the domain imports no use case,
# adapter, AWS, HTTP or Powertools; use cases no adapter; adapters no use case.
layers: $(STAMP)
	$(BIN)/lint-imports --no-cache

# checkov in a venv of its own: it pins exact versions (boto3 among them) that would downgrade
# the dev environment. Settings and the skip list, each skip with its reason: .checkov.yaml.
SCAN_VENV := .venv-scan
SCAN_STAMP := $(SCAN_VENV)/.installed
$(SCAN_STAMP): pyproject.toml $(UV_STAMP)
	@test -x $(SCAN_VENV)/bin/python || $(UV) venv -q -p $(PYTHON) $(SCAN_VENV)
	@$(UV) pip install -q -p $(SCAN_VENV)/bin/python $$($(PYTHON) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['scan']))")
	@touch $(SCAN_STAMP)

scan: $(SCAN_STAMP)
	$(SCAN_VENV)/bin/checkov --config-file .checkov.yaml

# pytest-xdist: one worker per core, idle workers steal queued tests from busy ones (the six
# harness scenarios are long, so a static split leaves a core idle at the end); pytest-randomly
# shuffles the order with a new seed on every run. The seed is drawn here and printed first
# (pytest's -q hides pytest-randomly's own header line); `make test PYTEST_SEED=N` repeats an
# order. How tests are kept apart per worker: docs/testing.md.
PYTEST_WORKERS ?= auto
ifndef PYTEST_SEED
PYTEST_SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist worksteal --randomly-seed=$(PYTEST_SEED)

pytest: $(STAMP)
	@echo "pytest in a random order: --randomly-seed=$(PYTEST_SEED) (repeat it: PYTEST_SEED=$(PYTEST_SEED))"
	$(BIN)/pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS) --cov --cov-report=term --cov-fail-under=$(COV_FLOOR)

# One tier at a time, for the inner loop (no coverage): `make unit`, `make integration`, ...
# `make tools` is the stand-ins', verification's, operator tools' and bench's own tests.
$(TIERS): $(STAMP)
	$(BIN)/pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS) tests/$@

# The Node client (clients/node): `npm ci` from the committed lockfile, then `node --test` (its
# unit tests, the example service, and every marked shell and JS block of the docs against
# `local up`: test/doc-snippets.test.js). awscli v1 gets a venv of its own (it pins botocore);
# the shell recipes run on it verbatim (1.36 or later: shorthand's `@=` loads a blob from a
# file), and on awscli v2 too when AWS_CLI_V2_DIR names the folder of its `aws`.
NODE_DIR := clients/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed
AWSCLI_VENV := .venv-awscli
AWSCLI_STAMP := $(AWSCLI_VENV)/.installed

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "need Node 20 and npm on PATH" >&2; exit 1; }
	cd $(NODE_DIR) && npm ci --no-audit --no-fund
	@touch $(NODE_STAMP)

node-install: $(NODE_STAMP)

$(AWSCLI_STAMP): $(UV_STAMP)
	@test -x $(AWSCLI_VENV)/bin/python || $(UV) venv -q -p $(PYTHON) $(AWSCLI_VENV)
	@$(UV) pip install -q -p $(AWSCLI_VENV)/bin/python 'awscli>=1.36,<2'
	@touch $(AWSCLI_STAMP)

node-test: $(STAMP) $(NODE_STAMP) $(AWSCLI_STAMP)
	cd $(NODE_DIR) && AWS_CLI_DIR=$(CURDIR)/$(AWSCLI_VENV)/bin npm test

# The demo and harness scenarios while one CPU-bound process per core keeps the machine busy
# (started and stopped by the command itself); prints every invariant table and a summary.
stress: $(STAMP)
	$(BIN)/python -m serenity_tools.verification.stress

bench: $(STAMP)
	$(BIN)/python -m bench.run

# sam build when the SAM CLI is installed; otherwise the same layout as a zip, no Docker needed.
build: $(STAMP)
	@if command -v sam >/dev/null 2>&1; then sam build; else $(BIN)/serenity-allocator build; fi

deploy:
	sam build && sam deploy --config-env $${ENV:-dev}

clean:
	rm -rf $(VENV) $(SCAN_VENV) $(AWSCLI_VENV) $(NODE_DIR)/node_modules .pytest_cache .mypy_cache .ruff_cache .coverage build .aws-sam
