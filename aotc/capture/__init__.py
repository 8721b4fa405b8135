"""Capture: a model and example inputs -> flat, functional graphs plus full metadata.

The pipeline, one module per step, all on PyTorch's own machinery::

    model, example inputs
      -> inputs, dynamic_shapes  flat user inputs: names, checks, aliasing; the user's
                                 dynamic_shapes rewritten for Program
      -> program                 Program: the model, followed by its loss for training
      -> trace, ranges           torch.export(strict=False) of the Program, within the
                                 dynamic ranges it proves (narrowed, or refused with the
                                 line that fixed a size), then AOTAutograd
                                 (aot_export_joint_with_descriptors; for "autograd" the
                                 chosen partitioner splits the joint graph)
      -> slots, metadata         descriptors -> named Slots; ViewAndMutationMeta ->
                                 ProgramMeta (mutations, output aliasing, view layouts)
      -> eager_check             the metadata checked against one eager call
      -> finish                  each graph re-exported as a flat program
                                 `(params, buffers, user inputs | saved, tangents) -> outputs`
      -> Capture (types)         graphs, metadata and state, for the bundle writer

`driver.capture` runs it. torch.export handles data-dependent Python (Hugging Face masks)
and gives symbolic example inputs; AOTAutograd functionalizes the program and records
every input mutation and output alias. The flat programs can be saved with
`torch.export.save` and compiled by AOTInductor; weights are inputs, never constants.

Mutations and aliasing are *not* replayed by these graphs: mutated inputs come out as
extra outputs and aliased outputs as plain tensors. The metadata says how the runtime
puts them back, exactly as AOTAutograd's own runtime wrappers do.

    >>> import torch
    >>> from aotc.capture import capture
    >>> cap = capture(torch.nn.Linear(4, 2), (torch.randn(3, 4),), {})
    >>> sorted(cap.graphs), [s.name for s in cap.graphs["inference"].signature.inputs]
    (['inference'], ['weight', 'bias', 'input'])
"""

from aotc.capture.driver import capture, capture_call
from aotc.capture.flat_programs import CapturedGraph
from aotc.capture.types import MODES, Capture, CaptureOptions

__all__ = ["MODES", "Capture", "CaptureOptions", "CapturedGraph", "capture", "capture_call"]
