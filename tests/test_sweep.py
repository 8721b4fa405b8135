"""The coverage sweep (benchmarks/sweep, `make sweep`): its verdicts, and a slice of it.

The slice runs every SLICE-th architecture of transformers and diffusers (in name order,
each by its representative head) through aotc fx and torch.export with transformers' caches
registered, and fails on any row that `make sweep` would fail: a WRONG result, an aotc
crash, or a model torch.export takes and aotc does not, unless pinned
(benchmarks/sweep/pinned.py). timm's families run in make test-torch's venv, so only in
`make sweep`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.sweep.compare import access_differs, differs
from benchmarks.sweep.table import problems_of

pytest.importorskip("transformers", reason="the hf extra (make test installs it)")

ROOT = Path(__file__).resolve().parents[1]
SLICE = 40  # about 16 architectures of transformers' 600 and diffusers' few: 3 minutes on 2 cores


def _record(**columns) -> dict:
    return {"name": "transformers/x/base", "library": "transformers", "family": "x", "head": "base", "eager": "ok",
            "columns": {c: {"status": s, "detail": d, "seconds": 0} for c, (s, d) in columns.items()}}


def test_a_wrong_result_fails_the_sweep():
    record = _record(fx=("WRONG", "output 0: max abs difference 1"))
    assert problems_of(record) == ["transformers/x/base fx: WRONG: output 0: max abs difference 1"]


def test_what_torch_export_takes_and_aotc_does_not_fails_the_sweep():
    record = _record(fx=("refused", "CaptureError: no"), **{"torch.export+caches": ("pass", "")})
    assert problems_of(record) == ["transformers/x/base fx: torch.export takes it, aotc refused: CaptureError: no"]
    # refused by both: torch.export's own limit, not aotc's
    assert problems_of(_record(fx=("refused", "no"), **{"torch.export+caches": ("fail", "no")})) == []


def test_a_backend_that_fails_where_fx_passes_fails_the_sweep():
    record = _record(fx=("pass", ""), aoti=("refused", "AOTInductor could not compile"), onnx=("pass", ""))
    assert problems_of(record) == ["transformers/x/base aoti: fx passes, aoti refused: AOTInductor could not compile"]


def test_a_training_refusal_torch_export_shares_is_not_a_problem():
    """Forward+backward bundles capture training mode; where torch.export of the training-mode
    model fails too, aotc takes what torch takes (the column says so in the row)."""
    from benchmarks.sweep.columns import TRAINING_EXPORT_FAILS

    shared = f"GraphBreakError: x cannot be captured whole{TRAINING_EXPORT_FAILS}GuardOnDataDependentSymNode: ...]"
    assert problems_of(_record(fx=("pass", ""), **{"fwd+bwd": ("refused", shared)})) == []
    assert len(problems_of(_record(fx=("pass", ""), **{"fwd+bwd": ("refused", "GraphBreakError: x")}))) == 1


def test_an_aoti_refusal_torch_shares_is_not_a_problem():
    """Where torch's own AOTInductor fails on torch.export's program too (the column says so
    in the row), the refusal is torch's: AutoencoderKLMochi's `vr must not be None`."""
    from benchmarks.sweep.columns import TORCH_AOTI_FAILS

    shared = f"AotcError: AOTInductor could not compile the graph: x{TORCH_AOTI_FAILS}InductorError: x]"
    assert problems_of(_record(fx=("pass", ""), aoti=("refused", shared))) == []
    assert len(problems_of(_record(fx=("pass", ""), aoti=("refused", "AotcError: AOTInductor could not")))) == 1


def test_a_pinned_refusal_is_accepted_by_its_words_only(monkeypatch):
    from benchmarks.sweep import table

    monkeypatch.setattr(table, "PINNED", {("transformers/x/*", "aoti"): ("could not compile", "a reason")})
    record = _record(fx=("pass", ""), aoti=("refused", "AOTInductor could not compile"))
    assert problems_of(record) == []
    record = _record(fx=("pass", ""), aoti=("refused", "something else"))
    assert len(problems_of(record)) == 1


def test_a_pin_whose_case_no_longer_fails_is_listed(monkeypatch):
    from benchmarks.sweep import table

    monkeypatch.setattr(table, "PINNED", {("transformers/x/*", "aoti"): ("could not compile", "a reason"),
                                          ("transformers/y/*", "aoti"): ("could not compile", "not run yet")})
    still = _record(fx=("pass", ""), aoti=("refused", "AOTInductor could not compile"))
    assert table.unused_pins([still]) == []
    fixed = _record(fx=("pass", ""), aoti=("pass", ""))
    assert table.unused_pins([fixed]) == ['`transformers/x/*` · aoti (ran 1: pass): "could not compile" matched nothing']
    assert "## Pins that matched nothing" in table.render([fixed], [], 1)


def test_the_comparison_catches_a_cache_layer_that_lost_its_attributes():
    """What the issue saw: the model ran, and `layers[0].conv_states` raised on the result."""
    import torch
    from transformers.cache_utils import Cache, LinearAttentionLayer

    from aotc.contract.caches import CacheLayer, KVCache

    layer = LinearAttentionLayer()
    layer.lazy_initialization(conv_states=torch.ones(1, 2, 3), recurrent_states=torch.ones(1, 2))
    eager = Cache(layers=[layer])
    assert differs(eager, eager, dict(rtol=0, atol=0)) is None
    generic = KVCache([CacheLayer("CacheLayer", {}, {})])
    assert access_differs(generic, eager, dict(rtol=0, atol=0))[1] is not None


def test_gradients_are_compared_to_float32_noise_and_no_further(tmp_path, monkeypatch):
    """The fwd+bwd column allows a gradient eager's float32 rounding (measured against float64)
    and not a gradient off by more: gradients moved by 1e-3 are WRONG."""
    import torch

    from benchmarks.sweep import columns
    from benchmarks.sweep.columns import Context, aotc_fwd_bwd

    class Net(torch.nn.Sequential):
        def forward(self, x):
            return super().forward(x)

    torch.manual_seed(0)
    model = Net(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4))
    inputs = {"x": torch.randn(6, 8)}
    ctx = Context("x", "transformers", model, inputs, model(**inputs), tmp_path)
    assert aotc_fwd_bwd(ctx).status == "pass"

    real = columns.grads

    def moved(model, inputs):  # the loaded bundle's gradients (eager's are a Net's) off by 1e-3
        loss, grads = real(model, inputs)
        return loss, (grads if isinstance(model, Net) else {n: g + 1e-3 for n, g in grads.items()})

    monkeypatch.setattr(columns, "grads", moved)
    (tmp_path / "fwd-bwd").rename(tmp_path / "first")
    outcome = aotc_fwd_bwd(ctx)
    assert outcome.status == "WRONG", outcome


def test_where_float64_goes_another_way_eager_at_another_thread_count_is_the_noise(tmp_path):
    """Outputs are allowed 4x eager's own rounding noise: its distance from float64, or where
    float64 takes another path (Grounding DINO), from eager at another thread count."""
    import torch

    from benchmarks.sweep.columns import VALUES, Context, _checked

    class ByThreads(torch.nn.Module):
        def forward(self, x):
            if x.dtype == torch.float64:  # another path: float64 says nothing of the noise
                return x * 2
            return x + 1e-3 * torch.get_num_threads()  # summed in another order by thread count

    model, inputs = ByThreads(), {"x": torch.ones(3)}
    ctx = Context("x", "transformers", model, inputs, model(**inputs), tmp_path)
    assert ctx.noise() == {id(ctx.eager): pytest.approx(4e-3, rel=1e-3)}
    assert _checked(ctx.eager + 3e-3, ctx, VALUES["aoti"]).status == "pass"
    assert _checked(ctx.eager + 6e-3, ctx, VALUES["aoti"]).status == "WRONG"

    class Plain(torch.nn.Linear):  # float64 runs the same path: its distance is the noise
        pass

    model = Plain(4, 4)
    inputs = {"input": torch.randn(2, 4)}
    ctx = Context("x", "transformers", model, inputs, model(**inputs), tmp_path)
    assert ctx.noise()[id(ctx.eager)] < 1e-5


_FRESH = """
import json, sys, torch
from pathlib import Path
from benchmarks.sweep import child
from benchmarks.sweep.cases import Case

