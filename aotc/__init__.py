"""aotc: ahead-of-time export and compilation of PyTorch models into bundles.

The pipeline::

    load model file -> capture (torch.export + AOTAutograd) -> write bundle
                    -> compile (AOTInductor) / ONNX -> aotc.load -> run

A bundle is a directory: manifest.json, signature.json, metadata.json (every input's
mutations and every output's aliasing), weights.safetensors and graphs/<kind>.pt2.

Example::

    import torch, aotc
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    bundle = aotc.export(model, (torch.randn(2, 4),), "out/mlp", force=True)
    print(bundle.manifest.graph_kinds)          # ['inference']
    program = bundle.load_program("inference")  # torch.export.ExportedProgram
"""

from aotc.api import __version__, export
from aotc.bundle import Bundle
from aotc.errors import AotcError, BundleError, CaptureError, CheckpointError, ModelFileError
from aotc.model_file import ModelSpec, load_model

__all__ = [
    "AotcError",
    "Bundle",
    "BundleError",
    "CaptureError",
    "CheckpointError",
    "ModelFileError",
    "ModelSpec",
    "__version__",
    "export",
    "load_model",
]
