"""The bundle's JSON files, as dataclasses that validate on read and describe themselves.

`manifest.json`, `signature.json` and `metadata.json` are each one top-level dataclass
here (a regional bundle's regions.json is in `aotc.regions_schema`). `to_json(obj)` writes
one; `from_json(cls, data, where)` reads and checks one, naming the file and field of any
problem; `json_schema(cls)` prints its JSON Schema (all three from aotc.schema_json).
Nothing torch-internal appears in these files: AOTAutograd's enums are stored by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from aotc.bundle.schema_json import OMIT_DEFAULT, from_json, json_schema, to_json  # noqa: F401 (read and written through here)
from aotc.bundle.signature_schema import (  # noqa: F401 (the schema's names, all importable from here)
    GRAPH_KINDS,
    BackwardSignature,
    ConstantInput,
    ConstantType,
    ConstantValue,
    GraphKind,
    GraphSignature,
    InputRole,
    OutputRole,
    Signature,
    ScalarType,
    Slot,
    SlotRole,
    UserInput,
)
from aotc.bundle.subclasses_schema import Subclasses

# 2: every file is listed and hashed (signature.json and metadata.json too), and the
# manifest carries a checksum of its own content.
# 3: the manifest records torch.export's serialization format (export_schema). Version 2
# bundles are read as they are (without it); an aotc that reads 2 only says to upgrade.
# 4: each input's mutation_is_shallow_copy_data (torch 2.14's replay flag for a storage
# swap); versions 2 and 3 are read with it False, which is what their torches traced.
FORMAT_VERSION = 4
OLDEST_FORMAT_READ = 2

MutationTypeName = Literal["NOT_MUTATED", "MUTATED_IN_GRAPH", "MUTATED_OUT_GRAPH"]
OutputTypeName = Literal[
    "non_alias",
    "alias_of_input",
    "is_input",
    "alias_of_intermediate_save_as_output",
    "alias_of_intermediate",
    "alias_of_intermediate_base_is_user_output",
    "unsafe_view_alias",
    "custom_function_view",
]
# "hf": tokenizer, processor and config files of a Hugging Face folder, copied as they are
FileKind = Literal[
    "signature", "metadata", "weights", "graph", "graph_code", "compiled", "onnx", "reference", "hf", "record", "other",
    "optimizer",
]


# ----------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class FileEntry:
    """One file of the bundle; `path` is relative to the bundle root, with '/'.

    `build` (compiled artifacts only) records what the file was built for: torch version,
    device, CPU instruction set and flags or CUDA architecture, compiler.
    """

    path: str
    kind: FileKind
    size: int
    sha256: str
    graph: str | None = None
    device: str | None = None
    build: dict[str, str] | None = None


@dataclass(frozen=True)
class ModelInfo:
    """Where the bundle came from. `source` is the model file, `pkg.mod:factory`, or a
    Hugging Face folder (then `task` is what the model was built for)."""

    name: str
    source: str | None
    class_name: str
    training: bool
    checkpoint: str | None = None
    num_parameters: int = 0
    task: str | None = None


@dataclass(frozen=True)
class GenerationInfo:
    """A generation bundle (graphs "prefill" and "decode" over a static KV cache held as
    buffers): the cache's batch size and length, and the tokens that end a sequence."""

    batch_size: int
    max_cache_len: int
    eos_token_ids: list[int] = field(default_factory=list)
    pad_token_id: int | None = None


@dataclass(frozen=True)
class Manifest:
    """manifest.json: versions, graph kinds, and every file with its size and sha256."""

    format_version: int
    aotc_version: str
    torch_version: str
    python_version: str
    created: str
    model: ModelInfo
    graph_kinds: list[GraphKind]
    partitioner: str | None
    files: list[FileEntry]
    # [rtol, atol] for each entry of reference.safetensors that verify compares
    tolerances: dict[str, list[float]] = field(default_factory=dict)
    generation: GenerationInfo | None = None
    # [major, minor] of torch.export's serialization format the graphs were saved in
    # (empty in bundles from before aotc recorded it)
    export_schema: list[int] = field(default_factory=list)
    # sha256 of this manifest's JSON without this field (aotc.bundle.manifest_checksum)
    checksum: str = ""

    def file(self, path: str) -> FileEntry | None:
        return next((f for f in self.files if f.path == path), None)


