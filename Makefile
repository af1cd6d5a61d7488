# Two commands do all the set-up on a fresh clone with only Python 3.11 and pip:
#   make demo   creates .venv, installs dltop, runs a demo training that really fails
#               (DEMO=nan by default; `make demo DEMO=data_bound`) with the viewer on it
#   make test   creates .venv, installs dltop with the dev tools, runs ruff, mypy and the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
# setuptools warns on every editable install that it is one ("Editable installation...
# folders with the same name as your package"): true of every editable install, and
# nothing a user can act on. The project's own warnings are fixed (data folders listed as
# packages, an SPDX licence), and a test keeps them so (tests/project/test_install.py).
QUIET := PYTHONWARNINGS=ignore

.PHONY: demo test test-slow test-all lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(QUIET) $(PY) -m pip install -q --upgrade pip
	# torch is pinned in the dev extra: a CPU wheel, never a multi-GB CUDA build
	$(QUIET) $(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

DEMO ?= nan

demo: $(STAMP)
	$(VENV)/bin/dltop demo $(DEMO)

# The quick tier (`make test`) on every CPU (pytest-xdist); TEST_WORKERS=0 runs it in this
# process. The long end-to-end runs (trainings, torchrun jobs, every demo, a browser) are
# marked `slow`: `make test-slow` runs them alone, `make test-all` runs everything. CI runs
# `make test` and `make test-slow`.
TEST_WORKERS ?= auto
SLOW_WORKERS ?= 0

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest -q -n $(TEST_WORKERS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -n $(SLOW_WORKERS) -m slow

test-all: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m ''

lint: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

clean:
	rm -rf $(VENV) build *.egg-info dltop-runs
