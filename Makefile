# `make demo` and `make test` set themselves up: a .venv with torch, the package and its test extras.
PYTHON ?= python3
VENV ?= .venv
# The torch wheel to install when the venv has none. On an NPU host, install your torch and torch_npu
# into the venv first (or set TORCH=) so this does not replace them.
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean-venv

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[test]"
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/quickstart.py

test: $(STAMP)
	$(PY) -m ruff check ascend_rmsnorm tests benchmarks examples
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/bench_torch_path.py

clean-venv:
	rm -rf $(VENV)