# ----------------------------------------------------------------------------- metadata


@dataclass(frozen=True)
class DynamicDim:
    """A dimension whose size may vary at run time, within [min, max] (max None: unbounded).

    `declared_min` is set when the export asked for a smaller minimum than the bundle
    accepts: sizes below `min` were run at export and did not replay as eager did (torch
    traces dynamic dims assuming sizes of 2 and up, so 0 and 1 are checked, not trusted),
    or torch.export proved the graph only from `min`. `declared_max` likewise, for a
    larger maximum than torch.export proved. `narrowed_by` is set where torch.export
    narrowed the range: the guard the declared range broke, and the model line that added
    it. [min, max] always lies within the declared range.
    """

    symbol: str
    min: int
    max: int | None
    declared_min: int | None = None
    declared_max: int | None = None
    narrowed_by: str | None = None


@dataclass(frozen=True)
class TensorMeta:
    """Shape, stride, dtype and device of the example tensor; sizes are the example's.

    `value_range` is [min, max] of an integer or bool example input (token ids, masks),
    so `aotc run` can make valid random inputs without the model's source.
    """

    shape: list[int]
    stride: list[int]
    dtype: str
    device: str
    dynamic_dims: dict[str, DynamicDim] = field(default_factory=dict)
    value_range: list[int] | None = None


@dataclass(frozen=True)
class Layout:
    """Sizes, strides and storage offset of a tensor, all static."""

    shape: list[int]
    stride: list[int]
    storage_offset: int


@dataclass(frozen=True)
class InputMeta:
    """One input of the traced program (parameters, buffers, then deduplicated user inputs).
    A `synthetic_base` input stands for user inputs that shared memory at capture and
    were traced as views of one base (see AliasGroup).

    Mirrors AOTAutograd's InputAliasInfo; `mutation_type` is MUTATED_OUT_GRAPH when the
    runtime must apply the mutation (`copy_` for data, `as_strided_` for metadata, and for
    a storage swap `set_`, or `aten.shallow_copy_data_` where `mutation_is_shallow_copy_data`
    says the program swapped it that way: a `.data` assignment, traced so from torch 2.14).
    `duplicate_of` is set on a user input that was the same tensor as an earlier one.
    """

    kind: Literal["parameter", "buffer", "user_input", "synthetic_base"]
    name: str
    tensor: TensorMeta | None
    requires_grad: bool
    is_leaf: bool
    mutates_data: bool
    mutates_metadata: bool
    mutates_storage_metadata: bool
    mutations_hidden_from_autograd: bool
    mutations_under_no_grad_or_inference_mode: bool
    mutation_type: MutationTypeName
    # after a metadata mutation (static sizes only): the input's layout, which the runtime
    # restores with as_strided_ (a compiled graph returns the new value, not its view)
    layout_after: Layout | None = None
    # format 4: InputAliasInfo's flag from torch 2.14 on (False under earlier torches)
    mutation_is_shallow_copy_data: bool = False


@dataclass(frozen=True)
class OutputMeta:
    """One user output. Mirrors AOTAutograd's OutputAliasInfo.

    `base_idx` indexes program inputs for alias_of_input/is_input (and for a
    custom_function_view that views an input in eager), intermediate bases for
    alias_of_intermediate*, user outputs for alias_of_intermediate_base_is_user_output;
    `base` names it for people. `view_replay` lists the view ops from base to output;
    `view_offset` is the output's storage offset relative to its base (None if symbolic),
    which the runtime uses to rebuild the alias with `base.as_strided`.
    """

    index: int
    output_type: OutputTypeName
    base_idx: int | None
    base: str | None
    requires_grad: bool
    tensor: TensorMeta | None
    view_replay: list[str] = field(default_factory=list)
    view_offset: int | None = None
    # Under no_grad AOTAutograd calls every view of an intermediate "non_alias"; eager still
    # returns the same tensor twice, or a view of another output. Recorded from the graph
    # so backends that copy outputs (ONNX) alias them as eager does.
    same_as_output: int | None = None
    view_of_output: int | None = None
    # an output the model returns as a constant (None, a number, a str): no graph
    # computes it, the runtime returns this value
    constant: ConstantValue | None = field(default=None, metadata={OMIT_DEFAULT: True})
    # a Python number the model computes (`.item()`): the graph returns a 0-d tensor
    # (bool, int64, float64), the runtime the number
    scalar: ScalarType | None = field(default=None, metadata={OMIT_DEFAULT: True})


