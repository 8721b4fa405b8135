"""A bundle's JSON checked against itself, before any use (aotc.bundle.content_check checks
the graphs, weights and optimizer state against it as they are read).

The schema (aotc.bundle.schema) says each field has the right type; a bundle whose files were
edited and re-hashed can still be well-typed and wrong: an index past the end of a list,
a stride that is negative, a dtype torch has never heard of, a slot that names an input
the graph does not take. The runtime passes these values to `as_strided_`, `view`,
`copy_` and list indexing, so each is checked here first, and a violation is a
BundleError naming the file and the field.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from aotc.bundle.schema import GraphSignature, Manifest, Metadata, ProgramMeta, Signature, TensorMeta
from aotc.bundle.subclasses_schema import Subclasses, SubclassTensor
from aotc.contract.call_form import CallForm
from aotc.contract.call_inputs import constant_value, load_constant as _load_constant
from aotc.contract.optimizers import HYPERPARAMETERS, OPTIMIZER_STATE
from aotc.contract.outputs import load_spec
from aotc.contract.subclasses import decode_context, inner_paths
from aotc.errors import BundleError

DTYPES = frozenset({
    "float32", "float64", "float16", "bfloat16", "complex32", "complex64", "complex128",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
})
_DEVICE = re.compile(r"(cpu|cuda|meta)(:[0-9]{1,3})?")
# a module or tensor name, as torch allows them (nn.ModuleDict takes keys like "2-1"): anything
# but the separators and control characters. A subclass's inner tensors are attributes.
_FQN_PART = re.compile(r"[^.:\x00-\x1f\x7f]+")
_ATTR = re.compile(r"[A-Za-z0-9_]+")
_MAX_DIM = 1 << 62
_INPUT_ROLES = {"parameter", "buffer", "user_input", "synthetic_base", "constant"}
_OUTPUT_ROLES = {"input_mutation", "user_output", "intermediate_base", "saved", "gradient", "loss", "unused"}
# a joint graph that carries its optimizer (aotc.contract.optimizers): after the model's inputs
_OPTIMIZER_INPUTS = {"optimizer_state", "hyperparameter"}
_OPTIMIZER_OUTPUTS = {"updated_parameter", "optimizer_state"}


class Where:
    """Names the file and field of a problem."""

    def __init__(self, root: Path):
        self.root = root

    def fail(self, file: str, field: str, problem: str):
        raise BundleError(f"{self.root}/{file}: {field}: {problem}. The bundle is damaged or was edited; "
                          "export it again.")


def _fqn_ok(name: object) -> bool:
    return isinstance(name, str) and all(_FQN_PART.fullmatch(p) for p in name.split("."))


def _state_name_ok(name: object) -> bool:
    """An FQN, or an inner tensor of a subclass parameter/buffer: `fqn:attr[:attr...]`."""
    if not isinstance(name, str):
        return False
    fqn, *attrs = name.split(":")
    return _fqn_ok(fqn) and all(_ATTR.fullmatch(a) for a in attrs)


def _index_ok(value: object, length: int) -> bool:
    return isinstance(value, int) and 0 <= value < length


def check_tensor(t: TensorMeta, w: Where, file: str, field: str) -> None:
    if t.dtype not in DTYPES:
        w.fail(file, f"{field}.dtype", f"{t.dtype!r} is not a dtype aotc knows")
    if not _DEVICE.fullmatch(t.device):
        w.fail(file, f"{field}.device", f"{t.device!r} is not a device aotc knows")
    if len(t.shape) != len(t.stride) or len(t.shape) > 64:
        w.fail(file, field, f"shape {t.shape} and stride {t.stride} do not describe one tensor")
    if any(not 0 <= n < _MAX_DIM for n in [*t.shape, *t.stride]):
        w.fail(file, field, f"shape {t.shape} / stride {t.stride} must be non-negative and bounded")
    for dim, d in t.dynamic_dims.items():
        if not dim.isdigit() or int(dim) >= len(t.shape):
            w.fail(file, f"{field}.dynamic_dims", f"{dim!r} is not a dimension of a {len(t.shape)}-d tensor")
        if (d.min < 0 or (d.max is not None and d.max < d.min) or (d.declared_min is not None and d.declared_min < 0)
                or (d.declared_max is not None and d.declared_max < 0)):
            w.fail(file, f"{field}.dynamic_dims.{dim}", f"range [{d.min}, {d.max}] is not a range of sizes")
    if t.value_range is not None and (len(t.value_range) != 2 or t.value_range[0] > t.value_range[1]):
        w.fail(file, f"{field}.value_range", f"{t.value_range} is not [min, max]")


def _check_geometry(shape, stride, offset, w: Where, file: str, field: str) -> None:
    if len(shape) != len(stride) or any(not 0 <= n < _MAX_DIM for n in [*shape, *stride, offset]):
        w.fail(file, field, f"shape {shape}, stride {stride}, offset {offset} is not a valid layout")


def check_consistency(manifest: Manifest, signature: Signature, metadata: Metadata, root: Path) -> None:
    """Everything the runtime will look up or index, checked to be there and in range."""
    w = Where(root)
    kinds = list(manifest.graph_kinds)
    if len(set(kinds)) != len(kinds) or not kinds:
        w.fail("manifest.json", "graph_kinds", f"{kinds} must be distinct and not empty")
    if set(signature.graphs) != set(kinds):
        w.fail("signature.json", "graphs", f"has {sorted(signature.graphs)}, the manifest says {kinds}")
    for kind, sig in signature.graphs.items():
        if sig.kind != kind:
            w.fail("signature.json", f"graphs.{kind}.kind", f"says {sig.kind!r}")
    expected_programs = {k for k in kinds if k != "backward"}
    if set(metadata.programs) != expected_programs:
        w.fail("metadata.json", "programs", f"has {sorted(metadata.programs)}, expected {sorted(expected_programs)}")
    if "backward" in kinds and "forward" not in kinds:
        w.fail("manifest.json", "graph_kinds", "a backward graph needs its forward graph")
    for entry in manifest.files:
        if entry.graph is not None and entry.graph not in kinds:
            w.fail("manifest.json", f"files[{entry.path}].graph", f"{entry.graph!r} is not a graph of this bundle")
        if entry.device is not None and not _DEVICE.fullmatch(entry.device):
            w.fail("manifest.json", f"files[{entry.path}].device", f"{entry.device!r} is not a device")

    for name, tol in manifest.tolerances.items():
        if len(tol) != 2 or not all(math.isfinite(t) and t >= 0 for t in tol):
            w.fail("manifest.json", f"tolerances.{name}", f"{tol} is not [rtol, atol], both finite and >= 0")
    g = manifest.generation
    if g is not None and (g.batch_size < 1 or g.max_cache_len < 1 or any(t < 0 for t in g.eos_token_ids)
                          or (g.pad_token_id is not None and g.pad_token_id < 0)):
        w.fail("manifest.json", "generation", "batch size, cache length and token ids must be positive")

    num_inputs = len(signature.user_inputs)
    if len(metadata.user_inputs) != num_inputs:
        w.fail("metadata.json", "user_inputs", f"{len(metadata.user_inputs)} entries, signature.json has {num_inputs}")
    for i, t in enumerate(metadata.user_inputs):
        check_tensor(t, w, "metadata.json", f"user_inputs[{i}]")
    _check_specs(signature, w)
    _check_call_inputs(signature, metadata, w)
    state = set()
    for kind, program in metadata.programs.items():
        _check_program_meta(kind, program, signature.graphs[kind], num_inputs, signature.num_user_outputs, w,
                            metadata.optimizer is not None)
        state |= {i.name for i in program.inputs if i.kind in ("parameter", "buffer")}
    if metadata.optimizer is not None:
        _check_optimizer(metadata.optimizer, signature, state, manifest, w)
    for alias, target in signature.state_aliases.items():
        if not _fqn_ok(alias) or target not in state:
            w.fail("signature.json", f"state_aliases.{alias}", f"{target!r} is not a parameter or buffer")
    for name in signature.non_persistent_buffers:
        if name not in state and name not in signature.state_aliases:
            w.fail("signature.json", "non_persistent_buffers", f"{name!r} is not a buffer")
    a = metadata.ambient
    if a is not None and (a.default_dtype not in DTYPES or not set(a.autocast) <= {"cpu", "cuda"}
                          or not set(a.autocast.values()) <= DTYPES):
        w.fail("metadata.json", "ambient", "default dtype and autocast must name dtypes and device types aotc knows")
    if metadata.subclasses is not None:
        _check_subclasses(metadata.subclasses, state, signature, w)
    elif any(":" in name for name in state):
        w.fail("metadata.json", "subclasses", "inner tensors of subclasses are listed, but no subclasses")
    if "backward" in kinds:
        _check_backward(signature.graphs["forward"], signature.graphs["backward"], w)
    if "joint" in kinds:
        _check_joint(signature.graphs["joint"], w)


def _check_subclasses(info: Subclasses, state: set[str], signature: Signature, w: Where) -> None:
    """Every subclass names its inner tensors among the graphs' inputs, and the caller's
    view (outer specs) adds up to the graphs' flat inputs and outputs."""

    file = "metadata.json"

    def check(meta: SubclassTensor, where: str) -> None:
        module, _, qualname = meta.class_name.partition(":")
        if not qualname or not all(p.isidentifier() for p in [*module.split("."), *qualname.split(".")]):
            w.fail(file, f"{where}.class_name", f"{meta.class_name!r} is not module:qualname")
        decode_context(meta.context, f"{root_name(file)}: {where}.context")
        if meta.dtype not in DTYPES:
            w.fail(file, f"{where}.dtype", f"{meta.dtype!r} is not a dtype aotc knows")
        _check_geometry(meta.shape, meta.stride, 0, w, file, where)
        if not meta.inner or not all(_ATTR.fullmatch(a) for a in meta.inner):
            w.fail(file, f"{where}.inner", "a subclass needs inner tensors with attribute names")
        for attr, sub in meta.inner.items():
            if sub is not None:
                check(sub, f"{where}.inner.{attr}")

    def root_name(f: str) -> str:
        return str(w.root / f)

    listed = set()
    for fqn, meta in info.state.items():
        check(meta, f"subclasses.state.{fqn}")
        names = {":".join((fqn, *p)) for p in inner_paths(meta)}
        if not _fqn_ok(fqn) or not names <= state:
            w.fail(file, f"subclasses.state.{fqn}", "its inner tensors are not inputs of the graphs")
        listed |= names
    if {n for n in state if ":" in n} - listed:
        w.fail(file, "subclasses.state", "a graph takes an inner tensor of a subclass it does not describe")
    for field, grads, of in (("state_grads", info.state_grads, info.state), ("input_grads", info.input_grads, info.inputs)):
        for key, meta in grads.items():
            check(meta, f"subclasses.{field}.{key}")
            if key not in of or inner_paths(meta) != inner_paths(of[key]):
                w.fail(file, f"subclasses.{field}.{key}", "a gradient must have the inner tensors of what it is "
                       "the gradient of")
    for field, group, count, spec_text, total in (
        ("inputs", info.inputs, len(info.input_names), info.in_spec, len(signature.user_inputs)),
        ("outputs", info.outputs, None, info.out_spec, signature.num_user_outputs),
    ):
        try:
            spec = load_spec(spec_text)
        except Exception as e:  # pytree raises whatever its JSON decoding meets
            w.fail(file, f"subclasses.{field}", f"its spec is not a pytree spec ({type(e).__name__})")
        leaves = spec.num_leaves
        if count is not None and leaves != count:
            w.fail(file, "subclasses.input_names", f"{count} names for {leaves} inputs")
        for key, meta in group.items():
            if not key.isdigit() or int(key) >= leaves:
                w.fail(file, f"subclasses.{field}.{key}", f"not one of the {leaves} flat {field}")
            check(meta, f"subclasses.{field}.{key}")
        dense = sum(len(inner_paths(group[str(k)])) if str(k) in group else 1 for k in range(leaves))
        if dense != total:
            w.fail(file, f"subclasses.{field}", f"add up to {dense} inner tensors; the graphs have {total}")


