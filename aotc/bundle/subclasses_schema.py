"""metadata.json's `subclasses` section: how tensor subclasses are rebuilt from the inner
tensors the graphs take (aotc.subclasses describes them; capture/ and runtime/ use them).
Read and written with `aotc.schema`'s helpers as part of `Metadata`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SubclassTensor:
    """How to rebuild one tensor subclass from the inner tensors the graphs take.

    Mirrors AOTAutograd's SubclassCreationMeta: `class_name` is `module:qualname`,
    `context` the `__tensor_flatten__` context as JSON (aotc.subclasses.encode_context),
    `inner` its inner tensors in flatten order (null: a plain tensor; else a subclass in
    turn), and `shape`/`stride`/`dtype` the outer tensor's, passed to
    `__tensor_unflatten__`. The graphs see inner tensors as `<name>:<inner>[:<inner>...]`.
    """

    class_name: str
    context: Any
    inner: dict[str, SubclassTensor | None]
    shape: list[int]
    stride: list[int]
    dtype: str
    requires_grad: bool = False


@dataclass(frozen=True)
class Subclasses:
    """Tensors that were traceable wrapper subclasses in the eager model (torchao's
    quantized weights, ...); every graph takes and returns their inner tensors.

    `state`: parameters and buffers by FQN. `inputs`/`outputs`: by position among the
    flat user inputs/outputs of the model as the caller sees it (`in_spec`/`out_spec`,
    whose leaves are the subclass tensors themselves; `input_names` names them).
    """

    state: dict[str, SubclassTensor]
    inputs: dict[str, SubclassTensor]
    outputs: dict[str, SubclassTensor]
    in_spec: str
    out_spec: str
    input_names: list[str]
    # how the gradient of a subclass parameter (by FQN) or input (by position) is
    # rebuilt, as AOTAutograd traced it (SubclassMeta.grad_input_metas)
    state_grads: dict[str, SubclassTensor] = field(default_factory=dict)
    input_grads: dict[str, SubclassTensor] = field(default_factory=dict)
