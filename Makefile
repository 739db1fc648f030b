# `make demo` and `make test` set themselves up: a .venv with torch, the package and its test extras.
PYTHON ?= python3
VENV ?= .venv
# The torch wheel to install when the venv has none. On an NPU host, install your torch and torch_npu
# into the venv first (or set TORCH=) so this does not replace them.
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test sweep lint bench clean-venv

# The test extras as pyproject.toml lists them (names, and the Python a marker limits one to), for the line
# that says what is installed.
TEST_EXTRAS = $(shell sed -n '/^test = \[/,/^\]/p' pyproject.toml | grep -o '"[^"]*"' | tr -d '"' \
	| sed -e "s/;[ ]*python_version[ ]*<[ ]*'\([0-9.]*\)'/ (on Python below \1)/" -e 's/[<>=!~;[].*//' \
	| paste -sd, - | sed 's/,/, /g')

# The first run says what it installs, and pip shows its progress (once; later runs reuse the venv
# and reinstall only when pyproject.toml or the launcher changes).
# The console-script launcher is copied into the venv (it lives outside the package), so a change to it
# reinstalls too.
$(STAMP): pyproject.toml _ascend_rmsnorm_cli.py
	@test -x $(PY) || { echo "make: first run: creating $(VENV) with $(PYTHON) (once; later runs reuse it)"; \
		$(PYTHON) -m venv $(VENV); }
	@$(PY) -c "import torch" 2>/dev/null || { echo "make: installing $(TORCH) into $(VENV) (the longest step, once; pip's progress follows)"; \
		$(PY) -m pip install --progress-bar on $(TORCH); }
	@echo "make: installing ascend-rmsnorm (editable) and its test extras ($(TEST_EXTRAS)) into $(VENV)"
	@$(PY) -m pip install --progress-bar on -e ".[test]"
	@touch $(STAMP)
	@echo "make: $(VENV) is ready; this set-up is not repeated unless pyproject.toml or _ascend_rmsnorm_cli.py changes"

demo: $(STAMP)
	$(PY) examples/quickstart.py

# ruff over everything we ship and test; `make test` runs it first.
lint: $(STAMP)
	$(PY) -m ruff check ascend_rmsnorm _ascend_rmsnorm_cli.py tests benchmarks examples

test: lint
	$(PY) -m pytest -q

# Every kernel case drawn from the planner (tests/support/plan_cases.py) through the emulation, bit for bit
# against the torch path (and the oracle on some rows), on all cores; `make test` runs a seeded sample.
sweep: $(STAMP)
	$(PY) tests/support/sweep.py

bench: $(STAMP)
	$(PY) benchmarks/bench_torch_path.py

clean-venv:
	rm -rf $(VENV)
