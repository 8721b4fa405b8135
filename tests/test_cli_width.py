"""Tables fit a 100-column terminal (COLUMNS=100): long names wrap, numbers stay whole, and
the full figures stay in --json."""

from __future__ import annotations

from click.testing import CliRunner
from rich.console import Console

from aotc.cli.bench import results_table
from aotc.cli.main import cli
from aotc.tools.bench import RAW, Result

WIDTH = 100


def _lines(*args) -> list[str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": str(WIDTH)}, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result.stderr.splitlines()


def _too_wide(lines: list[str]) -> list[str]:
    return [line for line in lines if len(line) > WIDTH]


def test_inspect_verify_and_run_fit_100_columns(sample_bundles):
    path = sample_bundles[("tiny_transformer", "joint")][0]
    for command in (["inspect", path], ["verify", path], ["run", path]):
        lines = _lines(*command)
        assert len(lines) > 5 and _too_wide(lines) == [], command
    # piped without COLUMNS, nothing is folded: one line per file of the bundle
    wide = CliRunner().invoke(cli, ["inspect", str(path)], env={"COLUMNS": ""}).stderr.splitlines()
    assert max(len(line) for line in wide) > WIDTH


def test_bench_table_fits_100_columns_with_every_variant():
    slow = 227_600.0  # µs: gpt_small's step, shown in ms
    rows = [Result(name, 3.78, median, median * 1.1, 200, 1e6 / median, 322, runs_median_us=(median, median * 1.05))
            for name, median in [("aotc fx", 98.1), ("aotc aoti/cpu", slow), ("aotc onnx", 1234.5), ("eager", 77.5),
                                 ("torch.compile (warm cache)", 60.0), ("torch.compile freezing (warm cache)", 55.0),
                                 ("aot_compile (warm cache)", 58.0), (RAW, 30.0)]]
    rows.append(Result("aot_compile (cold cache)", None, None, None, 200, None, None,
                       error="the model file does not build a torch.nn.Module (json.loads returned dict)"))
    console = Console(width=WIDTH, record=True)
    console.print(results_table(rows, "bench bundles/gpt_small (cpu, 1 thread)"))
    text = console.export_text()
    assert _too_wide(text.splitlines()) == []
    for figure in ("227.6 ms", "98.1 µs", "1.2 ms", "1.29x", "0.00x", "2.58x"):  # whole, never cut with '…'
        assert figure in text
    assert "…" not in text
    assert "aot_compile (cold cache) failed: the model file does not build a torch.nn.Module" in " ".join(
        text.split())
