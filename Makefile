# `make demo` and `make test` each bring up what they need on a fresh machine
# (Python 3.11 and Java 17 present): the venv, the package, Redis's server binary.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1
export PYTHONHASHSEED := 0

.PHONY: demo test lint venv check-java clean bench

venv: $(STAMP)

# Reinstall only when the project's dependencies change: a second call installs nothing.
$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "error: java not found on PATH (Spark needs Java 17)" >&2; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m recovery.demo

# Style, the layers (the import-linter contract in pyproject.toml) and types (mypy's settings
# there too); `make test` runs it beside the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# Three test processes (pytest-xdist), each with its own servers and Spark session; a file's
# tests stay in one process, the files handed out longest first (tests/conftest.py, LONG_FILES;
# xdist's own reordering, by number of tests, would leave the longest files for last). Three on
# two cores: a test often waits (a JVM starting, a driver killed, a cluster's executors), and
# a third process fills those waits (quiet 2-core machine: 9.4 min, against 11.9 with two).
# PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 3

# Lint runs beside the tests at a lower priority (the tests keep both cores busy; lint takes
# what they leave), its output shown after theirs; either failing fails `make test`.
# PYTHONDONTWRITEBYTECODE emptied: pytest keeps the test modules it rewrote (its assertion
# messages) in __pycache__, and a later run skips that work (seconds per test process).
test: $(STAMP)
	@lint_log=$$(mktemp); nice -n 10 $(MAKE) --no-print-directory lint >$$lint_log 2>&1 & lint=$$!; \
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile \
		--no-loadscope-reorder --durations=15 $(PYTEST_ARGS); tests=$$?; \
	wait $$lint; linted=$$?; cat $$lint_log; rm -f $$lint_log; \
	[ $$linted -eq 0 ] || echo "error: make lint failed (above)" >&2; \
	[ $$tests -eq 0 ] && [ $$linted -eq 0 ]

# Each bench writes its results to bench/results/<name>.json; plot.py draws them into docs/
# (matplotlib comes with the venv: the test and bench extras of pyproject.toml).
bench: $(STAMP)
	@$(PY) -c "import matplotlib, bytewax" 2>/dev/null || $(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/tracking_overhead.py
	$(PY) bench/recovery_cost.py
	$(PY) bench/peers.py
	$(PY) bench/plot.py

clean:
	rm -rf .recovery out .pytest_cache
