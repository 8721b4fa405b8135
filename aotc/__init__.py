"""aotc: ahead-of-time export and compilation of PyTorch models into bundles.

The pipeline::

    load model file -> capture (torch.export + AOTAutograd) -> write bundle
                    -> compile (AOTInductor) / ONNX -> aotc.load -> run

A bundle is a directory: manifest.json (every other file with its size and sha256),
signature.json, metadata.json (every input's mutations and every output's aliasing),
weights.safetensors and graphs/<kind>.pt2. `Bundle.open` checks all of it and runs
nothing; `aotc.load` runs the bundle's graphs (compiled ones are native code).

The modules, in layers; imports go one way, down (tests/test_architecture.py):

    foundation  errors, _torch_compat (every private torch import), schema + schema_json
                (the JSON files), model_file, aliasing, ambient, devices, optimizers
    capture/    torch.export + AOTAutograd -> a Capture (graphs, signature, metadata)
    bundle      bundle (open, check, write files atomically: atomic, archives,
                bundle_check, content_check, fingerprint), bundle_write (a Capture as
                a bundle, with eager's references: reference + observe), formats (the
                exporter interface; exporters/ holds the formats)
    runtime/    aotc.load: the wrapper stack; regional_bundle (aotc.apply), generation
                (aotc.generate)
    tools       api (aotc.export: capture, write, replay and size checks), compiler
                (aotc.compile), parity (aotc.verify), regions +
                generation_export (regional and generation exports), run_once
                (aotc.run_bundle), bench, diff, report, records, hf

Example::

    import torch, aotc
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    bundle = aotc.export(model, (torch.randn(2, 4),), "out/mlp", force=True)
    print(bundle.manifest.graph_kinds)          # ['inference']
    program = bundle.load_program("inference")  # torch.export.ExportedProgram
    aotc.compile("out/mlp")                     # adds compiled/cpu/inference.pt2 (AOTInductor)
    m = aotc.load("out/mlp")                    # an nn.Module that behaves like `model`

Names are imported lazily so that `import aotc` (and `aotc --help`) does not import torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "export": "aotc.api",
    "ExportOptions": "aotc.api",
    "load": "aotc.runtime",
    "compile": "aotc.compiler",
    "verify": "aotc.parity",
    "apply": "aotc.regional_bundle",
    "diff_bundles": "aotc.diff",
    "write_report": "aotc.report",
    "write_record": "aotc.records",
    "export_regions": "aotc.regions",
    "RegionalBundle": "aotc.regional_bundle",
    "generate": "aotc.generation",
    "export_generation": "aotc.generation_export",
    "run_bundle": "aotc.run_once",
    "run_generation": "aotc.run_once",
    "Bundle": "aotc.bundle",
    "load_model": "aotc.model_file",
    "ModelSpec": "aotc.model_file",
    "AotcError": "aotc.errors",
    "BundleError": "aotc.errors",
    "CaptureError": "aotc.errors",
    "CheckpointError": "aotc.errors",
    "ModelFileError": "aotc.errors",
    "InputError": "aotc.errors",
    "GraphRunError": "aotc.errors",
    "DeviceError": "aotc.errors",
    "MissingDependencyError": "aotc.errors",
    "UntrustedSubclassError": "aotc.errors",
    "AmbientStateError": "aotc.errors",
    "GraphBreakError": "aotc.errors",
    "RegionError": "aotc.errors",
    "DistributedError": "aotc.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'aotc' has no attribute {name!r}")
