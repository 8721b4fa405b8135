"""Weights folded into compiled code, and folded again when they change.

Inductor's freezing makes CPU inference fast by computing, at compile time, constants
from the weights: BatchNorm folded into the convolution before it, convolution and
linear weights reordered (prepacked) into oneDNN's blocked layouts. A package compiled
so embeds those constants and never sees new weights.

aotc records how freezing computed each constant, as a small program of ATen (and
oneDNN) ops over the graph's weight inputs: a `FoldProgram`. The package is compiled
without its constants (`aot_inductor.package_constants_in_so=False`) and carries the
program as `data/aotc/weight_fold.json`. At run time the program is run on the module's
weights, its results handed to the package (`load_constants`), and run again whenever a
weight is replaced or changed in place (load_state_dict, an optimizer step). The code is
frozen; the weights stay in weights.safetensors and swappable.

The JSON names ops as `namespace::name.overload`, and only torch's own namespaces are
resolved: a bundle never names code to run.
"""

from __future__ import annotations

import json
import math
import operator
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from aotc import _torch_compat as tc
from aotc.errors import BundleError

FOLD_MEMBER = "data/aotc/weight_fold.json"
FOLD_VERSION = 1
# the op namespaces a fold program may name: torch's own kernels, never a custom op
NAMESPACES = ("aten", "prims", "mkldnn", "mkl", "quantized", "onednn")


class FoldError(Exception):
    """Why a graph's freezing could not be recorded as a fold program (compile then
    keeps the weights as graph inputs)."""


def _op_name(target) -> str:
    if target is operator.getitem:
        return "getitem"
    if isinstance(target, tc.OpOverload):
        name = f"{target._schema.name}.{target._overloadname}"
    elif isinstance(target, tc.OpOverloadPacket):
        name = target._qualified_op_name
    else:
        raise FoldError(f"freezing folded a call to {target!r}, which is not an ATen or oneDNN op")
    if name.split("::")[0] not in NAMESPACES:
        raise FoldError(f"freezing folded a call to {name}, outside torch's op namespaces")
    return name


def _resolve_op(name: Any, where: str):
    if name == "getitem":
        return operator.getitem
    if not isinstance(name, str) or "::" not in name:
        raise BundleError(f"{where}: {name!r} does not name an op.")
    namespace, rest = name.split("::", 1)
    if namespace not in NAMESPACES:
        raise BundleError(f"{where}: op {name!r} is outside the namespaces a fold program may use "
                          f"({', '.join(NAMESPACES)}).")
    op_name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), op_name)
        return getattr(packet, overload) if overload else packet
    except (AttributeError, RuntimeError) as e:
        raise BundleError(f"{where}: this torch has no op {name!r}; compile the bundle again with it.") from e


_ENUMS = {"dtype": torch.dtype, "layout": torch.layout, "memory_format": torch.memory_format}


def _encode(value, ref):
    if isinstance(value, torch.fx.Node):
        return ref(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (list, tuple)):
        return [_encode(v, ref) for v in value]
    if isinstance(value, torch.device):
        return {"device": str(value)}
    for tag, kind in _ENUMS.items():
        if isinstance(value, kind):
            return {tag: str(value).removeprefix("torch.")}
    raise FoldError(f"freezing folded a call with an argument aotc cannot record ({type(value).__name__})")


