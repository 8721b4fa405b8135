"""`aotc report`: one self-contained HTML page about a bundle.

For every graph the page draws the nodes and edges, grouped by the user's modules (the
`nn_module_stack` each op carries) into collapsible boxes, searchable, with mutated
inputs, aliased outputs, saved activations and backward ops marked; beside it, the
tables of `aotc inspect` and the recorded `verify` and `bench` results as plots.

The page needs no network: the layout engine (dagre, MIT, vendored in
`aotc/tools/report_assets/` with its licence) and the page's own script are inlined, and the
data travels as JSON in a `<script type="application/json">` block that the script reads
with JSON.parse and puts on the page as text, never as markup. Building a report reads
the bundle as `aotc inspect` does and loads each graph as data (`Bundle.load_program`,
after the archive checks; aotc.tools.report_graph turns each into nodes and edges); it runs
nothing.
"""

from __future__ import annotations

import html
import json
import math
import os
import tempfile
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any

from aotc.bundle.files import Bundle
from aotc.bundle.records import read_records
from aotc.bundle.summary import describe, describe_regions
from aotc.number_format import human_size
from aotc.runtime.regional import RegionalBundle, is_regional
from aotc.tools.report_graph import graph_views

_ASSETS = "report_assets"


# ----------------------------------------------------------------- the page


def build_report(path: str | Path) -> str:
    """The report of the bundle (or regional bundle) at `path`, as one HTML document."""

    if is_regional(path):
        return _regional_report(RegionalBundle.open(path))
    bundle = Bundle.open(path)
    info = describe(bundle)
    graphs = [asdict(view) for view in graph_views(bundle)]
    body = [_header(info), _graph_section(graphs), _tables(info), _records(read_records(bundle))]
    return _page(f"aotc report: {info['manifest']['model']['name']}", "\n".join(body), {"graphs": graphs})


def _regional_report(rb) -> str:
    """A regional bundle: its regions, groups and graph-break report, then every group's
    graphs (one tab each) and tables."""

    info = describe_regions(rb)
    graphs, tables = [], []
    for name, bundle in rb.groups.items():
        for view in graph_views(bundle):
            graphs.append(asdict(view) | {"kind": f"{name}: {view.kind}"})
        tables.append(f"<h3>group {_e(name)}</h3>" + _tables(describe(bundle)).replace("<h2>What the bundle holds</h2>", ""))
    head = (f"<header><h1>{_e(info['model'])} <small>aotc regional bundle</small></h1>"
            f"<p class=\"path\">{_e(info['bundle'])}</p><table class=\"facts\">"
            f"<tr><th>source</th><td>{_e(info['source'] or '-')}</td></tr>"
            f"<tr><th>size</th><td>{_e(human_size(info['size_bytes']))}</td></tr></table></header>")
    regions = "<section id=\"regions\"><h2>Regions</h2>" + "".join([
        _table("Regions (each runs its group's graphs; the model's own Python glue stays Python)",
               ["region", "class", "group", "graphs", "parameters"],
               [[r["fqn"], r["class"], r["group"], ", ".join(r["graphs"]), r["parameters"]] for r in info["regions"]]),
        _table("Groups (identical regions share one)", ["group", "path", "first region", "regions", "compiled"],
               [[g["name"], g["path"], g["first"], g["regions"], ", ".join(g["compiled"]) or "-"] for g in info["groups"]]),
        _table("Graph breaks (why the whole model was not captured)", ["where", "kind", "reason", "what to do"],
               [[f"{b['file']}:{b['line']} in {b['function']}", b["kind"], b["reason"], b["fix"]] for b in info["breaks"]]),
    ]) + "</section>"
    body = [head, _graph_section(graphs), regions, *tables]
    return _page(f"aotc report: {info['model']} (regions)", "\n".join(body), {"graphs": graphs})


def write_report(path: str | Path, out: str | Path) -> Path:
    """Write the report of the bundle at `path` to `out`, atomically."""
    page = build_report(path)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as a plain open() would make it, not mkstemp's 0600
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def _asset(name: str) -> str:
    return resources.files("aotc.tools").joinpath(_ASSETS, name).read_text(encoding="utf-8")


