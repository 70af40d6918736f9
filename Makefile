# The two set-up commands the README gives: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SCENARIO ?= pp8-serialized

.PHONY: install run test lint typecheck unit clean

$(BIN)/bubblewatch: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(BIN)/bubblewatch

# The main job: on a GPU host it samples the real GPUs; elsewhere the built-in simulator.
run: install
	$(BIN)/bubblewatch diagnose --auto-simulate $(SCENARIO)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest

test: lint typecheck unit

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
