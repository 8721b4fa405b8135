# The Makefile owns the install: torch is pinned to the CPU wheel on this machine's disk.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH := torch==2.13.0
STAMP := $(VENV)/.aotc-installed

.PHONY: install demo test bench fuzz clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test,onnx,hf,quant]" "$(TORCH)"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/aotc export sample_models/mlp.py --joint -o bundles/mlp-joint --force
	$(VENV)/bin/aotc inspect bundles/mlp-joint

test: install
	$(PY) -m pytest -q

# Random corruptions of sample bundles (tests/fuzz.py); make test runs 500 of them.
N ?= 10000
SEED ?= 0
fuzz: install
	$(PY) tests/fuzz.py --trials $(N) --seed $(SEED)

bench: install
	$(PY) -m pip install -q matplotlib
	$(PY) benchmarks/run_all.py

clean:
	rm -rf build bundles .pytest_cache
