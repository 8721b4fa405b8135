"""`aotc report` in a real browser: headless Chromium (Debian's package, driven by
selenium through chromedriver) opens the report of every sample bundle; each graph must
draw one DOM node per graph value and output, the marks must sit where the bundle's
metadata puts them, and the page must log no console error. Screenshots land in
build/report-screenshots/ for people to look at."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import aotc
from aotc.bundle import Bundle
from aotc.bundle.records import RECORDS
from conftest import ROOT, SAMPLE_NAMES, invoke

SHOTS = ROOT / "build" / "report-screenshots"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        message = "needs Debian's chromium and chromium-driver (make test installs them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(120)
    yield driver
    driver.quit()


def _report(bundle: Path, out: Path) -> Path:
    result = invoke("report", bundle, "-o", out)
    assert result.exit_code == 0, result.stderr
    return out


def _open(browser, page: Path) -> None:
    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(page.resolve().as_uri())
    _wait_rendered(browser, 0)


def _wait_rendered(browser, index: int) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 120).until(lambda d: d.execute_script("return document.body.dataset.rendered") == str(index))


def _errors(browser) -> list[dict]:
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def _drawn(browser, selector: str = "g.node") -> int:
    return browser.execute_script(f"return document.querySelectorAll('#graph {selector}').length")


def _expected_nodes(bundle: Bundle, kind: str) -> int:
    """Every value of the graph (inputs and ops) and every graph output, from the graph itself."""
    graph = bundle.load_program(kind).graph
    values = sum(1 for n in graph.nodes if n.op in ("placeholder", "call_function"))
    return values + len(graph.output_node().args[0])


def _show(browser, index: int) -> None:
    browser.execute_script(f"document.querySelector('.tab[data-graph=\"{index}\"]').click()")
    _wait_rendered(browser, index)


@pytest.mark.parametrize("mode", ["inference", "autograd", "joint"])
@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_every_graph_of_every_sample_bundle_draws_every_node(browser, sample_bundles, tmp_path, name, mode):
    path = sample_bundles[(name, mode)][0]
    bundle = Bundle.open(path)
    page = _report(path, tmp_path / "report.html")
    _open(browser, page)
    for index, kind in enumerate(bundle.graph_kinds):
        _show(browser, index)
        assert _drawn(browser) == _expected_nodes(bundle, kind), kind
        assert _drawn(browser, "g.group-node") == 0  # small graphs start fully expanded
    assert _errors(browser) == []
    if (name, mode) in (("tiny_transformer", "autograd"), ("inplace", "inference"), ("mlp", "joint")):
        SHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SHOTS / f"{name}-{mode}.png"))


def _marked(browser, mark: str) -> list[str]:
    return browser.execute_script(
        f"return [...document.querySelectorAll('#graph g.node.{mark} text')].map(t => t.textContent)")


def test_marks_follow_the_metadata(browser, sample_bundles, tmp_path):
    # inplace: y.add_(1), outputs (h, y.view(-1), h.transpose(0, 1))
    path = sample_bundles[("inplace", "inference")][0]
    bundle = Bundle.open(path)
    _open(browser, _report(path, tmp_path / "inplace.html"))
    meta = bundle.metadata.programs["inference"]
    mutated = [i.name for i in meta.inputs if i.mutation_type != "NOT_MUTATED"]
    assert mutated == ["y"]
    # the mutated input, and the graph output that carries its new value
    assert sorted(_marked(browser, "mutated")) == sorted(
        ["y"] + [s.name for s in bundle.signature.graphs["inference"].outputs if s.role == "input_mutation"])
    aliased = [o for o in meta.outputs if o.output_type != "non_alias"]
    assert len(_marked(browser, "alias")) == len(aliased) >= 1  # y.view(-1)

    # forward + backward: the saved activations on both sides, backward ops in the backward graph
    path = sample_bundles[("mlp", "autograd")][0]
    bundle = Bundle.open(path)
    _open(browser, _report(path, tmp_path / "mlp.html"))
    saved = [s.name for s in bundle.signature.graphs["forward"].outputs if s.role == "saved"]
    assert sorted(_marked(browser, "saved")) == sorted(saved)
    _show(browser, 1)
    assert len(_marked(browser, "saved")) == len(saved)

    # a joint graph: autograd's backward ops are marked, the forward's are not
    path = sample_bundles[("mlp", "joint")][0]
    _open(browser, _report(path, tmp_path / "joint.html"))
    marked, plain = (browser.execute_script(
        f"return [...document.querySelectorAll('#graph g.node.op{sel} text')].map(t => t.textContent)")
        for sel in (".backward", ":not(.backward)"))
    assert {"threshold_backward", "native_batch_norm_backward"} <= set(marked)
    assert {"addmm", "relu", "_native_batch_norm_legit_functional"} <= set(plain)
    assert not {"addmm", "relu"} & set(marked) and not {"threshold_backward"} & set(plain)
    assert _errors(browser) == []


def test_search_and_collapse(browser, sample_bundles, tmp_path):
    path = sample_bundles[("tiny_transformer", "inference")][0]
    bundle = Bundle.open(path)
    _open(browser, _report(path, tmp_path / "tt.html"))
    total = _drawn(browser)
    addmm = sum(1 for n in bundle.load_program("inference").graph.nodes if str(n.target) == "aten.addmm.default")
    browser.execute_script("const s = document.getElementById('search'); s.value = 'addmm';"
                           "s.dispatchEvent(new Event('input'))")
    assert browser.execute_script("return document.getElementById('matches').textContent") == f"{addmm} matches"
    assert _drawn(browser, "g.node.match") == addmm

    # collapsing the block hides its ops behind one box; expanding brings every one back
    inside = browser.execute_script(
        "return JSON.parse(document.getElementById('aotc-data').textContent).graphs[0].nodes"
        ".filter(n => n.module === 'block' || n.module.startsWith('block.')).length")
    assert inside > 10
    browser.execute_script("document.querySelector('g.cluster[data-path=\"block\"] text.title')"
                           ".dispatchEvent(new MouseEvent('click'))")
    assert _drawn(browser) == total - inside
    assert _drawn(browser, "g.group-node") == 1
    assert _drawn(browser, "g.group-node.match") == 1  # the addmm matches are inside it
    browser.execute_script("document.querySelector('g.group-node').dispatchEvent(new MouseEvent('click'))")
    assert _drawn(browser) == total
    assert _errors(browser) == []


class Stack(torch.nn.Module):
    """A deep stack of small blocks: a graph of about 1,560 nodes, more than the page draws at once."""

    def __init__(self, depth: int = 130):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.GELU()) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x


def test_a_big_graph_starts_collapsed_and_opens_module_by_module(browser, tmp_path):
    bundle = aotc.export(Stack().eval(), (torch.randn(2, 8),), tmp_path / "stack")
    expected = _expected_nodes(bundle, "inference")
    assert expected > 1300  # more than MAX_DRAW boxes
    _open(browser, _report(bundle.path, tmp_path / "stack.html"))
    boxes = lambda: _drawn(browser) + _drawn(browser, "g.group-node")  # noqa: E731
    groups = _drawn(browser, "g.group-node")
    assert groups > 100 and boxes() <= 600  # one box per block
    first = browser.execute_script("return document.querySelector('g.group-node').dataset.path")
    inside = browser.execute_script(
        "const p = arguments[0]; return JSON.parse(document.getElementById('aotc-data').textContent).graphs[0].nodes"
        ".filter(n => n.module === p || n.module.startsWith(p + '.')).length", first)
    before = _drawn(browser)
    browser.execute_script("document.querySelector('g.group-node').dispatchEvent(new MouseEvent('click'))")
    assert _drawn(browser) == before + inside
    assert _drawn(browser, "g.group-node") == groups - 1

    # more than the page draws at once: expand-all opens what fits, never an error
    browser.execute_script("document.getElementById('expand-all').click()")
    assert 0 < boxes() <= 1200
    # search finds a node inside a collapsed block and opens its block
    browser.execute_script("document.getElementById('collapse-all').click()")
    browser.execute_script("const s = document.getElementById('search'); s.value = 'blocks.120.2';"
                           "s.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter'}))")
    assert browser.execute_script("return [...document.querySelectorAll('#graph g.node.match text')]"
                                  ".map(t => t.textContent)") == ["gelu"]
    assert _errors(browser) == []
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / "stack.png"))


def test_recorded_verify_and_bench_results_are_plotted(browser, tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    path = aotc.export(model, (torch.randn(2, 4),), tmp_path / "seq").path
    verify = invoke("verify", path, "--record", "--json")
    assert verify.exit_code == 0, verify.stderr
    checks = json.loads(verify.stdout)["checks"]
    bench = invoke("bench", path, "--baselines", "none", "--iters", "5", "--warmup", "1", "--record", "--json")
    assert bench.exit_code == 0, bench.stderr
    variants = json.loads(bench.stdout)["results"]
    b = Bundle.open(path)  # the records are listed and hashed like every other file
    assert {f.path for f in b.manifest.files if f.kind == "record"} == set(RECORDS.values())

    _open(browser, _report(path, tmp_path / "seq.html"))
    bars = browser.execute_script("return [...document.querySelectorAll('svg.bars')].map(s => s.querySelectorAll('rect').length)")
    assert bars == [len(checks), len(variants), len(variants)]  # verify; bench steady state and cold start
    assert browser.execute_script("return document.querySelectorAll('svg.bars rect.fail').length") == 0
    assert _errors(browser) == []


def test_text_from_the_bundle_is_never_markup(browser, tmp_path):
    evil = '</script><!--<img src=x onerror="window.pwned=1">'
    model = torch.nn.Sequential(torch.nn.LayerNorm(4))  # its getitem's note, '<built-in function getitem>', is JSON
    path = aotc.export(model, (torch.randn(2, 4),), tmp_path / "evil", name=evil).path
    page = _report(path, tmp_path / "evil.html")
    text = page.read_text()
    assert "<img" not in text and "<link" not in text and "<script src" not in text
    _open(browser, page)
    assert browser.execute_script("return window.pwned === undefined && document.querySelectorAll('img').length === 0")
    assert evil in browser.execute_script("return document.querySelector('h1').textContent")
    assert "<built-in" not in text  # inside the JSON block '<' travels as \u003c ...
    assert browser.execute_script("return JSON.parse(document.getElementById('aotc-data').textContent).graphs[0]"
                                  ".nodes.some(n => n.note === '<built-in function getitem>')")  # ... and arrives as '<'
    assert _errors(browser) == []


def test_report_errors_are_named(tmp_path):
    result = invoke("report", tmp_path / "missing", "-o", tmp_path / "r.html")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == f"Error: Bundle '{tmp_path / 'missing'}' not found: no such directory."
    assert not (tmp_path / "r.html").exists()


def test_a_regional_bundle_shows_its_regions_and_every_group(browser, gpt_regions, tmp_path):
    from aotc.runtime.regional import RegionalBundle

    rb = RegionalBundle.open(gpt_regions)
    _open(browser, _report(gpt_regions, tmp_path / "regions.html"))
    tabs = [(bundle, kind) for bundle in rb.groups.values() for kind in bundle.graph_kinds]
    assert browser.execute_script("return document.querySelectorAll('.tab').length") == len(tabs)
    for index, (bundle, kind) in enumerate(tabs):
        _show(browser, index)
        assert _drawn(browser) == _expected_nodes(bundle, kind)
    rows = browser.execute_script("return [...document.querySelectorAll('#regions table')[0].tBodies[0].rows]"
                                  ".map(r => r.cells[0].textContent)")
    assert rows == [r.fqn for r in rb.manifest.regions]
    assert _errors(browser) == []


def test_a_record_of_the_wrong_shape_is_refused(tmp_path):
    from aotc.errors import BundleError
    from aotc.bundle.records import write_record

    path = aotc.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),), tmp_path / "b").path
    with pytest.raises(BundleError, match=r"checks\[0\] has no bool 'passed'"):
        write_record(path, "verify", {"checks": [{"artifact": "fx", "name": "output[0]", "passed": "yes"}]})
    with pytest.raises(BundleError, match="expected an object with a list 'results'"):
        write_record(path, "bench", {"results": "fast"})
    assert not (path / "records").exists()  # nothing written


# What a reader sees first, per drawn box: its on-screen size, its label's, and whether it
# lies inside the canvas. Labels under 9 px are unreadable; dagre's first layout must be quick.
_FIRST_VIEW = """
const canvas = document.getElementById('canvas').getBoundingClientRect();
const boxes = [...document.querySelectorAll('#graph g.node, #graph g.group-node')].map(g => {
  const r = g.querySelector('rect').getBoundingClientRect(), t = g.querySelector('text').getBoundingClientRect();
  return {height: r.height, label: t.height,
          inside: r.left >= canvas.left && r.right <= canvas.right && r.top >= canvas.top && r.bottom <= canvas.bottom};
});
const groups = [...document.querySelectorAll('#graph g.group-node')];
return {boxes, ms: +document.body.dataset.layoutMs, groups: groups.map(g => g.dataset.path),
        tops: Object.fromEntries(groups.map(g => [g.dataset.path, g.querySelector('rect').getBoundingClientRect().top]))};
