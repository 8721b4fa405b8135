# The Makefile owns the install: torch is pinned to the CPU wheel on this machine's disk.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.aotc-installed

.PHONY: all install cpp demo test test-torch bench bench-suite fuzz clean

all: install cpp

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[test,onnx,hf,models,quant,sign]" "$(TORCH_PIN)"
	touch $(STAMP)

install: $(STAMP)

# The C++ runtime (cpp/: libaotc_runtime, aotc-run, a CMake package for examples/cpp), built
# with CMake and ninja against the libtorch inside the torch wheel; JSON and hashing from
# Debian's nlohmann-json3-dev and libssl-dev, installed here as make test installs chromium.
# About two minutes on 2 cores from clean; ninja rebuilds only what changed.
CPP_BUILD := build/cpp
cpp: install
	@test -f /usr/include/nlohmann/json.hpp && test -f /usr/include/openssl/evp.h || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nlohmann-json3-dev libssl-dev >/dev/null)
	@test -f $(CPP_BUILD)/build.ninja || cmake -S cpp -B $(CPP_BUILD) -G Ninja \
		-DCMAKE_PREFIX_PATH="$$($(PY) -c 'import torch; print(torch.utils.cmake_prefix_path)')" >/dev/null
	ninja -C $(CPP_BUILD)

demo: install
	$(VENV)/bin/aotc export sample_models/mlp.py --joint -o bundles/mlp-joint --force
	$(VENV)/bin/aotc inspect bundles/mlp-joint

# The report tests open pages in a real browser: Debian's chromium, driven through chromedriver.
# The conformance matrix (tests/test_conformance.py) and torch's ported export tests
# (tests/test_export_suite.py) run in a second pytest process beside the rest: both are mostly
# single-threaded tracing and compiling, so on 2 cores they take about the wall time of the
# longer one. Its log is printed when both are done; either failing fails.
# The C++ runtime (make cpp) is built while the second process runs: only the rest needs it.
# --durations lists the slowest tests, to keep a clean-clone run inside its time budget.
test: install
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null)
	@mkdir -p build
	@$(PY) -m pytest -q --durations=10 tests/test_conformance.py tests/test_export_suite.py > build/conformance.log 2>&1 & matrix=$$!; \
	$(MAKE) --no-print-directory cpp && \
	$(PY) -m pytest -q --durations=20 --ignore=tests/test_conformance.py --ignore=tests/test_export_suite.py; main=$$?; \
	wait $$matrix; conformance=$$?; \
	echo "== the conformance matrix and torch's export tests, run beside the rest =="; \
	cat build/conformance.log; \
	test $$main -eq 0 && test $$conformance -eq 0

# aotc under another tested torch (aotc._torch_compat.TESTED_TORCH), e.g. make test-torch
# TORCH=2.14.1: a venv of its own under build/ (kept between runs: torch 2.14.1 is a 5.4 GB
# CUDA build whose install takes over 20 minutes here), and a compatibility subset: every
# sample exported in each graph kind, compiled and verified; the transformers conformance
# cells on fx; signing; and bundles across the two torches, both ways (tests/test_torch_compat.py,
# with .venv's torch as the other one). Not part of make test: the install alone is over
# CI's budget on a clean machine.
TORCH ?= 2.14.1
TORCH_VENV := build/venv-torch-$(TORCH)
TORCH_SUBSET := tests/test_torch_compat.py tests/test_signing.py tests/test_conformance.py tests/test_subclasses.py
# the conformance matrix's fx cells; signing but for regional bundles (their fixture compiles the whole
# corpus); tensor subclasses (AOTAutograd's handling changed in 2.14) but torchao's int8 (not installed there)
TORCH_CELLS := not test_a_regional_bundle_is_signed_whole and (not test_user_code_runs_unchanged or fx) and not int8
$(TORCH_VENV)/.aotc-installed: pyproject.toml
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(TORCH_VENV)/bin/python -m pip install -q "torch==$(TORCH)"
	$(TORCH_VENV)/bin/python -m pip install -q -e ".[test,onnx,hf,models,sign]" "torch==$(TORCH)"
	touch $@

test-torch: install $(TORCH_VENV)/.aotc-installed
	AOTC_OTHER_PYTHON=$(abspath $(PY)) TORCHINDUCTOR_CACHE_DIR=$(abspath build/inductor-cache-$(TORCH)) \
		$(TORCH_VENV)/bin/python -m pytest -q --durations=10 $(TORCH_SUBSET) -k "$(TORCH_CELLS)"

# Random corruptions of sample bundles (tests/fuzz.py); make test runs 500 of them.
N ?= 10000
SEED ?= 0
fuzz: install
	$(PY) tests/fuzz.py --trials $(N) --seed $(SEED)

# every sample model, every baseline, 3 fresh processes per variant, 1 and 2 threads
# (about 2 hours on 2 cores); e.g. make bench BENCH_ARGS="--models mlp --threads 1"
BENCH_ARGS ?= --threads 1 2
bench: install
	$(PY) -m pip install -q matplotlib
	$(PY) benchmarks/run_all.py $(BENCH_ARGS)

# The benchmark suite (aotc/tools/bench_suite.py): 21 real model definitions compiled with no
# flags, against eager and torch.compile, at 1 thread and every core, 3 fresh processes per
# variant; writes benchmarks/suite/{results.json,report.md,report.png}. Hours on 2 cores;
# a part: make bench-suite SUITE_ARGS="--models bert,resnet --no-train"
SUITE_ARGS ?=
bench-suite: install
	$(PY) -m pip install -q matplotlib
	$(VENV)/bin/aotc bench --suite --repeats 3 $(SUITE_ARGS)

clean:
	rm -rf build bundles .pytest_cache
