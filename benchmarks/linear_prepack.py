"""oneDNN's prepacked linear and convolution against aten's own calls (and MKL's packed
linear), on this CPU, at 1 and 2 threads: the measurement behind folding linear layers on
every CPU (exporters/aoti_frozen.py).

Inductor's freezing, ahead of time, turns each linear layer into oneDNN's prepacked linear
(`mkldnn._linear_pointwise` on a weight reordered once) and each convolution into oneDNN's
prepacked convolution. Those are the calls a folded package makes; a package with its
weights as inputs calls aten's addmm (MKL's sgemm) and aten's convolution. This times both
at the suite models' sizes: BERT's, ViT's and a 128-token decoder prefill's linears (GPT-2's
fused QKV and LM head) at their example sizes, ResNet's and ConvNeXt's convolutions. Each pair's outputs are compared before timing; the two calls take
turns, and each figure is the median of the repeats' medians, with the spread (min-max).

    .venv/bin/python benchmarks/linear_prepack.py [--iters 30] [--repeats 5] [--threads 1,2]

Writes benchmarks/linear_prepack.md (the instruction set named in it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent / "linear_prepack.md"

# (rows, in, out[, bias]): rows = batch x tokens
LINEARS = {
    "BERT attention (2x128 tokens, 768->768)": (256, 768, 768),
    "BERT FFN up (768->3072)": (256, 768, 3072),
    "BERT FFN down (3072->768)": (256, 3072, 768),
    "ViT attention (197 tokens, 768->768)": (197, 768, 768),
    "ViT FFN up (768->3072)": (197, 768, 3072),
    "prefill (128 tokens, 768->2304, GPT-2's QKV)": (128, 768, 2304),
    "prefill FFN up (128 tokens, 768->3072)": (128, 768, 3072),
    "prefill FFN down (128 tokens, 3072->768)": (128, 3072, 768),
    "prefill LM head (128 tokens, 768->8192, no bias)": (128, 768, 8192, False),
    "one token (768->768)": (1, 768, 768),
}
# (channels in, size, channels out, kernel, groups)
CONVS = {
    "ResNet stem (3->64, 7x7, 224px)": (3, 224, 64, 7, 1),
    "ResNet 3x3 (64, 56px)": (64, 56, 64, 3, 1),
    "ResNet 3x3 (512, 7px)": (512, 7, 512, 3, 1),
    "ConvNeXt depthwise (96, 7x7, 56px)": (96, 56, 96, 7, 96),
}


def _median_ms(fn, iters: int) -> float:
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def linear_calls(rows: int, k: int, n: int, bias: bool = True) -> dict:
    x, w, b = torch.randn(rows, k), torch.randn(n, k), torch.randn(n) if bias else None
    packed = torch.ops.mkldnn._reorder_linear_weight(w, rows)
    mkl = torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
    return {"aten": (lambda: torch.addmm(b, x, w.t())) if bias else (lambda: torch.mm(x, w.t())),
            "onednn": lambda: torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], ""),
            "mkl": lambda: torch.ops.mkl._mkl_linear(x, mkl, w, b, rows)}


def conv_calls(c: int, size: int, out: int, kernel: int, groups: int):
    x = torch.randn(1, c, size, size)
    w, b = torch.randn(out, c // groups, kernel, kernel), torch.randn(out)
    pad, one = [kernel // 2] * 2, [1, 1]
    packed = torch.ops.mkldnn._reorder_convolution_weight(w, pad, one, one, groups, list(x.shape))
    return {"aten": lambda: torch.nn.functional.conv2d(x, w, b, 1, kernel // 2, 1, groups),
            "onednn": lambda: torch.ops.mkldnn._convolution_pointwise(x, packed, b, pad, one, one, groups,
                                                                      "none", [], "")}


def measure(calls: dict, iters: int, repeats: int) -> dict:
    with torch.no_grad():
        for fn in calls.values():
            torch.testing.assert_close(fn(), calls["aten"](), rtol=1e-3, atol=1e-3)
            fn(), fn()  # warm up
        runs = {k: [] for k in calls}
        for _ in range(repeats):  # the calls take turns
            for k, fn in calls.items():
                runs[k].append(_median_ms(fn, iters))
    return {k: (statistics.median(v), min(v), max(v)) for k, v in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", default="1,2", help="thread counts, one table each")
    args = parser.parse_args()
    torch.manual_seed(0)
    isa = torch.backends.cpu.get_cpu_capability()
    lines = [f"# oneDNN's prepacked calls against aten's, {isa}", "",
             f"`benchmarks/linear_prepack.py --iters {args.iters} --repeats {args.repeats} --threads {args.threads}`, "
             f"torch {torch.__version__}, instruction set {isa}. Milliseconds a call, median of {args.repeats} "
             "interleaved medians (min-max); a ratio over 1 means the prepacked call is slower than aten's. "
             "aten: addmm (MKL's sgemm) and conv2d, what a package with its weights as inputs calls; oneDNN "
             "prepacked: what inductor's freezing makes ahead of time (a folded package); MKL packed: what it "
             "makes compiling just in time with static sizes (torch.compile with freezing), which an ahead-of-time "
             "package cannot hold (the packed matrix may not move in memory)."]

    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        lines += ["", f"## {threads} thread{'s' if threads > 1 else ''}", "",
                  "| layer | aten | oneDNN prepacked | MKL packed | oneDNN / aten | MKL / aten |",
                  "|---|---|---|---|---|---|"]
        print(f"{threads} thread(s)", flush=True)
        _tables(lines, args)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


def _tables(lines: list, args) -> None:
    def cell(figures) -> str:
        median, low, high = figures
        return f"{median:.3f} ({low:.3f}-{high:.3f})"

    for table, make in ((LINEARS, linear_calls), (CONVS, conv_calls)):
        for name, shape in table.items():
            r = measure(make(*shape), args.iters, args.repeats)
            a = r["aten"][0]
            mkl = (cell(r["mkl"]), f"{r['mkl'][0] / a:.2f}") if "mkl" in r else ("", "")
            row = (f"| {name} | {cell(r['aten'])} | {cell(r['onednn'])} | {mkl[0]} | "
                   f"{r['onednn'][0] / a:.2f} | {mkl[1]} |")
            print(row, flush=True)
            lines.append(row)


if __name__ == "__main__":
    main()