def _page(title: str, body: str, data: dict) -> str:
    # JSON inside <script>: no '<' may end the block or open a comment there; \u003c is
    # still '<' to JSON.parse ('<' appears in JSON only inside strings)
    payload = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_e(title)}</title><style>{_asset('report.css')}</style></head>\n<body>\n{body}\n"
        f"<script type=\"application/json\" id=\"aotc-data\">{payload}</script>\n"
        f"<script>/* dagre {_asset('VERSION').strip()}: {_asset('LICENSE-dagre.txt').splitlines()[0]} "
        "(full licence in the page source below) */\n"
        f"{_asset('dagre.min.js')}</script>\n<!--\n{_e(_asset('LICENSE-dagre.txt'))}\n-->\n"
        f"<script>{_asset('report.js')}</script>\n</body></html>\n"
    )


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _table(title: str, columns: list[str], rows: list[list[Any]], cls: str = "") -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in row) + "</tr>" for row in rows)
    return (f"<details open class=\"table {cls}\"><summary>{_e(title)}</summary>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></details>")


def _header(info: dict) -> str:
    m = info["manifest"]
    model = m["model"]
    rows = [
        ("model", f"{model['name']} ({model['class_name']}, {model['num_parameters']:,} parameters)"),
        ("source", model["source"] or "-"),
        ("mode", "train" if model["training"] else "eval"),
        ("graphs", ", ".join(m["graph_kinds"]) + (f" (partitioner: {m['partitioner']})" if m["partitioner"] else "")),
        ("versions", f"format {m['format_version']}, aotc {m['aotc_version']}, torch {m['torch_version']}, "
                     f"python {m['python_version']}"),
        ("created", m["created"]),
        ("size", f"{human_size(info['size']['total'])} in {len(m['files'])} files"),
    ]
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return (f"<header><h1>{_e(model['name'])} <small>aotc bundle</small></h1>"
            f"<p class=\"path\">{_e(info['path'])}</p><table class=\"facts\">{cells}</table></header>")


def _graph_section(graphs: list[dict]) -> str:
    tabs = "".join(
        f"<button class=\"tab\" data-graph=\"{i}\">{_e(g['kind'])} <small>{len(g['nodes'])} nodes</small></button>"
        for i, g in enumerate(graphs))
    legend = "".join(f"<span class=\"mark {m}\">{_e(label)}</span>" for m, label in (
        ("input", "input"), ("mutated", "mutated input / new value"), ("alias", "aliased output"),
        ("saved", "saved activation"), ("backward", "backward op"), ("gradient", "gradient / loss")))
    return (
        "<section id=\"graphs\"><h2>Graphs</h2>"
        f"<nav class=\"tabs\">{tabs}</nav>"
        "<div class=\"toolbar\"><input id=\"search\" type=\"search\" placeholder=\"search ops, modules, inputs "
        "(Enter: expand and go to the first match)\"> <span id=\"matches\"></span>"
        "<button id=\"expand-all\">expand all</button><button id=\"collapse-all\">collapse all</button>"
        "<button id=\"fit\">fit</button><span id=\"status\"></span></div>"
        f"<div class=\"legend\">{legend}</div>"
        "<div id=\"canvas\"><svg id=\"graph\"></svg></div>"
        "<div id=\"detail\">Click a node for its details; click a module box's title to collapse or expand it.</div>"
        "</section>"
    )


