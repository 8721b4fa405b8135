"""The C++ runtime's costs beside the Python runtime's, on the same compiled bundles
(make cpp first); writes benchmarks/cpp/{results.json, report.md}.

- per call: `aotc::Module::forward` against `AOTIModelPackageLoader::run` alone on the same
  graph inputs (interleaved in one aotc-run process, `--bench`), and against the Python
  `aotc.load(..., backend="aoti")` call (medians);
- per training step: the C++ `train_step` against the Python one, on joint bundles that
  carry their optimizer;
- start-up to first output: `aotc-run BUNDLE --inputs ... --output ...` against
  `python -c "import aotc; aotc.load(BUNDLE)(x)"`, fresh processes, medians of --repeats;
- the size of aotc-run and libaotc_runtime.so (libtorch's own libraries come with torch).

    .venv/bin/python benchmarks/cpp_runtime.py [--threads 1] [--calls 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AOTC_RUN = ROOT / "build" / "cpp" / "aotc-run"
OUT = ROOT / "benchmarks" / "cpp"
INFERENCE = ["mlp", "gpt_small", "resnet18"]
TRAINING = [("mlp", "sgd"), ("tiny_transformer", "adamw")]

PYTHON_CALLS = """
import statistics, sys, time, torch, aotc
from safetensors.torch import load_file
path, inputs, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = aotc.load(path, backend="aoti")
names = [u.name for u in aotc.Bundle.open(path).signature.user_inputs]
args = [load_file(inputs)[n] for n in names]
times = []
with torch.no_grad():
    for k in range(calls + 10):
        t0 = time.perf_counter(); m(*args); t = time.perf_counter() - t0
        if k >= 10: times.append(t)
print(statistics.median(times) * 1e6)
"""

PYTHON_STEPS = """
import statistics, sys, time, torch, aotc
from safetensors.torch import load_file
path, data, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = aotc.load(path, backend="aoti", mode="train")
(name,) = [u.name for u in aotc.Bundle.open(path).signature.user_inputs]
batches = load_file(data)[name]
times = []
for k in range(steps):
    x = batches[k % len(batches)].clone()
    t0 = time.perf_counter(); m.train_step(x); times.append(time.perf_counter() - t0)
print(statistics.median(times[5:]) * 1e6)
"""

PYTHON_START = "import sys, aotc; from safetensors.torch import load_file; " \
               "m = aotc.load(sys.argv[1]); " \
               "print(m(*[load_file(sys.argv[2])[u.name] for u in aotc.Bundle.open(sys.argv[1]).signature.user_inputs]))"


def sh(args, env) -> str:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))} failed:\n{result.stderr[-2000:]}")
    return result.stdout


def wall(args, env, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sh(args, env)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def prepare(work: Path, env) -> dict:
    """Bundles of the sample models (inference, and joint with an optimizer), compiled."""
    import torch  # noqa: F401
    from safetensors.torch import save_file

    sys.path.insert(0, str(ROOT / "tests"))
    from aotc.sources.model_file import load_model

    out = {}
    for name in INFERENCE:
        path = work / name
        sh([ROOT / ".venv/bin/aotc", "compile", ROOT / "sample_models" / f"{name}.py", "-o", path], env)
        spec = load_model(str(ROOT / "sample_models" / f"{name}.py"))
        save_file({n: a.contiguous() for n, a in zip(_names(path), spec.args)}, work / f"{name}.in")
        out[name] = path
    for name, opt in TRAINING:
        path = work / f"{name}-{opt}"
        flags = ["--optimizer", opt, "--lr", "0.01"] + (["--momentum", "0.9"] if opt == "sgd" else [])
        sh([ROOT / ".venv/bin/aotc", "compile", ROOT / "sample_models" / f"{name}.py", "--joint", *flags, "-o", path], env)
        spec = load_model(str(ROOT / "sample_models" / f"{name}.py"))
        (n,) = _names(path)
        save_file({n: torch.stack([spec.args[0]] * 4)}, work / f"{name}-{opt}.data")
        out[(name, opt)] = path
    return out


def _names(path: Path) -> list[str]:
    return [u["name"] for u in json.loads((path / "signature.json").read_text())["user_inputs"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--steps", type=int, default=55)
    parser.add_argument("--repeats", type=int, default=5)
    a = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "AOTC_CACHE_DIR": str(ROOT / "build" / "aotc-cache"),
           "TORCHINDUCTOR_CACHE_DIR": str(ROOT / "build" / "inductor-cache")}
    env.pop("AOTC_PUBLIC_KEYS", None)
    python = ROOT / ".venv" / "bin" / "python"
    results: dict = {"threads": a.threads, "inference": {}, "training": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        bundles = prepare(work, env)
        for name in INFERENCE:
            path, inputs = bundles[name], work / f"{name}.in"
            bench = json.loads(sh([AOTC_RUN, path, "--inputs", inputs, "--bench", a.calls, "--json"], env))["bench"]
            py = float(sh([python, "-c", PYTHON_CALLS, path, inputs, a.calls], env))
            start_cpp = wall([AOTC_RUN, path, "--inputs", inputs, "--output", work / "out"], env, a.repeats)
            start_py = wall([python, "-c", PYTHON_START, path, inputs], env, a.repeats)
            results["inference"][name] = {"forward_us": bench["forward_us"], "package_run_us": bench["package_run_us"],
                                          "python_us": py, "cpp_start_s": start_cpp, "python_start_s": start_py}
            print(name, results["inference"][name], file=sys.stderr)
        for name, opt in TRAINING:
            path, data = bundles[(name, opt)], work / f"{name}-{opt}.data"
            summary = json.loads(sh([AOTC_RUN, path, "--train-steps", a.steps, "--data", data, "--json"], env))
            per = summary["step_seconds"]
            cpp = statistics.median(per[5:]) * 1e6
            py = float(sh([python, "-c", PYTHON_STEPS, path, data, a.steps], env))
            results["training"][f"{name}-{opt}"] = {"cpp_step_us": cpp, "python_step_us": py}
            print(name, opt, results["training"][f"{name}-{opt}"], file=sys.stderr)
    build = ROOT / "build" / "cpp"
    results["sizes"] = {"aotc-run": (build / "aotc-run").stat().st_size,
                        "libaotc_runtime.so": (build / "libaotc_runtime.so").stat().st_size}
    OUT.mkdir(exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (OUT / "report.md").write_text(report(results))
    print(report(results))


def report(r: dict) -> str:
    lines = [f"# The C++ runtime beside the Python runtime ({r['threads']} thread(s), medians)", "",
             "| model | Module::forward | AOTIModelPackageLoader::run | overhead | Python aotc.load call | "
             "aotc-run start to output | python -c 'import aotc; ...' |", "|---|---|---|---|---|---|---|"]
    for name, x in r["inference"].items():
        overhead = x["forward_us"] / x["package_run_us"] - 1
        lines.append(f"| {name} | {x['forward_us']:.1f} µs | {x['package_run_us']:.1f} µs | {overhead:+.1%} | "
                     f"{x['python_us']:.1f} µs | {x['cpp_start_s']:.2f} s | {x['python_start_s']:.2f} s |")
    lines += ["", "| joint bundle | C++ train_step | Python train_step |", "|---|---|---|"]
    for name, x in r["training"].items():
        lines.append(f"| {name} | {x['cpp_step_us']:.0f} µs | {x['python_step_us']:.0f} µs |")
    sizes = ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in r["sizes"].items())
    lines += ["", f"Sizes: {sizes} (beside libtorch's own libraries, which the torch wheel holds)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
