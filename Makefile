# Two commands set everything up: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench install clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $(STAMP)

install: $(STAMP)

# The suite also runs the ONNX importer's and the torch.compile backend's tests, and compares
# with JAX: the test, onnx and torch extras.
TEST_STAMP := $(VENV)/.installed-test

$(TEST_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,onnx,torch]'
	touch $(TEST_STAMP)

demo: $(STAMP)
	$(PY) -m pyxla.demo

# Lint and type-check first: they take seconds, the suite minutes.
test: $(TEST_STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy pyxla/hlo pyxla/passes pyxla/fusion
	$(PY) -m pytest -n 2 -q

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): pyproject.toml $(TEST_STAMP)
	$(PY) -m pip install --quiet -e '.[test,onnx,bench]'
	touch $(BENCH_STAMP)

# Every framework in its own process; writes benchmarks/results/report.md, report.json, ratios.png
bench: $(BENCH_STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
