"""Where the diffusion models' time goes, and how far compiling them can go (issue 48, part 7).

The suite's unet2d_condition and vae_decoder read 1.16x and 1.09x eager for aotc at 1 thread,
under TorchBench's published 1.29x. For each, at 1 thread, in fresh processes that take
turns, each checked against eager first:

- eager, aotc (`aotc compile`, weights folded), and torch.compile with freezing, timed;
- eager's and torch.compile's profiles, the self time of each op sorted into convolution,
  linear and matmul, attention, normalization, and the rest (for torch.compile, the rest is
  its generated kernels and wrapper);
- the ceiling: eager's time over the time torch.compile's oneDNN and attention calls alone
  take. aotc's package makes the same calls (its wrapper.cpp is counted the same way), so
  no generated code, however fast, lifts it past that.
- what was tried beside the default: `aotc compile --freeze` (weights embedded; freezing's
  layout optimization already runs the convolutions channels-last), and each attention
  size written as matmul, softmax and matmul instead of torch's SDPA, timed alone.

    .venv/bin/python benchmarks/diffusion_profile.py [--models unet2d_condition,vae_decoder] [--rounds 3] [--out PATH]

Writes benchmarks/diffusion_profile.{md,json} (or PATH.{md,json}). About 10 minutes on 2 cores.
Any suite model can be studied the same way: `--models bert,gpt2,wav2vec2 --out
benchmarks/text_profile` bounds the text and audio families (about 5 minutes a model).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite_variants  # noqa: E402

VARIANTS = ("eager", "aotc", "aotc --freeze", "tc freeze")
# an op's category by its profiler name (self time; the first pattern that matches)
CATEGORIES = {
    "convolution": r"convolution|conv2d|conv_transpose",
    "linear and matmul": r"aten::(addmm|mm|bmm|baddbmm|linear|matmul)$|_linear_pointwise|_mkl_linear",
    "attention": r"scaled_dot_product|attention",
    "normalization": r"group_norm|layer_norm|batch_norm",
}
EXTERN_CALLS = {  # what aotc's package calls outside its generated kernels
    "convolution": r"aoti_torch_cpu_(?:mkldnn_)?_convolution_pointwise\w*\(|aoti_torch_cpu_convolution\w*\(",
    "linear and matmul": r"aoti_torch_cpu__linear_pointwise\w*\(|aoti_torch_cpu_(?:mm|addmm|bmm|baddbmm)_out\(",
    "attention": r"aoti_torch_cpu__scaled_dot_product\w*\(",
}


def categorize(profile: dict[str, float]) -> dict[str, float]:
    """ms per call by category; "the rest" is every other op (and torch.compile's kernels)."""
    out = {c: 0.0 for c in (*CATEGORIES, "the rest")}
    for op, ms in profile.items():
        if op.startswith("ProfilerStep") or "Torch-Compiled Region" in op:
            continue
        out[next((c for c, p in CATEGORIES.items() if re.search(p, op)), "the rest")] += ms
    return {c: round(ms, 2) for c, ms in out.items()}


def package_calls(bundle: Path) -> dict[str, int]:
    with zipfile.ZipFile(bundle / "compiled" / "cpu" / "inference.pt2") as z:
        code = "\n".join(z.read(n).decode() for n in z.namelist() if n.endswith("wrapper.cpp"))
    calls = {c: len(re.findall(p, code)) for c, p in EXTERN_CALLS.items()}
    calls["generated kernels"] = len(set(re.findall(r"\bcpp_fused_\w+_\d+\b", code)))
    return calls


def attention_calls(source: str) -> list[dict]:
    """Each attention call's sizes in the model's example call, timed alone (1 thread, median
    of 20): torch's SDPA, as every variant runs it, and the same attention written as matmul,
    softmax and matmul, as a compiler would have to generate it."""
    import collections
    import runpy
    import statistics
    import time

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    spec = runpy.run_path(source)
    model = spec["build_model"]()
    args, kwargs = suite_variants.call_inputs(spec)
    seen: collections.Counter = collections.Counter()
    sdpa = F.scaled_dot_product_attention

    def logged(q, k, v, *rest, **options):
        seen[(tuple(q.shape), tuple(k.shape))] += 1
        return sdpa(q, k, v, *rest, **options)

    F.scaled_dot_product_attention = logged  # diffusers' attention calls it through F
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        F.scaled_dot_product_attention = sdpa

    def median_ms(fn) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(20):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    rows = []
    for (q_shape, k_shape), calls in seen.items():
        q, k, v = torch.randn(q_shape), torch.randn(k_shape), torch.randn(k_shape)
        decomposed = lambda: (q @ k.transpose(-1, -2) * q_shape[-1] ** -0.5).softmax(-1) @ v  # noqa: E731
        assert torch.allclose(decomposed(), sdpa(q, k, v), atol=1e-5)
        rows.append({"query": list(q_shape), "key": list(k_shape), "calls": calls,
                     "sdpa_ms": round(median_ms(lambda: sdpa(q, k, v)), 2), "decomposed_ms": round(median_ms(decomposed), 2)})
    return rows


def study(name: str, rounds: int, tmp: Path, say) -> dict:
    say(f"{name}: aotc compile, and with --freeze")
    bundles = {"aotc": suite_variants.compile_bundle(name, tmp),
               "aotc --freeze": suite_variants.compile_bundle(name, tmp / "frozen", "--freeze")}
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for k in range(rounds):
        for variant in VARIANTS:
            say(f"{name}: {variant} (process {k + 1} of {rounds})")
            child = "aotc" if variant.startswith("aotc") else variant
            runs[variant].append(suite_variants.run(child, name, bundles.get(variant, bundles["aotc"]), tmp,
                                                    profile=k == 0 and not variant.startswith("aotc")))
    timed = {v: suite_variants.summary(rs) for v, rs in runs.items()}
    say(f"{name}: attention calls")
    proc = subprocess.run([sys.executable, __file__, "--attention", str(suite_variants.SUITE / f"{name}.py")],
                          env=suite_variants.env(tmp), capture_output=True, text=True, check=True)
    return {"timed": timed, "calls": package_calls(bundles["aotc"]),
            "attention": json.loads(proc.stdout.strip().splitlines()[-1]),
            "profiles": {v: categorize(t.pop("profile")) for v, t in timed.items() if t.get("profile")}}


def host_line(results: dict) -> str:
    host = results.get("host")  # runs before it was recorded have none
    return f"{host['cpu']} (instruction set {host['isa']}), aotc {host['commit']}" if host else "an unrecorded host"


def report(results: dict) -> str:
    lines = [f"# Where the time goes: {', '.join(results['models'])}", "",
             f"Made by `benchmarks/diffusion_profile.py` on {host_line(results)}, 1 thread, torch {results['torch']}. "
             "Each variant's first "
             "call is checked against eager's output (rtol and atol 1e-3) before it is timed; times are medians "
             "over fresh processes that take turns, ± their spread.", ""]
    for name, r in results["models"].items():
        eager = r["timed"]["eager"]["median_ms"]
        lines += [f"## {name}", "", "| variant | ms per call | speed over eager | check |", "|---|---|---|---|"]
        for v, t in r["timed"].items():
            lines.append(f"| {v} | {t['median_ms']:.2f} ±{100 * t['spread']:.0f}% | {eager / t['median_ms']:.2f}x | "
                         f"{t['check']} |" if t["median_ms"] else f"| {v} | - | - | {t['check']} |")
        profiles = r["profiles"]
        lines += ["", "The profiler's self time, ms per call:", "", "| category | " + " | ".join(profiles) + " |",
                  "|---|" + "---|" * len(profiles)]
        for c in (*CATEGORIES, "the rest"):
            lines.append(f"| {c} | " + " | ".join(f"{p[c]:.2f}" for p in profiles.values()) + " |")
        compiled = profiles.get("tc freeze")
        if compiled:
            floor = sum(compiled[c] for c in EXTERN_CALLS)
            lines += ["", f"torch.compile with freezing spends {floor:.2f} ms per call in oneDNN's convolutions and "
                      f"linears and in attention; with its generated kernels taking no time at all it would be "
                      f"{eager / floor:.2f}x eager. aotc's package makes the same kinds of calls: "
                      + ", ".join(f"{n} {c}" for c, n in r["calls"].items()) + "."]
        lines += ["", "Each attention size, alone: torch's SDPA (every variant's) against the same attention "
                  "as matmul, softmax and matmul:", "",
                  "| query | key | calls per model call | SDPA | decomposed |", "|---|---|---|---|---|"]
        for a in r["attention"]:
            lines.append(f"| {tuple(a['query'])} | {tuple(a['key'])} | {a['calls']} | {a['sdpa_ms']:.2f} ms | "
                         f"{a['decomposed_ms']:.2f} ms |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    if sys.argv[1:2] == ["--attention"]:
        print(json.dumps(attention_calls(sys.argv[2])))
        return 0
    return suite_variants.main(__doc__.split("\n\n")[0], "unet2d_condition,vae_decoder",
                               suite_variants.ROOT / "benchmarks" / "diffusion_profile", study, report)


if __name__ == "__main__":
    sys.exit(main())
