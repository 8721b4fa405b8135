"""Artifact formats, one module each: fx (the captured graphs), aoti (AOTInductor
packages), onnx (ONNX models run by onnxruntime).

Each module has the members of `aotc.formats.Format` (FORMAT, FILE_KIND,
artifact_path, has_artifacts, load_graph, build); aotc finds them through the registry
in aotc/formats.py, never by importing this package.
"""
