# The two commands that matter: `make demo` and `make test`. Both bootstrap the venv.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
COV_FLOOR ?= 88

.PHONY: demo test lint format typecheck cfn-lint pytest bench build deploy clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
	@$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]' 2>&1 | grep -v '^WARNING: Location' ; test $${PIPESTATUS[0]:-0} -eq 0
	@$(BIN)/python -c "import serenity_allocator" && touch $(STAMP)

demo: $(STAMP)
	$(BIN)/serenity-allocator demo

test: lint typecheck cfn-lint pytest

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

pytest: $(STAMP)
	$(BIN)/pytest --cov --cov-report=term --cov-fail-under=$(COV_FLOOR)

bench: $(STAMP)
	$(BIN)/python -m bench.run

# sam build when the SAM CLI is installed; otherwise the same layout as a zip, no Docker needed.
build: $(STAMP)
	@if command -v sam >/dev/null 2>&1; then sam build; else $(BIN)/serenity-allocator build; fi

deploy:
	sam build && sam deploy --config-env $${ENV:-dev}

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage build .aws-sam
