"""Shape profiles against the generic package (issue 50), on the suite's GPT-2, BERT and ResNet.

Each model is exported once with a dynamic dim (GPT-2: the sequence; BERT and ResNet: the
batch) and compiled twice with `aotc.compile`: once generic (one package, size-generic
kernels for the whole range), once with two profiles beside it: the small size alone
(static kernels) and a range around the large size. At the small and the large size, in one
process at 1 thread, these run side by side:

- eager: the transformers model itself;
- torch.compile: `torch.compile(model, dynamic=False)`, inductor's kernels specialized to
  each size (the strongest baseline a user could pick where recompiling per size is allowed;
  its compile time per size is reported);
- aotc generic: the bundle compiled without profiles;
- aotc profile: the bundle compiled with profiles, each call picking its package.

Every variant's logits are checked against eager's before anything is timed. Timing is
interleaved (one round of each variant in turn, the order rotated each round); each figure
is the median over rounds of the mean time per call within a round, with the rounds'
min..max beside it. The profile's speedup is the median over rounds of the generic
package's time over the profile's in the same round (paired, so that the machine's drift
between rounds cancels), with its quartiles. Compile time and bytes on disk are those of
each package, with fresh aotc and inductor caches.

Why a profile gains or not, from the generated code: the library calls each package makes
(GEMMs, convolutions, attention: inductor calls them, it does not write them), the weights
each packs at load for them, the lines of generated kernels, and the share of eager's time
those library ops take at that size (torch.profiler). Where both packages make the same
calls on weights packed alike, a profile gains at most 1 / that share: the rest made free.

    .venv/bin/python benchmarks/profiles.py [--rounds 11] [--models gpt2,bert,resnet]

Writes benchmarks/profiles.json and benchmarks/profiles.md.
"""

from __future__ import annotations

import argparse
import collections
import difflib
import importlib.util
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "aotc" / "tools" / "suite_models"
OUT = Path(__file__).resolve().parent
_SCRATCH = Path(tempfile.mkdtemp(prefix="aotc-profiles-"))
os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(_SCRATCH / "inductor")  # compile times from scratch

import torch  # noqa: E402

sys.path.insert(0, str(ROOT))
import aotc  # noqa: E402
from aotc.errors import UnsignedNativeCodeWarning  # noqa: E402


@dataclass
class Case:
    name: str
    dim: str  # INPUT:DIM, as --profile takes it
    small: int
    large: int
    large_range: tuple[int, int]  # the large size's profile

    def profiles(self) -> tuple[str, ...]:
        lo, hi = self.large_range
        return (f"{self.dim}={self.small}", f"{self.dim}={lo}..{hi}")


CASES = {
    "gpt2": Case("gpt2", "input_ids:1", small=1, large=128, large_range=(65, 256)),
    "bert": Case("bert", "input_ids:0", small=1, large=16, large_range=(9, 32)),
    "resnet": Case("resnet", "pixel_values:0", small=1, large=16, large_range=(9, 32)),
}