def _decode(value, where: str):
    """A JSON argument as a function of (node values, inputs) -> the argument."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return lambda nodes, inputs: value
    if isinstance(value, list):
        parts = [_decode(v, where) for v in value]
        return lambda nodes, inputs: [p(nodes, inputs) for p in parts]
    if isinstance(value, dict) and len(value) == 1:
        (tag, x), = value.items()
        if tag == "node" and isinstance(x, int):
            return lambda nodes, inputs: nodes[x]
        if tag == "input" and isinstance(x, int):
            return lambda nodes, inputs: inputs[x]
        if tag == "float" and x in ("inf", "-inf", "nan"):
            return lambda nodes, inputs: float(x)
        if tag == "device" and isinstance(x, str):
            device = torch.device(x)
            return lambda nodes, inputs: device
        if tag in _ENUMS and isinstance(getattr(torch, str(x), None), _ENUMS[tag]):
            enum = getattr(torch, x)
            return lambda nodes, inputs: enum
    raise BundleError(f"{where}: argument {value!r} is not one a fold program has.")


@dataclass(frozen=True)
class FoldProgram:
    """`nodes` (op calls in order, each {"op", "args", "kwargs"} whose arguments refer to
    earlier nodes as {"node": i} and to graph inputs as {"input": i}) and `constants`: the
    package's constant names, each a node or an input."""

    nodes: list[dict]
    constants: dict[str, dict]

    def inputs(self) -> list[int]:
        """The graph inputs (weights) the program reads."""
        found: set[int] = set()

        def walk(value):
            if isinstance(value, dict):
                if set(value) == {"input"}:
                    found.add(value["input"])
                for v in value.values():
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)

        walk(self.nodes)
        walk(list(self.constants.values()))
        return sorted(found)

    def to_json(self) -> str:
        return json.dumps({"version": FOLD_VERSION, "nodes": self.nodes, "constants": self.constants})

    @classmethod
    def from_json(cls, data: Any, where: str) -> FoldProgram:
        if not (isinstance(data, dict) and data.get("version") == FOLD_VERSION and isinstance(data.get("nodes"), list)
                and isinstance(data.get("constants"), dict)):
            raise BundleError(f"{where} is not a version {FOLD_VERSION} weight fold program.")
        return cls(data["nodes"], data["constants"])

    def runner(self, where: str):
        """The program as a function of the graph's inputs (indexable by position)
        returning {constant name: tensor}; every op and argument checked first."""
        steps = []
        for i, node in enumerate(self.nodes):
            if not (isinstance(node, dict) and set(node) == {"op", "args", "kwargs"} and isinstance(node["args"], list)
                    and isinstance(node["kwargs"], dict)):
                raise BundleError(f"{where}: node {i} is not {{op, args, kwargs}}.")
            _check_refs(node, i, where)
            kwargs = {str(k): _decode(v, where) for k, v in node["kwargs"].items()}
            steps.append((_resolve_op(node["op"], where), _decode(node["args"], where), kwargs))
        outputs = {}
        for name, ref in self.constants.items():
            _check_refs(ref, len(self.nodes), where)
            outputs[name] = _decode(ref, where)

        def run(inputs) -> dict[str, torch.Tensor]:
            values: list = []
            with torch.no_grad():
                for op, args, kwargs in steps:
                    values.append(op(*args(values, inputs), **{k: v(values, inputs) for k, v in kwargs.items()}))
                return {name: out(values, inputs) for name, out in outputs.items()}

        return run


def _check_refs(value, limit: int, where: str) -> None:
    """Every {"node": i} in `value` names an earlier node."""
    if isinstance(value, dict):
        if set(value) == {"node"} and not (isinstance(value["node"], int) and 0 <= value["node"] < limit):
            raise BundleError(f"{where}: a reference to node {value['node']!r} comes before that node.")
        for v in value.values():
            _check_refs(v, limit, where)
    elif isinstance(value, list):
        for v in value:
            _check_refs(v, limit, where)