class Sampled(torch.nn.Module):  # Normal checks its scale, a data-dependent test under torch.export
    def forward(self, x):
        return torch.distributions.Normal(x, x.abs() + 1).stddev

case = Case("transformers/sampled/base", "transformers", "sampled", "base", lambda: (Sampled(), {"x": torch.ones(3)}))
child.find = lambda name: case
torch.compile(lambda x: x + 1, backend="eager")(torch.ones(1))  # Dynamo's first use turns the checks off
out = Path(sys.argv[1])
child.run_case(case.name, out, ["torch.export"])
print(json.loads(out.read_text())["columns"]["torch.export"]["status"])
"""


def test_each_case_and_column_starts_as_in_a_fresh_process(tmp_path):
    """A child runs many cases and columns, and Dynamo's first use in it (a torch.compile
    column) turned torch.distributions' argument checks off for the rest: GroupViT's
    training-mode torch.export passed after it, where a fresh process fails. Each case and
    column starts with the checks a fresh process has."""
    proc = subprocess.run([sys.executable, "-c", _FRESH, str(tmp_path / "case.json")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["fail"]  # as torch.export of it in a fresh process


def test_a_cell_is_stale_when_the_code_it_ran_on_differs():
    from benchmarks.sweep.run import same_code

    known = subprocess.run(["git", "cat-file", "-e", "e41596c^{commit}"], cwd=ROOT, capture_output=True)
    if known.returncode:
        pytest.skip("a clone without the history these commits are in")
    assert same_code("e41596c", "692e140")  # the coverage page and README only
    assert not same_code("408221d", "1ecf5ed")  # flat_programs changed
    assert not same_code("1ecf5ed+", "1ecf5ed+")  # changes not committed are never known to be the same
    assert not same_code("?", "1ecf5ed")
    # dd1cc9c changed the onnx format alone: only the onnx column's cells of 1c099fb are stale
    assert same_code("1c099fb", "dd1cc9c", "fx") and same_code("1c099fb", "dd1cc9c", "torch.export")
    assert not same_code("1c099fb", "dd1cc9c", "onnx") and not same_code("1c099fb", "dd1cc9c")


def test_only_the_onnx_column_reaches_the_modules_staleness_gives_it_alone():
    """--stale keeps every other column's cells current across a change to run.ONNX_ONLY: in
    the code cells depend on, nothing names those modules but the format registry and the
    onnx column (the other columns load bundles with backend="fx" or "aoti")."""
    import ast

    from benchmarks.sweep.run import ONNX_ONLY

    names = [Path(f).stem for f in ONNX_ONLY]
    found = []
    for path in sorted([*ROOT.glob("aotc/**/*.py"), *ROOT.glob("exporters/*.py"), *ROOT.glob("benchmarks/sweep/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ONNX_ONLY:
            continue
        tree = ast.parse(path.read_text())
        functions = [(f.lineno, f.end_lineno, f.name) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                said = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                said = [a.name for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                said = [node.value]
            else:
                continue
            if any(f"exporters.{n}" in s for s in said for n in names):
                inside = [name for start, end, name in functions if start <= node.lineno <= end]
                found.append((rel, inside[-1] if inside else None))
    assert sorted(set(found)) == [("benchmarks/sweep/columns.py", "aotc_onnx"), ("exporters/formats.py", None)]


def test_a_resumed_sweep_goes_on_from_the_committed_records(tmp_path):
    """build/ does not outlive a checkout: --resume starts from coverage.json's records and
    runs only what they lack, or what other code ran (--stale)."""
    from benchmarks.sweep.run import Planned, missing, seed

    cols = ("fx", "onnx")
    ran = Planned("transformers/a/base", "transformers", "a", "base", "main", cols, True)
    half = Planned("transformers/b/base", "transformers", "b", "base", "main", cols, True)
    new = Planned("transformers/c/base", "transformers", "c", "base", "main", cols, True)
    cell = {"status": "pass", "detail": "", "seconds": 1.0, "commit": "e41596c"}
    record = {"library": "transformers", "head": "base", "eager": "ok", "running": None}
    data = tmp_path / "coverage.json"
    data.write_text(json.dumps({"cases": [
        {**record, "name": ran.name, "family": "a", "columns": {"fx": cell, "onnx": cell}},
        {**record, "name": half.name, "family": "b", "columns": {"fx": cell}},
        {**record, "name": "transformers/unplanned/base", "family": "unplanned", "columns": {}}]}))
    results = tmp_path / "results"
    results.mkdir()
    (results / "transformers__b__base.json").write_text(json.dumps({**record, "name": half.name, "columns": {}}))

    assert seed([ran, half, new], results, data) == 1  # b's own result is newer than the committed one
    assert missing(ran, results) is None
    assert missing(half, results).columns == cols
    assert missing(new, results) == new
    known = subprocess.run(["git", "cat-file", "-e", "e41596c^{commit}"], cwd=ROOT, capture_output=True)
    if known.returncode == 0:  # a clone with the history: 408221d changed flat_programs since
        assert missing(ran, results, commit="408221d").columns == cols
    (results / "transformers__a__base.json").unlink()
    assert seed([ran, half, new], results, data) == 0  # once per case: a result deleted since runs again
    assert missing(ran, results) == ran
    other = Planned("diffusers/d", "diffusers", "d", "model", "main", cols, True)
    data.write_text(json.dumps({"cases": [{**record, "name": other.name, "family": "d", "columns": {"fx": cell}}]}))
    assert seed([other], results, data) == 1  # a run of another library later still starts from its records
    assert missing(other, results).columns == ("onnx",)


def test_a_slice_of_the_sweep(tmp_path):
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.sweep.run", "--slice", str(SLICE), "--libraries", "transformers,diffusers",
         "--columns", "fx,torch.export+caches", "-j", "1", "--results", str(results), "--no-table"],
        cwd=ROOT, capture_output=True, text=True, timeout=1200)
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [json.loads(p.read_text()) for p in results.glob("*.json")]
    ran = [r for r in records if r.get("eager") == "ok"]
    assert len(ran) >= 10, f"only {len(ran)} of {len(records)} sliced architectures built"
    assert all(r["columns"]["fx"]["status"] in ("pass", "refused") for r in ran)


def test_the_page_of_some_libraries_keeps_the_committed_records_of_the_others(tmp_path, monkeypatch):
    """timm runs in a venv of its own, which a checkout may lack: a table written from a run
    of the other libraries keeps timm's committed rows, and counts them as planned."""
    from benchmarks.sweep import run, table

    timm = {"name": "timm/resnet", "library": "timm", "family": "resnet", "head": "image-cls", "eager": "ok",
            "running": None, "columns": {"fx": {"status": "pass", "detail": "", "seconds": 1.0, "commit": "e41596c"}}}
    data, page = tmp_path / "coverage.json", tmp_path / "coverage.md"
    data.write_text(json.dumps({"planned": 2, "cases": [timm]}))
    monkeypatch.setattr(table, "DATA", data)
    monkeypatch.setattr(table, "PAGE", page)
    monkeypatch.setattr(table, "ROOT", tmp_path)
    monkeypatch.setattr(run, "listed", lambda libraries: [("diffusers/UNet2DModel", "diffusers", "UNet2DModel",
                                                           "base", "main")])
    monkeypatch.setattr(run, "plan", lambda cases: [run.Planned(*cases[0], ("fx",), True)])
    results = tmp_path / "results"
    results.mkdir()
    unet = {**timm, "name": "diffusers/UNet2DModel", "library": "diffusers", "family": "UNet2DModel", "head": "base"}
    # a cell an older plan ran, which this plan does not have: left off the page
    unet["columns"] = {**unet["columns"], "torch.export+caches": {"status": "n/a", "detail": "", "seconds": 0}}
    (results / "diffusers__UNet2DModel.json").write_text(json.dumps(unet))
    assert run.main(["--table-only", "--libraries", "transformers,diffusers", "--results", str(results)]) == 0
    written = json.loads(data.read_text())
    assert written["planned"] == 2 and sorted(r["name"] for r in written["cases"]) == ["diffusers/UNet2DModel",
                                                                                        "timm/resnet"]
    assert "timm/resnet" in page.read_text()
    assert [list(r["columns"]) for r in written["cases"]] == [["fx"], ["fx"]]


def test_a_sweep_given_minutes_starts_no_chunk_after_them(tmp_path, monkeypatch, capsys):
    """A 10-hour sweep runs in pieces: --minutes stops starting chunks, and --resume goes on."""
    from benchmarks.sweep import run

    planned = [run.Planned(f"transformers/f{i}/base", "transformers", f"f{i}", "base", "main", ("fx",), True)
               for i in range(3 * run.CHUNK)]
    monkeypatch.setattr(run, "listed", lambda libraries: [])
    monkeypatch.setattr(run, "plan", lambda cases: planned)
    ran = []

    def slow_group(group, timeout, results, resume):
        ran.append(group)
        run.time.sleep(0.2)
        return [{"name": p.name, "eager": "ok", "columns": {}} for p in group]

    monkeypatch.setattr(run, "run_group", slow_group)
    run.main(["--minutes", "0.001", "-j", "1", "--no-table", "--libraries", "transformers",
              "--results", str(tmp_path)])
    assert len(ran) == 1  # the first chunk started in time; the other two did not
    assert f"{2 * run.CHUNK} cases left" in capsys.readouterr().out