"""


def _first_view(browser, index: int) -> dict:
    _show(browser, index)
    browser.execute_script("document.getElementById('canvas').scrollIntoView()")
    view = browser.execute_script(_FIRST_VIEW)
    assert view["ms"] < 1000  # the first layout
    assert min(b["height"] for b in view["boxes"]) >= 20 and min(b["label"] for b in view["boxes"]) >= 9
    return view


def test_a_real_model_opens_as_its_outline(browser, tmp_path):
    """A 12-layer BERT (transformers, built from a config) and gpt_small: the first view of
    every graph folds each repeated layer into one box and draws the rest around them,
    with labels readable as they are drawn; a click opens a layer."""
    transformers = pytest.importorskip("transformers", reason="the hf extra (make test installs it)")
    config = transformers.BertConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=12,
                                     num_attention_heads=4, max_position_embeddings=64, num_labels=3)
    model = transformers.BertForSequenceClassification(config)
    inputs = {"input_ids": torch.randint(0, 96, (2, 8)), "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    bert = aotc.export(model.train(), ((), inputs), tmp_path / "bert", graphs=("forward", "backward"))
    _open(browser, _report(bert.path, tmp_path / "bert.html"))
    layers = {f"bert.encoder.layer.{i}" for i in range(12)}
    SHOTS.mkdir(parents=True, exist_ok=True)
    for index, kind in enumerate(bert.graph_kinds):
        view = _first_view(browser, index)
        assert layers <= set(view["groups"]) and len(view["boxes"]) <= 60, kind  # of 800+ nodes
        # the layers read in the order data flows: 0 to 11 down the forward graph, 11 to 0 down
        # the backward (autograd's own ops, such as the sums of a gradient's parts, sit in them)
        tops = [view["tops"][f"bert.encoder.layer.{i}"] for i in range(12)]
        steps = [b - a if kind == "forward" else a - b for a, b in zip(tops, tops[1:])]
        assert min(steps) >= 20, (kind, tops)  # each layer a row below the one before it
        browser.save_screenshot(str(SHOTS / f"bert12-{kind}.png"))
    before = _drawn(browser)
    inside = browser.execute_script(
        "return JSON.parse(document.getElementById('aotc-data').textContent).graphs[1].nodes"
        ".filter(n => n.module.startsWith('bert.encoder.layer.3.')).length")
    browser.execute_script("document.querySelector('g.group-node[data-path=\"bert.encoder.layer.3\"]')"
                           ".dispatchEvent(new MouseEvent('click'))")
    assert _drawn(browser) > before and inside > 40  # the layer's ops, gradients and saved activations

    path = invoke("export", ROOT / "sample_models" / "gpt_small.py", "-o", tmp_path / "gpt")
    assert path.exit_code == 0, path.stderr
    _open(browser, _report(tmp_path / "gpt", tmp_path / "gpt.html"))
    view = _first_view(browser, 0)
    assert {"h.0", "h.1", "h.2", "h.3"} <= set(view["groups"])
    assert all(b["inside"] for b in view["boxes"])  # small enough to fit whole, at a readable size
    browser.save_screenshot(str(SHOTS / "gpt_small.png"))
    assert _errors(browser) == []