def _tables(info: dict) -> str:
    out = ["<section id=\"tables\"><h2>What the bundle holds</h2>"]
    user_index = {u["name"]: i for i, u in enumerate(info["user_inputs"])}
    for program, meta in info["metadata"]["programs"].items():
        rows = []
        for i, inp in enumerate(meta["inputs"]):
            t = inp["tensor"] or {}
            if inp["kind"] == "user_input" and inp["name"] in user_index:
                t = info["metadata"]["user_inputs"][user_index[inp["name"]]] or t
            mutated = "" if inp["mutation_type"] == "NOT_MUTATED" else "+".join(
                w for w, f in (("data", inp["mutates_data"]), ("metadata", inp["mutates_metadata"])) if f
            ) + f" ({inp['mutation_type']})"
            rows.append([i, inp["kind"], inp["name"], _shape(t), t.get("dtype", "-"),
                         "yes" if inp["requires_grad"] else "", mutated])
        out.append(_table(f"{program}: inputs", ["#", "kind", "name", "shape", "dtype", "grad", "mutated"], rows))
        rows = [[o["index"], o["output_type"], o["base"] or "", _shape(o["tensor"]),
                 "yes" if o["requires_grad"] else "", " -> ".join(o["view_replay"])] for o in meta["outputs"]]
        out.append(_table(f"{program}: outputs", ["#", "alias", "base", "shape", "grad", "view replay"], rows))
    for kind, g in info["graphs"].items():
        sig = g["signature"]
        rows = [[i, s["role"], s["name"], s["target"] or "", "" if s["index"] is None else s["index"]]
                for i, s in enumerate(sig["inputs"])]
        out.append(_table(f"{kind}: signature, inputs ({len(rows)})", ["#", "role", "name", "target", "index"], rows,
                          "collapsed"))
        rows = [[i, s["role"], s["name"], s["target"] or "", "" if s["index"] is None else s["index"]]
                for i, s in enumerate(sig["outputs"])]
        out.append(_table(f"{kind}: signature, outputs ({len(rows)})", ["#", "role", "name", "target", "index"], rows,
                          "collapsed"))
        if sig["backward"]:
            bw = sig["backward"]
            rows = ([[n, f"parameter {t}"] for n, t in bw["gradients_to_parameters"].items()]
                    + [[n, f"input {t}"] for n, t in bw["gradients_to_user_inputs"].items()]
                    + ([[bw["loss_output"], "(loss)"]] if bw["loss_output"] else []))
            out.append(_table(f"{kind}: backward signature", ["output", "gradient of"], rows, "collapsed"))
        out.append(_table(f"{kind}: ops ({g['num_nodes']})", ["op", "count"], [[op, n] for op, n in g["ops"].items()],
                          "collapsed"))
    files = info["manifest"]["files"]
    out.append(_table("Files", ["path", "kind", "size", "sha256"],
                      [[f["path"], f["kind"], human_size(f["size"]), f["sha256"][:16]] for f in files]))
    builds = [[f["path"], k, v] for f in files if f.get("build") for k, v in f["build"].items()]
    out.append(_table("Build fingerprints", ["artifact", "key", "value"], builds, "collapsed"))
    if info["subclasses"]:
        rows = [[r["where"], r["name"], r["class"], str(tuple(r["shape"])), r["dtype"],
                 "; ".join(f"{i['name']} {i['dtype'] or ''} {list(i['shape']) if i['shape'] is not None else ''}"
                           for i in r["inner"])] for r in info["subclasses"]]
        out.append(_table("Tensor subclasses", ["where", "name", "class", "shape", "dtype", "inner tensors"], rows))
    if info["constants"]:
        rows = [[c["name"], c["graph"], c["dtype"], c["shape"]] for c in info["constants"]]
        out.append(_table("Constants", ["name", "graph", "dtype", "shape"], rows))
    out.append("</section>")
    return "\n".join(x for x in out if x)


def _shape(tensor: dict | None) -> str:
    if not tensor:
        return "-"
    dims = []
    for i, size in enumerate(tensor["shape"]):
        dyn = (tensor.get("dynamic_dims") or {}).get(str(i))
        dims.append(f"{dyn['symbol']}[{dyn['min']}..{'inf' if dyn['max'] is None else dyn['max']}]" if dyn else str(size))
    return "(" + ", ".join(dims) + ")"


# ----------------------------------------------------------------- recorded results