@dataclass(frozen=True)
class AliasedInput:
    """A user input's place in the storage it shared with others at capture."""

    input: int  # user input index
    shape: list[int]
    stride: list[int]
    storage_offset: int


@dataclass(frozen=True)
class AliasGroup:
    """User inputs that were distinct tensors on one storage when the program was captured.

    With `synthetic_base` set (the name of that graph input), the graph takes their
    common base (`kind` "view_base": the inputs' autograd base; "storage": the whole
    storage) and makes the inputs as views of it, so a mutation of one is seen by the
    others; the runtime accepts only calls whose inputs sit on one storage exactly so.
    Without it the inputs did not overlap, and the graph treats them as independent.
    `base` is the base's shape, stride and storage offset at capture.
    """

    members: list[AliasedInput]
    synthetic_base: str | None = None
    kind: Literal["view_base", "storage"] | None = None
    base: AliasedInput | None = None


@dataclass(frozen=True)
class ProgramMeta:
    """Mutation and alias facts of one captured program (inference, joint or forward).

    `outputs_same_as_inputs` maps a user output index to the user input eager returned
    as that very object, where the graph saw only a view of a synthetic base.
    `inputs_set_requires_grad` are user inputs that forward switches to requires_grad=True
    (the runtime does that before the graph runs, as the graph was traced that way).
    `outputs_with_history` (inference graphs): user outputs eager gives a grad_fn under
    grad mode with its parameters requiring grad; called so, the runtime gives them one
    whose backward refuses with a named error, since the bundle holds no backward graph.
    """

    inputs: list[InputMeta]
    outputs: list[OutputMeta]
    num_intermediate_bases: int
    duplicate_user_inputs: dict[str, int] = field(default_factory=dict)
    grad_enabled_mutation: bool | None = None
    aliased_inputs: list[AliasGroup] = field(default_factory=list)
    outputs_same_as_inputs: dict[str, int] = field(default_factory=dict)
    inputs_set_requires_grad: list[int] = field(default_factory=list)
    outputs_with_history: list[int] | None = None


@dataclass(frozen=True)
class AmbientState:
    """The global state the graphs were captured under, which Dynamo would guard on:
    grad mode, autocast (device type -> its dtype, for each device type where it was on),
    the default dtype, deterministic algorithms, and the torch-function modes active.
    The runtime refuses a call made under a state that would change the result."""

    grad_enabled: bool
    autocast: dict[str, str]
    default_dtype: str
    deterministic: bool
    torch_function_modes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OptimizerInfo:
    """The optimizer a joint graph applies after its gradients (torch.optim's SGD or AdamW
    update): over `parameters` in this order, with `hyperparameters` as graph inputs
    (their values at export), `options` fixing the graph's structure, and `state` naming
    each parameter's state tensors, stored in optimizer.safetensors as '<fqn>/<key>'."""

    name: Literal["sgd", "adamw"]
    hyperparameters: dict[str, float]
    options: dict[str, bool]
    parameters: list[str]
    state: list[str]


@dataclass(frozen=True)
class Metadata:
    """metadata.json: per program, every input's mutations and every output's aliasing;
    for a joint bundle that carries its optimizer, that optimizer."""

    training: bool
    user_inputs: list[TensorMeta]
    programs: dict[str, ProgramMeta]
    subclasses: Subclasses | None = None
    ambient: AmbientState | None = None
    optimizer: OptimizerInfo | None = None
