"""The GPU benchmark (`python benchmarks/gpu/bench.py --out DIR`): aotc against eager,
torch.compile and the bare AOTInductor runner, checked against eager before timing.

bench (command line, the run) -> plan (rows, budget) -> rows (build, check, time one row)
-> variants (each variant's callable), models (model files, inputs, bundles),
measure (judging outputs, interleaved timing) -> report (gpu-bench.md).
"""
