"""aotc's architecture, checked: the import graph of its own modules (imports go one
way, with no circle), and the exporter interface every format implements.

The graph is read from the source with `ast`: every `import` and `from ... import`
statement, at module level and inside functions (a function-level import is still a
dependency, only a later one), plus `aotc.<name>` uses of the package's lazy exports.
Imports under `if TYPE_CHECKING:` are left out: they name types for annotations and
never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import aotc
from aotc.errors import AotcError
from aotc.exporters import formats

ROOT = Path(__file__).resolve().parent.parent
# source folder -> the package it is installed as (pyproject's package-dir)
PACKAGES = {"aotc": "aotc", "cli": "aotc.cli", "exporters": "aotc.exporters"}

# The layers of the tree, lowest first: a module imports from its own layer and lower ones only.
# So a bundle opens and a model captures without the runtime, and a bundle loads without
# verify, bench, report or export's own checks (the tools).
LAYERS = [
    ("foundation", ("aotc", "aotc.errors", "aotc._torch_compat", "aotc.devices", "aotc.optional_deps",
                    "aotc.number_format", "aotc.moved_modules")),
    ("bundle format and contract", ("aotc.bundle", "aotc.contract", "aotc.sources")),
    ("capture", ("aotc.capture",)),
    ("runtime and formats", ("aotc.runtime", "aotc.exporters")),
    ("export, compile and tools", ("aotc.api", "aotc.export_writer", "aotc.compiler", "aotc.tools")),
    ("command line", ("aotc.cli", "aotc.__main__")),
]


def _layer(module: str) -> int:
    """The index in LAYERS of the longest prefix naming `module` (a module or its package)."""
    best, level = "", None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, level = prefix, index
    assert level is not None, f"{module} is in no layer: add it to LAYERS"
    return level


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            name = ".".join((package, *path.relative_to(ROOT / folder).with_suffix("").parts))
            found[name.removesuffix(".__init__")] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` (a module, or a name inside one) belongs to."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(name: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """Every dotted name `name` imports (modules, and names inside them), wherever the statement stands."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):  # drop `if TYPE_CHECKING:` blocks
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = []
    targets = []
    imports_package = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.append(alias.name)
                imports_package |= alias.name == "aotc" and alias.asname is None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                base = ".".join(parent[: len(parent) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                # `from aotc import load`: a submodule, or one of the package's lazy exports
                targets.append(aotc._EXPORTS.get(alias.name, full) if base == "aotc" and full not in modules else full)
    if imports_package:  # `import aotc` then `aotc.load(...)`
        targets += [aotc._EXPORTS[n.attr] for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name) and n.value.id == "aotc" and n.attr in aotc._EXPORTS]
    return targets


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every aotc module `name` imports, wherever the statement stands."""
    resolved = {_resolve(t, modules) for t in _targets(name, path, modules)}
    # importing `a.b.c` runs the packages' `a/__init__` and `a/b/__init__` first
    packages = {m.rsplit(".", i)[0] for m in resolved if m for i in range(1, m.count("."))}
    return {m for m in resolved | packages
            if m is not None and m != name and m != "aotc" and m in modules and not name.startswith(m + ".")}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_every_kind_of_import():
    graph = _graph()
    assert "aotc.bundle.files" in graph["aotc.runtime.regional"]  # module level
    assert "aotc.runtime.module" in graph["aotc.runtime.regional"]  # inside a function
    assert "aotc.runtime" in graph["aotc.tools.verify"]  # `import aotc` then `aotc.load(...)`
    assert "aotc.tools.regions" in graph["aotc.cli.export"]  # `from aotc.tools.regions import export_regions`
    assert "aotc.exporters.aoti_cache" in graph["aotc.exporters.aoti"]  # installed names of exporters/ and cli/
    assert "aotc.cli.options" in graph["aotc.cli.run"]


def test_every_import_names_a_module_of_the_tree():
    """The library imports modules by their paths in the package tree, never by the flat paths
    of aotc 0.1 that aotc.moved_modules keeps importable for users."""
    modules = _modules()
    stale = []
    for name, path in modules.items():
        for target in _targets(name, path, modules):
            top = target.split(".")[0]
            if top == "aotc" and target not in ("aotc", "aotc.__version__") and _resolve(target, modules) == "aotc":
                stale.append(f"{name}: {target}")
    assert stale == []


def test_moved_module_paths_still_import(recwarn):
    """`import aotc.parity` (a 0.1 path) gives the module at its new place, the same object."""
    import importlib

    from aotc.moved_modules import MOVED

    tree = set(_modules())
    for old, new in MOVED.items():
        assert old not in tree and new in tree, old
    assert importlib.import_module("aotc.parity") is importlib.import_module("aotc.tools.verify")
    from aotc.bundle.schema import Manifest as Now
    from aotc.schema import Manifest

    assert Manifest is Now
    assert any("aotc.parity moved to aotc.tools.verify" in str(w.message) for w in recwarn.list)


def test_no_import_circle():
    assert _cycles(_graph()) == []


def test_type_checking_imports_are_not_dependencies():
    graph = _graph()
    assert "aotc.runtime.module" not in graph["aotc.runtime.joint_step"]  # only under TYPE_CHECKING
    assert "aotc.runtime.joint_step" in graph["aotc.runtime.module"]


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_go_down_the_layers():
    graph = _graph()
    upward = sorted(
        f"{name} ({LAYERS[_layer(name)][0]}) imports {dep} ({LAYERS[_layer(dep)][0]})"
        for name, deps in graph.items() for dep in deps if _layer(dep) > _layer(name)
    )
    assert upward == []


def test_the_layer_check_sees_an_upward_import():
    assert _layer("aotc.runtime.module") > _layer("aotc.bundle.files")
    assert _layer("aotc.tools.verify") > _layer("aotc.runtime.module")
    assert _layer("aotc.cli.run") == len(LAYERS) - 1 and _layer("aotc.errors") == 0


def test_every_format_has_every_member_the_library_calls():
    members = [n for n in formats.Format.__dict__ if not n.startswith("_")] + list(formats.Format.__annotations__)
    assert {"FORMAT", "FILE_KIND", "artifact_path", "has_artifacts", "load_graph", "build", "write"} <= set(members)
    for name in formats.names():
        module = formats.get(name)
        assert module.FORMAT == name
        assert [m for m in members if not hasattr(module, m)] == [], name
    assert formats.backends() == ("auto", *formats.names())


@pytest.mark.parametrize("name", ["aoti", "onnx"])
def test_built_formats_refuse_to_be_written_at_export(name):
    with pytest.raises(AotcError, match="built from a bundle's fx graphs"):
        formats.get(name).write(None, None)


def test_fx_refuses_to_be_built(tmp_path):
    with pytest.raises(AotcError, match="written at export"):
        formats.get("fx").build(None, "inference", "cpu", tmp_path, formats.BuildOptions())


def test_no_module_over_400_lines():
    """A module that grows past this is cut along its concepts, not trimmed to fit."""
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    assert {name: n for name, n in sizes.items() if n > 400} == {}


def test_export_takes_its_options_as_a_dataclass_or_as_keywords(tmp_path):
    import torch

    model, inputs = torch.nn.Linear(3, 2), (torch.randn(4, 3),)
    phases = []
    options = aotc.ExportOptions(name="lin", on_phase=phases.append)
    first = aotc.export(model, inputs, tmp_path / "a", options=options)
    assert first.manifest.model.name == "lin" and phases[0] == "capture" and "write" in phases
    again = aotc.export(model, inputs, tmp_path / "a", options=options, force=True, name="other")
    assert again.manifest.model.name == "other"  # keywords override the dataclass's fields
    with pytest.raises(TypeError, match="unexpected keyword argument 'frce'.*force"):
        aotc.export(model, inputs, tmp_path / "b", frce=True)


# What the library may import inside a function: heavy or optional dependencies that a
# bundle's load (or `aotc --help`) must not pay for. Everything else is imported at the top,
# where the import graph above sees it.
HEAVY = ("torch._dynamo", "torch._inductor", "torch._decomp", "torch.onnx", "torch.fx.experimental.symbolic_shapes",
         "torch.distributed", "transformers", "onnxscript", "onnxruntime", "onnx", "torchao", "selenium",
         "model_signing", "matplotlib")
FUNCTION_IMPORTS = {
    "aotc.tools.bench_child": "a variant's cold start counts its imports: each imports only what it runs",
    "aotc.sources.hf_folder": "the CLI reads TASKS at import, before torch is imported",
}


def _function_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and not node.level:
                    found.append(node.module)
                elif isinstance(node, ast.Import):
                    found += [a.name for a in node.names]
    return found


def test_the_library_imports_inside_functions_only_what_is_heavy():
    modules = _modules()
    assert set(FUNCTION_IMPORTS) <= set(modules)
    light = sorted({
        f"{name}: {target}" for name, path in modules.items()
        if not name.startswith(("aotc.cli", "aotc.__main__")) and name not in FUNCTION_IMPORTS
        for target in _function_imports(path)
        if not target.startswith(HEAVY)
    })
    assert light == []