def _check_specs(signature: Signature, w: Where) -> None:

    for field, text, count in (("in_spec", signature.in_spec, len(signature.user_inputs)),
                               ("out_spec", signature.out_spec, signature.num_user_outputs)):
        try:
            spec = load_spec(text)
        except Exception as e:  # pytree raises whatever its JSON decoding meets
            w.fail("signature.json", field, f"not a pytree spec ({type(e).__name__}: {e})")
        if spec.num_leaves != count:
            w.fail("signature.json", field, f"has {spec.num_leaves} leaves, expected {count}")


def _check_call_inputs(signature: Signature, metadata: Metadata, w: Where) -> None:
    """The in_spec's constants are the ones signature.json names, with the same values,
    and its dynamic ints are the user inputs of kind "int", carried as (n, 0) int64."""
    slots = CallForm.of(load_spec(signature.in_spec), [], []).slots
    constants = [s.constant for s in slots if s.kind == "constant"]
    listed = [(c.type, c.value) for c in signature.constant_inputs]
    if [(kind, constant_value((kind, value))) for kind, value in constants] != [
            (kind, constant_value((kind, value))) for kind, value in listed]:
        w.fail("signature.json", "constant_inputs", "they are not the constants in_spec holds")
    ints = [s.kind == "int" for s in slots if s.kind != "constant"]
    if ints != [u.kind == "int" for u in signature.user_inputs]:
        w.fail("signature.json", "user_inputs", "the inputs of kind 'int' are not the ints in_spec holds")
    for i, (u, meta) in enumerate(zip(signature.user_inputs, metadata.user_inputs)):
        if u.kind == "int" and (len(meta.shape) != 2 or meta.shape[1] != 0 or meta.dtype != "int64"):
            w.fail("metadata.json", f"user_inputs[{i}]", "an int input is carried as an (n, 0) int64 tensor")


