"""The tools over bundles: verify (`aotc verify`, with observe and reference: running a model
the way a bundle's mode does, and eager's golden results), size_check (export's check of sizes
0 and 1), bench (+ bench_child, bench_raw), diff (+ diff_change, diff_tensors), report
(+ report_graph), generation (+ generation_export), regions (regional exports) and run_once
(`aotc run`)."""
