"""oneDNN's prepacked linear with its post-op (the residual add, GELU, SiLU or tanh that
inductor's freezing fuses into mkldnn._linear_pointwise) against the same linear with no
post-op and the pointwise op run after it: the measurement behind linear_post_ops_pay
(exporters/aoti_frozen.py). The sizes are the suite's text and vision models' layers.

Every call's output is compared with the unfused pair's before it is timed. Per thread
count, --repeats rounds in which the two variants take turns, each a median of --iters
calls; the table gives the median of the rounds and their min-max.

    .venv/bin/python benchmarks/linear_post_ops.py [--threads 1,2] [--repeats 5] [--iters 30]

Writes benchmarks/linear_post_ops.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from linear_prepack import _median_ms  # noqa: E402  (the same timing as the calls it extends)

OUT = Path(__file__).resolve().parent / "linear_post_ops.md"
# (layer, rows, in, out, post-op): the post-ops inductor fuses into these models' linears
LAYERS = [
    ("BERT attention output + residual", 256, 768, 768, "add"),
    ("BERT FFN up + GELU", 256, 768, 3072, "gelu"),
    ("BERT FFN down + residual", 256, 3072, 768, "add"),
    ("ViT attention output + residual", 197, 768, 768, "add"),
    ("GPT-2 FFN up + GELU (tanh)", 128, 768, 3072, "gelu_tanh"),
    ("Llama gate + SiLU", 128, 768, 2048, "swish"),
    ("Llama down + residual", 128, 2048, 768, "add"),
    ("pooler + tanh (2 rows)", 2, 768, 768, "tanh"),
]
UNARY = {"gelu": ("gelu", [], "none"), "gelu_tanh": ("gelu", [], "tanh"), "swish": ("swish", [], ""),
         "tanh": ("tanh", [], "")}
SEPARATE = {"gelu": torch.nn.functional.gelu, "gelu_tanh": lambda y: torch.nn.functional.gelu(y, approximate="tanh"),
            "swish": torch.nn.functional.silu, "tanh": torch.tanh}


def calls(rows: int, k: int, n: int, post_op: str) -> dict:
    x, w, b, other = torch.randn(rows, k), torch.randn(n, k), torch.randn(n), torch.randn(rows, n)
    packed = torch.ops.mkldnn._reorder_linear_weight(w, rows)
    linear = torch.ops.mkldnn._linear_pointwise
    plain = lambda: linear(x, packed, b, "none", [], "")  # noqa: E731
    if post_op == "add":
        return {"fused": lambda: linear(x, other, packed, b, "add"), "separate": lambda: plain() + other}
    return {"fused": lambda: linear(x, packed, b, *UNARY[post_op]), "separate": lambda: SEPARATE[post_op](plain())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30)
    args = parser.parse_args()
    isa = torch.backends.cpu.get_cpu_capability()
    lines = [f"# oneDNN's linear post-ops against a separate pointwise op, {isa}", "",
             f"`benchmarks/linear_post_ops.py --threads {args.threads} --repeats {args.repeats} --iters {args.iters}`, "
             f"torch {torch.__version__}, instruction set {isa}. Milliseconds a call, median of {args.repeats} "
             "interleaved medians (min-max). fused: `mkldnn._linear_pointwise` with the post-op, as inductor's "
             "freezing fuses it; separate: the same prepacked linear with no post-op, then the op in eager (a folded "
             "package runs it as a generated kernel). A ratio over 1 means the post-op is slower.", ""]
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        lines += [f"## {threads} thread{'s' if threads > 1 else ''}", "",
                  "| layer | rows, in, out | fused | separate | fused / separate |", "|---|---|---|---|---|"]
        for name, rows, k, n, post_op in LAYERS:
            fns = calls(rows, k, n, post_op)
            torch.testing.assert_close(fns["fused"](), fns["separate"](), rtol=1e-4, atol=1e-4)
            for fn in (*fns.values(), *fns.values()):  # warm both (oneDNN builds its primitive on a first call)
                fn()
            ms = {v: [] for v in fns}
            for _ in range(args.repeats):
                for v, fn in fns.items():
                    ms[v].append(_median_ms(fn, args.iters))
            med = {v: statistics.median(t) for v, t in ms.items()}
            cells = " | ".join(f"{med[v]:.3f} ({min(ms[v]):.3f}-{max(ms[v]):.3f})" for v in fns)
            row = f"| {name} | {rows}, {k}, {n} | {cells} | {med['fused'] / med['separate']:.2f} |"
            print(f"{threads}t {row}", flush=True)
            lines.append(row)
        lines.append("")
    OUT.write_text("\n".join(lines))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