def _check_program_meta(kind: str, meta: ProgramMeta, sig: GraphSignature, num_inputs: int, num_outputs: int,
                        w: Where, optimizer: bool = False) -> None:
    file, at = "metadata.json", f"programs.{kind}"
    slots = [s for s in sig.inputs if s.role not in _OPTIMIZER_INPUTS | {"constant"}]
    inputs, outputs = _INPUT_ROLES, _OUTPUT_ROLES
    if optimizer and kind == "joint":
        inputs, outputs = inputs | _OPTIMIZER_INPUTS, outputs | _OPTIMIZER_OUTPUTS
    if any(s.role not in inputs for s in sig.inputs) or any(s.role not in outputs for s in sig.outputs):
        w.fail("signature.json", f"graphs.{kind}", "a slot has a role this graph kind does not take")
    extra = [s for s in sig.inputs if s.role in _OPTIMIZER_INPUTS]
    if sig.inputs[len(slots):len(slots) + len(extra)] != extra:
        w.fail("signature.json", f"graphs.{kind}.inputs", "the optimizer's inputs must follow the model's")
    if sig.inputs[len(slots) + len(extra):] != [s for s in sig.inputs if s.role == "constant"]:
        w.fail("signature.json", f"graphs.{kind}.inputs", "constants must be the last inputs")
    if len(slots) != len(meta.inputs):
        w.fail(file, f"{at}.inputs", f"{len(meta.inputs)} entries, the graph takes {len(slots)} inputs")
    for i, (slot, info) in enumerate(zip(slots, meta.inputs)):
        where = f"{at}.inputs[{i}]"
        if slot.name != info.name or slot.role != info.kind:
            w.fail(file, where, f"{info.kind} {info.name!r} is {slot.role} {slot.name!r} in signature.json")
        if info.kind in ("parameter", "buffer") and not (_state_name_ok(info.name) and slot.target == info.name):
            w.fail(file, f"{where}.name", f"{info.name!r} is not a parameter or buffer name")
        if info.kind in ("user_input", "synthetic_base") and not _index_ok(slot.index, num_inputs):
            w.fail("signature.json", f"graphs.{kind}.inputs[{i}].index", f"{slot.index} is not a user input")
        if info.tensor is not None:
            check_tensor(info.tensor, w, file, f"{where}.tensor")
        if info.layout_after is not None:
            lay = info.layout_after
            _check_geometry(lay.shape, lay.stride, lay.storage_offset, w, file, f"{where}.layout_after")
        if info.mutation_type == "MUTATED_OUT_GRAPH" and f"mutated:{slot.name}" not in {s.name for s in sig.outputs}:
            w.fail(file, f"{where}.mutation_type", f"the graph returns no new value for {slot.name!r}")
    for s in sig.inputs:
        if s.role == "constant" and not isinstance(s.target, str):
            w.fail("signature.json", f"graphs.{kind}.inputs", f"constant {s.name!r} names no stored tensor")
    names = [s.name for s in sig.outputs]
    if len(set(names)) != len(names):
        w.fail("signature.json", f"graphs.{kind}.outputs", "two outputs have one name")
    user = {s.index for s in sig.outputs if s.role in ("user_output", "loss")}
    bases = sum(s.role == "intermediate_base" for s in sig.outputs)
    for s in sig.outputs:
        if s.name.startswith("mutated_metadata:") and not _index_ok(s.index, num_inputs):
            w.fail("signature.json", f"graphs.{kind}.outputs.{s.name}", f"index {s.index} is not a user input")
    if bases != meta.num_intermediate_bases:
        w.fail(file, f"{at}.num_intermediate_bases", f"{meta.num_intermediate_bases}, the graph returns {bases}")
    count = len(meta.outputs)
    if kind in ("inference", "forward", "prefill", "decode") and count != num_outputs:
        w.fail(file, f"{at}.outputs", f"{count} entries, the model returns {num_outputs}")
    for j, o in enumerate(meta.outputs):
        where = f"{at}.outputs[{j}]"
        if o.constant is not None:
            if o.index in user or o.output_type != "non_alias" or o.tensor is not None or o.scalar is not None:
                w.fail(file, f"{where}.constant", "a constant output has no graph output and no tensor")
            try:
                _load_constant([o.constant.type, o.constant.value])
            except ValueError as e:
                w.fail(file, f"{where}.constant", str(e))
            continue
        if o.scalar is not None and (o.output_type != "non_alias" or o.tensor is not None):
            w.fail(file, f"{where}.scalar", "a number output is no view and has no tensor layout")
        if o.index not in user:
            w.fail(file, f"{where}.index", f"{o.index} is not a user output of the graph")
        limit = {"is_input": len(meta.inputs), "alias_of_input": len(meta.inputs),
                 "alias_of_intermediate_base_is_user_output": count}.get(o.output_type)
        if limit is None and o.output_type.startswith("alias_of_intermediate"):
            limit = bases
        if o.output_type == "custom_function_view" and o.base_idx is not None:
            limit = len(meta.inputs)  # the input it views in eager, when it views one
        if limit is not None and not _index_ok(o.base_idx, limit):
            w.fail(file, f"{where}.base_idx", f"{o.base_idx} is not a valid base for {o.output_type}")
        for field, value in (("same_as_output", o.same_as_output), ("view_of_output", o.view_of_output)):
            if value is not None and (not _index_ok(value, count) or value == j):
                w.fail(file, f"{where}.{field}", f"{value} is not another output")
        if o.view_offset is not None and not 0 <= o.view_offset < _MAX_DIM:
            w.fail(file, f"{where}.view_offset", f"{o.view_offset} is not an offset")
        if o.tensor is not None:
            check_tensor(o.tensor, w, file, f"{where}.tensor")
    for key, value in meta.outputs_same_as_inputs.items():
        if not key.isdigit() or int(key) >= count or not _index_ok(value, num_inputs):
            w.fail(file, f"{at}.outputs_same_as_inputs.{key}", f"{value} pairs no output with a user input")
    for key, value in meta.duplicate_user_inputs.items():
        if not key.isdigit() or int(key) >= num_inputs or not _index_ok(value, int(key)):
            w.fail(file, f"{at}.duplicate_user_inputs.{key}", f"{value} is not an earlier user input")
    if any(not _index_ok(i, num_inputs) for i in meta.inputs_set_requires_grad):
        w.fail(file, f"{at}.inputs_set_requires_grad", f"{meta.inputs_set_requires_grad} are not user inputs")
    for g, group in enumerate(meta.aliased_inputs):
        for m in [*group.members, *([group.base] if group.base else [])]:
            if not _index_ok(m.input, num_inputs):
                w.fail(file, f"{at}.aliased_inputs[{g}]", f"input {m.input} is not a user input")
            _check_geometry(m.shape, m.stride, m.storage_offset, w, file, f"{at}.aliased_inputs[{g}]")
        if group.synthetic_base is not None and group.base is None:
            w.fail(file, f"{at}.aliased_inputs[{g}].base", "a synthetic base needs its layout")


