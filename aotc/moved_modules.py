"""Module paths from before the package layout (aotc 0.1's flat modules), kept importable.

`import aotc.parity` gives `aotc.tools.verify` itself (the same module object, so patches and
isinstance checks agree), with a DeprecationWarning naming the new path. No torch here:
`import aotc` installs the finder and stays light.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "aotc.aliasing": "aotc.contract.aliasing",
    "aotc.ambient": "aotc.contract.ambient",
    "aotc.archives": "aotc.bundle.archives",
    "aotc.atomic": "aotc.bundle.atomic",
    "aotc.bench": "aotc.tools.bench",
    "aotc.bench_child": "aotc.tools.bench_child",
    "aotc.bench_raw": "aotc.tools.bench_raw",
    "aotc.breaks": "aotc.capture.breaks",
    "aotc.bundle_check": "aotc.bundle.check",
    "aotc.bundle_write": "aotc.export_writer",
    "aotc.capture.finish": "aotc.capture.flat_programs",
    "aotc.capture.program": "aotc.capture.model_with_loss",
    "aotc.capture.slots": "aotc.capture.slot_names",
    "aotc.checkpoint": "aotc.sources.checkpoint",
    "aotc.content_check": "aotc.bundle.content_check",
    "aotc.diff": "aotc.tools.diff",
    "aotc.diff_change": "aotc.tools.diff_change",
    "aotc.diff_tensors": "aotc.tools.diff_tensors",
    "aotc.extras": "aotc.optional_deps",
    "aotc.fingerprint": "aotc.bundle.fingerprint",
    "aotc.formats": "aotc.exporters.formats",
    "aotc.generation": "aotc.tools.generation",
    "aotc.generation_export": "aotc.tools.generation_export",
    "aotc.graph_inputs": "aotc.exporters.graph_inputs",
    "aotc.hf": "aotc.sources.hf_folder",
    "aotc.model_file": "aotc.sources.model_file",
    "aotc.observe": "aotc.tools.observe",
    "aotc.optimizers": "aotc.contract.optimizers",
    "aotc.outputs": "aotc.contract.outputs",
    "aotc.parity": "aotc.tools.verify",
    "aotc.randomness": "aotc.contract.randomness",
    "aotc.records": "aotc.bundle.records",
    "aotc.reference": "aotc.tools.reference",
    "aotc.regional_bundle": "aotc.runtime.regional",
    "aotc.regions": "aotc.tools.regions",
    "aotc.regions_schema": "aotc.bundle.regions_schema",
    "aotc.report": "aotc.tools.report",
    "aotc.report_graph": "aotc.tools.report_graph",
    "aotc.run_once": "aotc.tools.run_once",
    "aotc.runtime.program": "aotc.runtime.loaded_program",
    "aotc.schema": "aotc.bundle.schema",
    "aotc.schema_json": "aotc.bundle.schema_json",
    "aotc.size_check": "aotc.tools.size_check",
    "aotc.subclasses": "aotc.contract.subclasses",
    "aotc.subclasses_schema": "aotc.bundle.subclasses_schema",
    "aotc.summary": "aotc.bundle.summary",
    "aotc.units": "aotc.number_format",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module) -> None:
        warnings.warn(f"{module.__name__} moved to {self.target}; import it from there", DeprecationWarning,
                      stacklevel=2)
        # the import system returns whatever sys.modules holds under the name after this call
        sys.modules[module.__name__] = importlib.import_module(self.target)


class MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in MOVED:
            return importlib.util.spec_from_loader(name, _Alias(MOVED[name]))
        return None


def install() -> None:
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