def _records(records: dict[str, dict]) -> str:
    out = ["<section id=\"records\"><h2>Recorded results</h2>"]
    if not records:
        out.append("<p class=\"none\">None yet: run <code>aotc verify BUNDLE --record</code> or "
                   "<code>aotc bench BUNDLE --record</code> and make the report again.</p>")
    if "verify" in records:
        out.append(_verify_plot(records["verify"]))
    if "bench" in records:
        out.append(_bench_plot(records["bench"]))
    out.append("</section>")
    return "\n".join(out)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _verify_plot(rec: dict) -> str:
    """max abs difference from eager per check, on a log scale."""
    checks = rec["checks"]
    passed = sum(1 for c in checks if c["passed"])
    rows = [(f"{c['artifact']}: {c['name']}", _num(c.get("max_abs")), c["passed"]) for c in checks]
    bar = _bars([(label, err, "pass" if ok else "fail", "-" if err is None else "0 (exact)" if err == 0 else f"{err:.2e}")
                 for label, err, ok in rows], log=True, floor=1e-12)
    title = (f"verify, recorded {rec.get('recorded', '?')}: {passed} of {len(checks)} checks passed"
             + ("" if rec.get("ok", passed == len(checks)) else " (FAILED)"))
    table = _table("verify checks", ["artifact", "entry", "max abs", "max rel", "rtol", "atol", "result"],
                   [[c["artifact"], c["name"], c.get("max_abs"), c.get("max_rel"), c.get("rtol"), c.get("atol"),
                     "pass" if c["passed"] else f"FAIL {c.get('note') or ''}"] for c in checks], "collapsed")
    return f"<div class=\"plot\"><h3>{_e(title)}</h3><p>max abs difference from eager per entry (log scale)</p>{bar}{table}</div>"


def _bench_plot(rec: dict) -> str:
    """Steady-state time per call of each variant, and cold start, as bars."""
    results = rec["results"]
    what = "training step" if rec.get("train") else "inference call"
    timed = [(r["variant"], _num(r.get("median_us"))) for r in results]
    steady = _bars([(v, t, "aotc" if v.startswith("aotc") else "base", f"{t:.1f} µs" if t else "failed")
                    for v, t in timed])
    cold = _bars([(r["variant"], _num(r.get("cold_start_s")), "aotc" if r["variant"].startswith("aotc") else "base",
                   f"{_num(r.get('cold_start_s')):.2f} s" if _num(r.get("cold_start_s")) else "failed")
                  for r in results])
    title = (f"bench, recorded {rec.get('recorded', '?')}: {rec.get('device', '?')}, {rec.get('threads', '?')} "
             f"thread(s), {what}")
    table = _table("bench results", ["variant", "median µs", "p90 µs", "cold start s", "peak MiB", "error"],
                   [[r["variant"], r.get("median_us"), r.get("p90_us"), r.get("cold_start_s"), r.get("peak_memory_mib"),
                     r.get("error") or ""] for r in results], "collapsed")
    return (f"<div class=\"plot\"><h3>{_e(title)}</h3><p>steady state, µs per {_e(what)} (shorter is faster)</p>"
            f"{steady}<p>cold start: process start to first output, s</p>{cold}{table}</div>")


def _bars(rows: list[tuple[str, float | None, str, str]], log: bool = False, floor: float = 0.0) -> str:
    """A horizontal bar chart as inline SVG: (label, value, css class, value text) per row."""

    width, label_w, row_h = 900, 360, 22
    if not rows:
        return "<p class=\"none\">no figures</p>"
    values = [v for _, v, _, _ in rows if v is not None and v > 0] or [1.0]  # all zero: bars of no length
    top = max(values)
    low = max(min(values), floor) if log else 0.0

    def scale(v: float) -> float:
        if log:
            lo, hi = math.log10(low) - 0.5, math.log10(top) + 0.1
            return (math.log10(max(v, low)) - lo) / (hi - lo)
        return v / top

    parts = [f"<svg class=\"bars\" width=\"{width}\" height=\"{row_h * len(rows) + 4}\" "
             f"viewBox=\"0 0 {width} {row_h * len(rows) + 4}\">"]
    for i, (label, value, cls, text) in enumerate(rows):
        y = i * row_h + 2
        w = 0 if value is None or value <= 0 else max(1.0, scale(value) * (width - label_w - 110))
        parts.append(f"<text x=\"{label_w - 6}\" y=\"{y + 15}\" text-anchor=\"end\">{_e(label[:60])}</text>"
                     f"<rect class=\"{cls}\" x=\"{label_w}\" y=\"{y + 3}\" width=\"{w:.1f}\" height=\"{row_h - 6}\"/>"
                     f"<text x=\"{label_w + w + 6:.1f}\" y=\"{y + 15}\">{_e(text)}</text>")
    parts.append("</svg>")
    return "".join(parts)