def _check_backward(fw: GraphSignature, bw: GraphSignature, w: Where) -> None:
    fw_out = {s.name for s in fw.outputs}
    saved = sum(s.role == "saved" for s in fw.outputs)
    primals = {s.name for s in fw.inputs}
    for i, s in enumerate(bw.inputs):
        ok = ((s.role == "saved" and _index_ok(s.index, saved)) or (s.role == "tangent" and s.target in fw_out)
              or s.role == "constant")  # a tensor made in forward that backward reads, stored with the weights
        if not ok:
            w.fail("signature.json", f"graphs.backward.inputs[{i}]", f"{s.name!r} is not a saved value, tangent or constant")
    for i, s in enumerate(bw.outputs):
        if s.role != "gradient" or s.name.removeprefix("grad:") not in primals:
            w.fail("signature.json", f"graphs.backward.outputs[{i}]", f"{s.name!r} is not a gradient of an input")


def _check_joint(sig: GraphSignature, w: Where) -> None:
    primals = {s.name for s in sig.inputs}
    for s in sig.outputs:
        if s.role == "gradient" and s.name.removeprefix("grad:") not in primals:
            w.fail("signature.json", f"graphs.joint.outputs.{s.name}", "is not a gradient of an input")


def _check_optimizer(info, signature: Signature, state: set, manifest, w: Where) -> None:

    if "joint" not in signature.graphs or manifest.file(OPTIMIZER_STATE) is None:
        w.fail("metadata.json", "optimizer", f"needs a joint graph and {OPTIMIZER_STATE}")
    if sorted(info.hyperparameters) != sorted(HYPERPARAMETERS[info.name]):
        w.fail("metadata.json", "optimizer.hyperparameters", f"{info.name} takes {', '.join(HYPERPARAMETERS[info.name])}")
    unknown = [p for p in info.parameters if p not in state]
    if unknown:
        w.fail("metadata.json", "optimizer.parameters", f"{unknown[0]!r} is not a parameter the joint graph takes")
    sig = signature.graphs["joint"]
    hyper = [s.target for s in sig.inputs if s.role == "hyperparameter"]
    if hyper != list(HYPERPARAMETERS[info.name]):
        w.fail("signature.json", "graphs.joint.inputs", f"the hyperparameter inputs are {hyper}")
