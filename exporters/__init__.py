"""Artifact formats, one module each: fx (the captured graphs), aoti (AOTInductor
packages), onnx (ONNX models run by onnxruntime).

Each module has the members of `formats.Format` (FORMAT, FILE_KIND, artifact_path,
has_artifacts, load_graph, build, write); aotc finds them through the registry in
`formats`, never by importing a format by name. `graph_inputs` builds the example inputs
a format compiles or translates a graph with.
"""
