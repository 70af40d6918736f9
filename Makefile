# The two set-up commands the README gives: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SCENARIO ?= pp8-serialized

.PHONY: install run diagnose test lint typecheck unit clean real-engine

$(BIN)/bubblewatch: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(BIN)/bubblewatch

# The main job, the daemon: on a GPU host it samples the real GPUs; on a machine
# without an NVIDIA driver it plays the built-in simulator's $(SCENARIO).
# Metrics on http://127.0.0.1:9842/metrics; Ctrl-C stops it.
RUN_ARGS ?= --web.listen-address 127.0.0.1:9842
run: install
	@if [ -e /proc/driver/nvidia/version ]; then \
		$(BIN)/bubblewatch run $(RUN_ARGS); \
	else \
		echo "no NVIDIA driver on this machine: running on the simulated scenario $(SCENARIO)"; \
		echo "metrics: http://127.0.0.1:9842/metrics   one-shot report: $(BIN)/bubblewatch diagnose --simulate $(SCENARIO)"; \
		$(BIN)/bubblewatch run --simulate $(SCENARIO) $(RUN_ARGS); \
	fi

# A one-shot report (30 s of sampling, or the simulator without a GPU).
diagnose: install
	@if [ -e /proc/driver/nvidia/version ]; then \
		$(BIN)/bubblewatch diagnose; \
	else \
		$(BIN)/bubblewatch diagnose --simulate $(SCENARIO); \
	fi

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

# The tests on every core this process may use (pytest-xdist, one worker a core as
# `nproc` counts them: CPU affinity, not psutil's physical cores, which on a 2-vCPU
# machine can be 1), never more: the tests that time themselves are bounded for 2
# loaded cores, CI's machine. `--dist loadfile`: a file's tests run on one worker, one
# after another, as they were written for (tests/hostile/test_http_load.py's load
# generators must not overlap), and a module's fixtures are built once; the files that
# start stand-in engines or discover over the host's /proc run on one worker together
# (HOST_PROC_FILES in tests/conftest.py). (`--dist loadgroup` does not group with
# pytest 9.2: pytest-xdist issue 1386.)
# `make unit TEST_WORKERS=0` runs them in one process.
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
unit: install
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

test: lint typecheck unit

# A real engine in the loop (docs/real-engine.md): vLLM's CPU build (x86_64 with AVX-512,
# 2 cores, 12 GB free) serving a PP 2 pipeline on loopback, with bubblewatch run against it.
# Its venv is cached outside the repository ($$BUBBLEWATCH_REAL_ENGINE_HOME, default
# ~/.cache/bubblewatch/real-engine). The script exits 77 where the platform cannot run it:
# then this target says so and succeeds, unless REAL_ENGINE_REQUIRED=1.
REAL_ENGINE_ARGS ?=
REAL_ENGINE_REQUIRED ?= 0
real-engine: install
	@PYTHONPATH=$(CURDIR) $(BIN)/python benchmarks/real_engine/run.py $(REAL_ENGINE_ARGS); rc=$$?; \
	if [ $$rc -eq 77 ] && [ "$(REAL_ENGINE_REQUIRED)" != 1 ]; then \
		echo "real-engine: SKIPPED: this machine cannot run vLLM's CPU build (reasons above)"; \
		exit 0; \
	fi; exit $$rc

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
