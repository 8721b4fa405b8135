"""aotc: ahead-of-time export and compilation of PyTorch models into bundles.

The pipeline::

    load model file -> capture (torch.export + AOTAutograd) -> write bundle
                    -> compile (AOTInductor) / ONNX -> aotc.load -> run

A bundle is a directory: manifest.json (every other file with its size and sha256),
signature.json, metadata.json (every input's mutations and every output's aliasing),
weights.safetensors and graphs/<kind>.pt2. `Bundle.open` checks all of it and runs
nothing; `aotc.load` runs the bundle's graphs (compiled ones are native code).

The tree, in layers; imports go one way, down (tests/test_architecture.py checks it):

    foundation    errors, _torch_compat (every private torch import), devices, optional_deps
    bundle/       the bundle format: files (Bundle), schema, check, content_check, archives,
                  atomic, fingerprint, records, summary, signing (model.sig)
    contract/     what eager did that a bundle replays: aliasing, ambient, outputs,
                  optimizers, subclasses, randomness
    sources/      where a model comes from: model_file, hf_folder, checkpoint
    capture/      torch.export + AOTAutograd -> a Capture (graphs, signature, metadata)
    runtime/      aotc.load: the wrapper stack; regional (aotc.apply)
    exporters/    formats (the Format protocol, the registry); fx, aoti, onnx
    api, export_writer, compiler
                  aotc.export (capture, write the bundle, replay and size checks), aotc.compile
    tools/        verify (aotc.verify), size_check, bench, diff, report, generation, regions,
                  run_once (aotc.run_bundle)
    cli/          the commands: parse, call the library, print

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

from aotc import moved_modules

__version__ = "0.1.0"
moved_modules.install()  # the flat module paths of aotc 0.1 (aotc.parity, aotc.schema, ...) still import

_EXPORTS = {
    "export": "aotc.api",
    "ExportOptions": "aotc.api",
    "load": "aotc.runtime",
    "compile": "aotc.compiler",
    "CompileOptions": "aotc.compiler",
    "verify": "aotc.tools.verify",
    "apply": "aotc.runtime.regional",
    "diff_bundles": "aotc.tools.diff",
    "write_report": "aotc.tools.report",
    "write_record": "aotc.bundle.records",
    "export_regions": "aotc.tools.regions",
    "RegionalBundle": "aotc.runtime.regional",
    "generate": "aotc.tools.generation",
    "export_generation": "aotc.tools.generation_export",
    "run_bundle": "aotc.tools.run_once",
    "run_generation": "aotc.tools.run_once",
    "Bundle": "aotc.bundle",
    "load_model": "aotc.sources.model_file",
    "ModelSpec": "aotc.sources.model_file",
    "AotcError": "aotc.errors",
    "BundleError": "aotc.errors",
    "CaptureError": "aotc.errors",
    "CheckpointError": "aotc.errors",
    "ModelFileError": "aotc.errors",
    "InputError": "aotc.errors",
    "GraphRunError": "aotc.errors",
    "DeviceError": "aotc.errors",
    "CudaGraphError": "aotc.errors",
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