def _suite_module(name: str):
    spec = importlib.util.spec_from_file_location(f"suite_{name}", SUITE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(name: str, size: int) -> tuple[tuple, dict]:
    g = torch.Generator().manual_seed(size)
    if name == "gpt2":
        return (torch.randint(0, 8192, (1, size), generator=g),), {}
    if name == "bert":
        ids = torch.randint(1000, 20000, (size, 128), generator=g)
        return (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    return (torch.randn(size, 3, 128, 128, generator=g),), {}


def dynamic_shapes(name: str) -> dict:
    if name == "gpt2":
        return {"input_ids": {1: torch.export.Dim("seq", min=1, max=512)}}
    batch = torch.export.Dim("batch", min=1, max=64)
    if name == "bert":
        return {"input_ids": {0: batch}, "attention_mask": {0: batch}}
    return {"pixel_values": {0: batch}}


def _compiled_files(path: Path) -> dict[str, int]:
    bundle = aotc.Bundle.open(path)
    return {f.path: f.size for f in bundle.manifest.files if f.kind == "compiled"}


def build(case: Case, model, work: Path, say) -> dict:
    """Export, then the generic bundle and the profiled one: their compile times and sizes."""
    args, kwargs = inputs(case.name, 2)  # the suite's example sizes, 2 for the dim export keeps dynamic
    exported = work / "export"
    started = time.perf_counter()
    aotc.export(model, (args, kwargs), exported, dynamic_shapes=dynamic_shapes(case.name), force=True)
    say(f"{case.name}: exported in {time.perf_counter() - started:.1f} s")
    cache = work / "aotc-cache"
    out = {}
    for variant, profiles in (("generic", ()), ("profiled", case.profiles())):
        path = work / variant
        shutil.copytree(exported, path)
        started = time.perf_counter()
        # the profiled bundle's generic package comes from the cache the generic compile filled
        aotc.compile(path, cache_dir=cache, profiles=profiles)
        out[variant] = {"path": str(path), "seconds": time.perf_counter() - started, "files": _compiled_files(path)}
        say(f"{case.name}: {variant} compiled in {out[variant]['seconds']:.1f} s")
    return out


# eager ops that are library calls in the packages too (extern kernels inductor does not generate)
LIBRARY_OPS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::mkldnn_convolution",
               "aten::_slow_conv2d_forward", "aten::_scaled_dot_product_flash_attention_for_cpu")


def _package_code(path: Path, suffix: str) -> str:
    with zipfile.ZipFile(path) as archive:
        return next(archive.read(n).decode() for n in archive.namelist() if n.endswith(suffix))


def code_facts(generic: Path, profile: Path) -> dict:
    """What differs between the two packages' code: the library calls of each wrapper, the
    weights each packs at load for those calls (weight_fold.json: the packing op, and the
    sizes it packs for), and the lines of their generated kernels."""
    def calls(path):
        return dict(collections.Counter(re.findall(r"aoti_torch_cpu_(\w+)\(", _package_code(path, "wrapper.cpp"))))

    def packed(path):
        nodes = json.loads(_package_code(path, "weight_fold.json"))["nodes"]
        found = collections.Counter(f"{n['op'].split('::')[1]} for {json.dumps(n['args'][-1])}"
                                    for n in nodes if "_reorder_" in n["op"])
        return dict(found)

    def kernel_lines(path):
        return sum(1 for line in _package_code(path, "kernel.cpp").splitlines() if not line.lstrip().startswith("//"))

    return {"generic_calls": calls(generic), "profile_calls": calls(profile),
            "generic_packed": packed(generic), "profile_packed": packed(profile),
            "generic_kernel_lines": kernel_lines(generic), "profile_kernel_lines": kernel_lines(profile)}


def library_share(model, args, kwargs) -> float:
    """The share of eager's op time in LIBRARY_OPS (torch.profiler, 10 calls)."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            model(*args, **kwargs)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    return sum(e.self_cpu_time_total for e in events if e.key in LIBRARY_OPS) / total


def _logits(out) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out[0]


def _round(fn, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e3


def measure(case: Case, model, built: dict, rounds: int, say) -> list[dict]:
    generic = aotc.load(built["generic"]["path"], backend="aoti")
    profiled = aotc.load(built["profiled"]["path"], backend="aoti")
    compiled = torch.compile(model, dynamic=False)
    rows = []
    for size in (case.small, case.large):
        args, kwargs = inputs(case.name, size)
        variants = {"eager": model, "torch.compile": compiled, "aotc generic": generic, "aotc profile": profiled}
        with torch.no_grad():
            want = _logits(model(*args, **kwargs))
            started = time.perf_counter()
            compiled(*args, **kwargs)
            compile_s = time.perf_counter() - started
            errors = {}
            for name, fn in variants.items():
                got = _logits(fn(*args, **kwargs))
                torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3,
                                           msg=lambda m, name=name: f"{case.name} at {size}, {name}: {m}")
                errors[name] = (got - want).abs().max().item()
            once = _round(lambda: profiled(*args, **kwargs), 3)  # calls a round: about 0.5 s of the slowest
            iters = max(3, int(500 / max(once, 1e-3) / 2))
            times = {name: [] for name in variants}
            order = list(variants)
            for r in range(rounds):
                for name in order[r % len(order):] + order[:r % len(order)]:
                    fn = variants[name]
                    times[name].append(_round(lambda fn=fn: fn(*args, **kwargs), iters))
        row = {"model": case.name, "dim": case.dim, "size": size, "iters": iters, "rounds": rounds,
               "torch_compile_s": compile_s, "max_abs_error": errors,
               "ms": {n: statistics.median(t) for n, t in times.items()},
               "spread": {n: [min(t), max(t)] for n, t in times.items()}}
        # paired: the two packages' times of one round, a few seconds apart, against each other
        ratios = [g / q for g, q in zip(times["aotc generic"], times["aotc profile"])]
        row["profile_over_generic"] = statistics.median(ratios)
        row["ratio_quartiles"] = statistics.quantiles(ratios, n=4)[::2]
        row["library_share"] = library_share(model, args, kwargs)
        k = 0 if size == case.small else 1
        row["code"] = code_facts(Path(built["generic"]["path"]) / "compiled/cpu/inference.pt2",
                                 Path(built["profiled"]["path"]) / f"compiled/cpu/inference_p{k}.pt2")
        rows.append(row)
        say(f"{case.name} at {size}: " + ", ".join(f"{n} {v:.2f} ms" for n, v in row["ms"].items())
            + f"; profile {row['profile_over_generic']:.2f}x generic")
    return rows


def report(results: dict) -> str:
    lines = [
        "# Shape profiles on the suite's GPT-2, BERT and ResNet",
        "",
        "`benchmarks/profiles.py` (issue 50), run on this machine's CPU at 1 thread "
        f"({results['machine']}), torch {results['torch']}. Each model is exported with a dynamic dim and "
        "compiled twice: generic (one package for the whole range) and with two profiles beside the generic "
        "package, the small size alone (static kernels) and a range around the large size. Every variant's "
        "logits matched eager's (max abs error in the JSON) before timing. Medians of "
        f"{results['rounds']} interleaved rounds, ms per call, the rounds' min..max in brackets. The last column "
        "is the median over rounds of the generic package's time over the profile's in the same round, its "
        "quartiles in brackets.",
        "",
        "| model | dim | size | eager | torch.compile (static) | aotc generic | aotc profile | profile / generic |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in results["rows"]:
        cells = [f"{row['ms'][n]:.2f} [{row['spread'][n][0]:.2f}..{row['spread'][n][1]:.2f}]"
                 for n in ("eager", "torch.compile", "aotc generic", "aotc profile")]
        q1, q3 = row["ratio_quartiles"]
        lines.append(f"| {row['model']} | {row['dim']} | {row['size']} | " + " | ".join(cells)
                     + f" | **{row['profile_over_generic']:.2f}x** [{q1:.2f}..{q3:.2f}] |")
    lines += ["", "Why, from the generated code of the generic package and the profile that ran: the library "
              "calls each makes (kernels inductor calls and does not write: GEMMs, convolutions, attention), the "
              "weights each packs at load for them and the sizes it packs for, the lines of generated kernels, and the "
              "share of eager's op time in those library ops at that size. Where both make the same calls on weights "
              "packed alike, the profile can only change the rest: it gains at most 1 / that share.", "",
              "| model | size | library calls | weights packed at load: generic / profile | kernel lines | "
              "library share of eager | at most |", "| --- | ---: | --- | --- | ---: | ---: | ---: |"]

    def packs(packed: dict) -> str:
        """'9 linear for 2 rows', '17 convolution for inputs [1, 3, 128, 128] and 10 other sizes'."""
        by_op: dict[str, list] = {}
        for key, count in packed.items():
            op, _, size = key.partition(" for ")
            by_op.setdefault(op.removeprefix("_reorder_").removesuffix("_weight"), []).append((size, count))
        out = []
        for op, sizes in sorted(by_op.items()):
            total = sum(c for _, c in sizes)
            first = sizes[0][0]
            what = f"{first} rows" if not first.startswith("[") else f"inputs {first}"
            others = f" and {len(sizes) - 1} other sizes" if len(sizes) > 1 else ""
            out.append(f"{total} {op} for {what}{others}")
        return ", ".join(out) or "none"

    for row in results["rows"]:
        code = row["code"]
        same_calls = code["generic_calls"] == code["profile_calls"]
        calls = ", ".join(f"{n} x{c}" for n, c in sorted(code["profile_calls"].items()))
        alike = {op.split(" for ")[0] for op in code["generic_packed"]} == {
            op.split(" for ")[0] for op in code["profile_packed"]}
        bound = f"{1 / row['library_share']:.2f}x" if same_calls and alike else "- (packing differs)"
        lines.append(f"| {row['model']} | {row['size']} | {'same in both' if same_calls else 'differ'}: {calls} | "
                     f"{packs(code['generic_packed'])} / {packs(code['profile_packed'])} | "
                     f"{code['generic_kernel_lines']} / {code['profile_kernel_lines']} | "
                     f"{100 * row['library_share']:.0f}% | {bound} |")
    lines += ["", "What the profiles cost (fresh caches; the profiled bundle's generic package is the generic "
              "bundle's, copied from aotc's cache):", "",
              "| model | generic: compile s, package MiB | profiles: compile s | profile packages MiB | "
              "torch.compile s per size |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, built in results["builds"].items():
        generic_mib = sum(built["generic"]["files"].values()) / 2**20
        extra = {p: s for p, s in built["profiled"]["files"].items() if "_p" in p}
        per_size = [f"{r['torch_compile_s']:.1f}" for r in results["rows"] if r["model"] == name]
        lines.append(f"| {name} | {built['generic']['seconds']:.1f} s, {generic_mib:.1f} | "
                     f"{built['profiled']['seconds']:.1f} | "
                     + ", ".join(f"{Path(p).name} {s / 2**20:.1f}" for p, s in sorted(extra.items()))
                     + f" | {', '.join(per_size)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--models", default="gpt2,bert,resnet")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UnsignedNativeCodeWarning)  # bundles it just compiled

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    results = {"torch": torch.__version__, "rounds": args.rounds, "threads": args.threads,
               "machine": f"{os.cpu_count()} cores", "rows": [], "builds": {}}
    for name in args.models.split(","):
        case = CASES[name]
        model = _suite_module(name).build_model().eval()
        built = build(case, model, _SCRATCH / name, say)
        results["builds"][name] = built
        results["rows"] += measure(case, model, built, args.rounds, say)
    (OUT / "profiles.json").write_text(json.dumps(results, indent=1) + "\n")
    (OUT / "profiles.md").write_text(report(results))
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    say("wrote benchmarks/profiles.md")


if __name__ == "__main__":
    main()
