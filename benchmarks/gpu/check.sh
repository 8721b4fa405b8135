#!/usr/bin/env bash
# The prepared GPU run (make gpu-check): on a lent GPU machine (torch 2.11.0+cu130, Python
# 3.12, 16 cores, no network), in under 9 minutes:
#   1. installs what the image lacks from build/gpu-wheels (make gpu-wheels, here), and aotc;
#   2. builds the C++ runtime against that torch's libtorch (headers from the carried debs);
#   3. runs the CUDA suite (pytest -m cuda: tests/test_cuda.py, tests/test_compile.py);
#   4. times the GPU benchmark (benchmarks/gpu/bench.py) in the time left;
#   5. writes $WORK/gpu-report.md and $WORK/gpu-report.json (benchmarks/gpu/gpu_report.py).
# From this machine, with the device tool:
#   run(command="bash benchmarks/gpu/check.sh", carry=["build/gpu-wheels"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-530}  # seconds for the whole run: under 9 minutes
WORK=build/gpu-check  # every log; $OUT (the device tool's, at most 8 files come back) gets the report
PY=${PYTHON:-python3}
WHEELS=build/gpu-wheels
SITE=/tmp/aotc-site
DEPS=/tmp/aotc-debs
rm -rf "$WORK" && mkdir -p "$WORK"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/aotc-inductor AOTC_CACHE_DIR=/tmp/aotc-cache
# The image sets CXX=/opt/gcc/bin/g++, a wrapper script around its g++ 13. On the H200 (2026-11-27)
# every AOTInductor package built through it crashed torch's own loader (aoti_load_package:
# a segfault in load_pt2), and bert's inference graph did not compile at all; the same Linear
# built with /usr/bin/g++ loaded and matched eager. Inductor takes $CXX when it is set.
export CXX=$(command -v g++) CC=$(command -v gcc)
elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[gpu-check $(elapsed)s] $*" | tee -a "$WORK/steps.log"; }

log "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); \
$($PY -c 'import sys, torch; print(f"Python {sys.version.split()[0]}, torch {torch.__version__}")' 2>&1)"

# 1. packages: the carried wheels and aotc itself, into a folder of their own (GPU_CHECK_INSTALL=0:
#    the Python given has them, as .venv does when the script's own steps are tried on a CPU)
test -d "$WHEELS" || { log "no $WHEELS: run make gpu-wheels here and carry it"; exit 1; }
if [ "${GPU_CHECK_INSTALL:-1}" = 1 ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl \
        > "$WORK/install.log" 2>&1 || { log "installing the wheels failed (install.log)"; exit 1; }
    # aotc from a copy of the checkout, laid out as the editable install maps it (aotc.cli is cli/,
    # aotc.exporters is exporters/): a wheel of aotc in $SITE would be shadowed by the checkout's
    # own aotc/, which the tests' and the benchmark's sys.path put first.
    TREE=/tmp/aotc-tree
    rm -rf "$TREE" && mkdir -p "$TREE"
    tar -cf - --exclude=./build --exclude=./.venv --exclude=./.git . | tar -xf - -C "$TREE"
    mkdir -p "$TREE/build" && ln -s "$PWD/$WHEELS" "$TREE/$WHEELS"
    ln -s ../cli "$TREE/aotc/cli" && ln -s ../exporters "$TREE/aotc/exporters"
    ORIGIN=$PWD
    WORK="$ORIGIN/$WORK"
    cd "$TREE"
    export PYTHONPATH="$TREE:$SITE"
fi
log "installed: $($PY -c 'import aotc, transformers, diffusers; print("aotc", aotc.__version__, "transformers", \
transformers.__version__, "diffusers", diffusers.__version__)' 2>&1 | tail -1)"

# 2. the C++ runtime, against this torch's libtorch; nlohmann-json and OpenSSL's headers from the debs (for the suite)
if [ "${GPU_CHECK_SUITE:-1}" = 1 ]; then
    mkdir -p "$DEPS"
    for deb in "$WHEELS"/debs/*.deb; do dpkg -x "$deb" "$DEPS"; done
    ldconfig -p | grep -q "libcrypto.so.3 " || export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    CPP=build/cpp-gpu
    { cmake -S cpp -B "$CPP" -G Ninja $($PY cpp/cmake_args.py) -DNLOHMANN_JSON_INCLUDE="$DEPS/usr/include" \
        -Dnlohmann_json_DIR="$DEPS/usr/share/cmake/nlohmann_json" -DOPENSSL_ROOT_DIR="$DEPS/usr" \
        -DCMAKE_CXX_FLAGS="-I$DEPS/usr/include/x86_64-linux-gnu" && ninja -C "$CPP"; } > "$WORK/cpp-build.log" 2>&1
    if [ $? -eq 0 ]; then log "C++ runtime built ($CPP)"; else log "the C++ runtime did not build (cpp-build.log)"; fi
    export AOTC_CPP_BUILD="$PWD/$CPP"
fi

# 3. the CUDA suite, with 60% of what is left; past it, SIGINT: pytest stops and still writes its report.
#    GPU_CHECK_SUITE=0 leaves it out: a second call, with the benchmark alone, for the rows the first had no time for
if [ "${GPU_CHECK_SUITE:-1}" = 1 ]; then
    SUITE_S=$(( (BUDGET - $(elapsed)) * 3 / 5 ))
    log "the CUDA suite (at most ${SUITE_S}s)"
    # two samples by default: the suite compiles each sample in four graph kinds for the GPU
    # before its first test, and five samples (20 bundles) took over 134 s on an H200's 16 cores
    export AOTC_CUDA_SUITE_SAMPLES=${AOTC_CUDA_SUITE_SAMPLES:-mlp,tiny_transformer}
    # -v: a line per test as it ends, which gpu_report reads when a killed run wrote no XML
    timeout -s INT -k 30 "$SUITE_S" $PY -m pytest -v -m cuda tests/test_cuda.py tests/test_compile.py -p no:cacheprovider \
        -rfEs --junitxml "$WORK/cuda-suite.xml" > "$WORK/cuda-suite.log" 2>&1
    echo $? > "$WORK/cuda-suite.exit"  # 2: interrupted at its time limit
    log "the CUDA suite: exit $(cat "$WORK/cuda-suite.exit") ($(tail -1 "$WORK/cuda-suite.log"))"
fi

# 4. the benchmark, in the time left (it records what it had no time for)
BENCH_S=$(( BUDGET - $(elapsed) - 20 ))
log "the benchmark (budget ${BENCH_S}s)"
$PY benchmarks/gpu/bench.py --out "$WORK" --budget-s "$BENCH_S" ${BENCH_ARGS:-} > "$WORK/bench.log" 2>&1
log "the benchmark: exit $?"

# 5. one report; on the device, the report, the suite's log and every other log (one archive) to $OUT
$PY benchmarks/gpu/gpu_report.py "$WORK" && log "wrote $WORK/gpu-report.md"
if [ -n "${OUT:-}" ]; then
    cp "$WORK"/gpu-report.md "$WORK"/gpu-report.json "$WORK"/cuda-suite.log "$WORK"/steps.log "$OUT"/ 2>/dev/null
    tar -czf "$OUT/gpu-check-logs.tgz" -C "$WORK" --exclude "*.pt2" --exclude "*.safetensors" .
fi
