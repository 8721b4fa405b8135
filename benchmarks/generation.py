"""Generation throughput: aotc generation bundles against eager `generate` and a
torch.compile'd decode step, side by side in one process, on the same prompt.

For each model (GPT-2- and Llama-shaped, built from configs, no downloads):
- eager: `model.generate(ids, max_new_tokens=N, do_sample=False)` (transformers' own loop,
  dynamic cache);
- torch.compile: aotc's StaticCacheLM wrapper under `torch.compile` (inductor), driven by
  the same loop as aotc.generate (compile time reported apart; timing after warm-up);
- aotc fx and aotc aoti: `aotc.generate` on the bundle.
Every contestant must produce the same greedy tokens; tokens/s is new tokens over wall
time, median of `--repeats` runs (spread reported), with the same thread count.

    python benchmarks/generation.py [--new-tokens 64] [--repeats 3] [--threads 2]

Writes benchmarks/results/generation.json and generation.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

import aotc
from aotc.tools.generation import Sampling, StaticCacheLM

RESULTS = Path(__file__).resolve().parent / "results"


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=2048, n_embd=256, n_layer=4, n_head=4, n_positions=256))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256))


MODELS = {"gpt2": gpt2, "llama": llama}


def _loop(step, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """aotc.generate's greedy loop over any `step(input_ids, cache_position) -> logits`."""
    sampling = Sampling()
    tokens = ids
    with torch.no_grad():
        logits = step(ids, torch.arange(ids.shape[1]))
        for i in range(new_tokens):
            nxt = sampling.next_token(logits[:, -1, :])
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
            if i + 1 < new_tokens:
                logits = step(nxt[:, None], torch.tensor([ids.shape[1] + i]))
    return tokens


def _time(fn, repeats: int) -> tuple[list[float], torch.Tensor]:
    fn()  # warm-up
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return times, out


def bench_model(name: str, new_tokens: int, repeats: int, work: Path) -> dict:
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    model.generation_config.eos_token_id = None  # every contestant makes exactly new_tokens tokens
    ids = torch.randint(0, 2048, (1, 16), generator=torch.Generator().manual_seed(1))
    max_len = ids.shape[1] + new_tokens
    rows = {}

    def eager():
        with torch.no_grad():
            return model.generate(ids, max_new_tokens=new_tokens, do_sample=False, attention_mask=torch.ones_like(ids))

    rows["eager generate"] = _time(eager, repeats)

    wrapper = StaticCacheLM(model, 1, max_len).eval()
    compiled = torch.compile(wrapper)
    start = time.perf_counter()
    _loop(compiled, ids, 2)  # compiles prefill and decode
    compile_s = time.perf_counter() - start
    rows["torch.compile decode"] = _time(lambda: _loop(compiled, ids, new_tokens), repeats)

    bundle = aotc.export_generation(model, work / name, max_cache_len=max_len, force=True)
    fx = aotc.load(bundle.path, backend="fx")
    rows["aotc fx"] = _time(lambda: aotc.generate(fx, ids, new_tokens, eos_token_id=[]), repeats)
    start = time.perf_counter()
    aotc.compile(bundle.path)
    aoti_compile_s = time.perf_counter() - start
    aoti = aotc.load(bundle.path, backend="aoti")
    rows["aotc aoti"] = _time(lambda: aotc.generate(aoti, ids, new_tokens, eos_token_id=[]), repeats)

    reference = rows["eager generate"][1]
    result = {"new_tokens": new_tokens, "prompt": ids.shape[1], "compile_seconds": {
        "torch.compile": round(compile_s, 1), "aotc compile (aoti)": round(aoti_compile_s, 1)}, "rows": {}}
    for label, (times, tokens) in rows.items():
        tps = [new_tokens / t for t in times]
        result["rows"][label] = {
            "tokens_per_second": round(statistics.median(tps), 1),
            "spread": [round(min(tps), 1), round(max(tps), 1)],
            "same_tokens_as_eager": tokens.tolist() == reference.tolist(),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {"threads": args.threads, "torch": torch.__version__, "models": {}}
    with tempfile.TemporaryDirectory() as work:
        for name in args.models:
            results["models"][name] = bench_model(name, args.new_tokens, args.repeats, Path(work))
            print(json.dumps({name: results["models"][name]}, indent=2), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "generation.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [f"# Generation throughput ({args.threads} threads, {args.new_tokens} new tokens, greedy)", "",
             "| model | contestant | tokens/s (median) | spread | vs eager | same tokens |", "|---|---|---|---|---|---|"]
    for name, r in results["models"].items():
        eager = r["rows"]["eager generate"]["tokens_per_second"]
        for label, row in r["rows"].items():
            lines.append(f"| {name} | {label} | {row['tokens_per_second']} | {row['spread'][0]}-{row['spread'][1]} | "
                         f"{row['tokens_per_second'] / eager:.2f}x | {'yes' if row['same_tokens_as_eager'] else 'NO'} |")
        lines.append(f"| {name} | compile seconds | {r['compile_seconds']} | | | |")
    (RESULTS / "generation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