class FoldRecorder:
    """Records how inductor's freezing computes each constant (aotc._torch_compat.
    record_constant_folding calls it), over the graph inputs named in `state`
    ({attribute name in the compiled program: graph input index}, with the example
    tensors in `examples`)."""

    def __init__(self, state: dict[str, int], examples: list):
        self._state = state
        self._by_tensor = {id(examples[i]): i for i in state.values()}
        self._by_storage = {(examples[i].data_ptr(), tuple(examples[i].shape), examples[i].dtype): i
                            for i in state.values() if isinstance(examples[i], torch.Tensor)}
        self.nodes: list[dict] = []
        self.refs: dict[str, dict] = {}  # each constant freezing made: a node or an input
        self.values: dict[str, torch.Tensor] = {}  # and the value freezing computed for it
        self.problem: str | None = None

    def __call__(self, gm, node, constant, name, qualname) -> None:
        if self.problem:
            return
        try:
            if constant is None:
                raise FoldError(f"freezing lifted {node.name} without a value")
            self.refs[qualname] = self._input(constant) if node.op == "placeholder" else self._record(node)
            self.values[qualname] = constant
        except FoldError as e:
            self.problem = str(e)

    def _input(self, tensor: torch.Tensor) -> dict:
        i = self._by_tensor.get(id(tensor))
        if i is None:
            i = self._by_storage.get((tensor.data_ptr(), tuple(tensor.shape), tensor.dtype))
        if i is None:
            raise FoldError("freezing folded a tensor that is not one of the graph's weights")
        return {"input": i}

    def _record(self, node) -> dict:
        done: dict = {}

        def ref(n) -> dict:
            if n in done:
                return done[n]
            if n.op == "get_attr":
                if n.target in self.refs:
                    done[n] = self.refs[n.target]
                elif n.target in self._state:
                    done[n] = {"input": self._state[n.target]}
                else:
                    raise FoldError(f"freezing folded constant {n.target!r}, which is not from the weights")
            elif n.op == "call_function":
                op = _op_name(n.target)
                args, kwargs = _encode(list(n.args), ref), {k: _encode(v, ref) for k, v in n.kwargs.items()}
                self.nodes.append({"op": op, "args": args, "kwargs": kwargs})
                done[n] = {"node": len(self.nodes) - 1}
            else:
                raise FoldError(f"freezing folded a {n.op} node ({n.name})")
            return done[n]

        return ref(node)

    def program(self, constant_names: list[str]) -> FoldProgram:
        """The program computing each of the package's constants (`constant_names`), with
        the nodes no constant needs left out."""
        if self.problem:
            raise FoldError(self.problem)
        constants = {}
        for name in constant_names:
            if name in self.refs:
                constants[name] = self.refs[name]
            elif name in self._state:
                constants[name] = {"input": self._state[name]}
            else:
                raise FoldError(f"the compiled graph has a constant {name!r} that is not computed from its weights")
        return _pruned(self.nodes, constants)

    def check(self, program: FoldProgram, examples: list) -> None:
        """The program, run on the example weights, gives exactly the constants freezing
        computed: the evidence that the record is whole."""
        results = program.runner("the recorded fold program")(examples)
        for name, value in results.items():
            want = self.values.get(name)
            if want is None:
                continue
            if not _same(value, want):
                raise FoldError(f"the recorded fold program computes {name!r} unlike freezing did")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.layout != b.layout or a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.layout == tc.MKLDNN_LAYOUT:
        a, b = a.to_dense(), b.to_dense()
    return torch.equal(a, b)


def _pruned(nodes: list[dict], constants: dict[str, dict]) -> FoldProgram:
    needed: set[int] = set()

    def mark(value):
        if isinstance(value, dict):
            if set(value) == {"node"} and value["node"] not in needed:
                needed.add(value["node"])
                mark(nodes[value["node"]])
            else:
                for v in value.values():
                    mark(v)
        elif isinstance(value, list):
            for v in value:
                mark(v)

    for ref in constants.values():
        mark(ref)
    order = sorted(needed)
    index = {old: new for new, old in enumerate(order)}

    def renumber(value):
        if isinstance(value, dict):
            if set(value) == {"node"}:
                return {"node": index[value["node"]]}
            return {k: renumber(v) for k, v in value.items()}
        if isinstance(value, list):
            return [renumber(v) for v in value]
        return value

    return FoldProgram([renumber(nodes[i]) for i in order], {k: renumber(v) for k, v in constants.items()})


def write_into(package: Path, program: FoldProgram) -> None:
    """Add the program to an AOTInductor package, beside the files AOTInductor wrote."""
    with zipfile.ZipFile(package, "a") as archive:
        prefix = archive.namelist()[0].split("/", 1)[0]
        archive.writestr(f"{prefix}/{FOLD_MEMBER}", program.to_json())


def read_from(package: Path, read_json) -> FoldProgram | None:
    """The fold program in a package, or None if it has none."""
    with zipfile.ZipFile(package) as archive:
        member = next((n for n in archive.namelist() if n.split("/", 1)[-1] == FOLD_MEMBER), None)
        if member is None:
            return None
        data = archive.read(member)
    where = f"'{package}' ({FOLD_MEMBER})"
    return FoldProgram.from_json(read_json(data, where), where)


class FoldedWeights:
    """Keeps a package's folded constants in step with the weights it is called with:
    the program runs again when a weight it reads is another tensor or was changed in
    place (its version counter moved). The tensors handed to the package are kept alive
    here (it is told they are user-managed: a prepacked MKL weight cannot be moved)."""

    def __init__(self, program: FoldProgram, loader, where: str):
        self._run = program.runner(where)
        self._reads = program.inputs()
        self._loader = loader
        self._seen: list | None = None
        self._constants: dict | None = None

    def sync(self, args) -> None:
        seen = self._seen
        if seen is not None and all(args[i] is t and t._version == v for i, t, v in seen):
            return
        constants = self._run(args)
        # (map, use_inactive, check_full_update, user_managed): torch 2.11 and 2.12 take no
        # fifth argument (allow_h2d_copy, False by default from 2.13 on)
        self._loader.load_constants(constants, False, True, True)
        self._constants = constants
        self._seen = [(i, args[i], args[i]._version) for i in self._reads]
