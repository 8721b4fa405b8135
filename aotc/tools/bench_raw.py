"""`aotc bench`'s raw runner: the compiled packages called bare on flat tensors gathered
once, with no aotc code per call, the floor the wrapper stack is measured against.

Inference calls the package (a frozen or folded one on the user inputs alone, a folded
one after its weights are folded once); a joint bundle's step
is the package plus a foreach SGD update, or for a bundle that carries its optimizer, the
package and a foreach copy of the new parameters and state (none where the package
writes them in place); a forward+backward bundle's,
both packages and a foreach SGD update (no buffer updates, no loss function).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile

import torch

from aotc._torch_compat import aoti_package_loader, pytree
from aotc.bundle.files import Bundle
from aotc.bundle.signing import require_signature
from aotc.exporters import aoti_updates, formats
from aotc.exporters.graph_inputs import example_graph_inputs
from aotc.runtime.autograd_fn import TrainingGraphs
from aotc.tools.verify import _golden, _golden_inputs

RAW = "aoti raw runner"  # the variant's name in bench's tables


def raw_kind(bundle, train: bool) -> str:
    """The graph the raw runner times: inference where there is one or nothing is trained,
    else the joint step, else forward and backward ("forward")."""
    kinds = bundle.graph_kinds
    if not train or "inference" in kinds:
        return "inference" if "inference" in kinds else kinds[0]
    return "joint" if "joint" in kinds else "forward"


def _on_golden_inputs(bundle, kind: str, device) -> list:
    """The graph's flat inputs (example_graph_inputs), its user inputs the bundle's golden
    ones, which every other variant runs on (example_graph_inputs makes random ones)."""
    flat = example_graph_inputs(bundle, kind, device)
    golden = [t.to(device) if isinstance(t, torch.Tensor) else t
              for t in pytree.tree_leaves(_golden_inputs(bundle, _golden(bundle)))]
    return [golden[s.index] if s.role == "user_input" else v for s, v in zip(bundle.signature.graphs[kind].inputs, flat)]


def raw_step(spec: dict, device):
    """The compiled packages called bare on flat tensors gathered once; returns step(),
    which returns the graph's flat outputs (nothing for forward+backward)."""

    require_signature(spec["bundle"], spec["public_keys"])  # the packages are native code: as aotc.load would
    bundle = Bundle.open(spec["bundle"], verify_hashes=False)
    workdir = tempfile.mkdtemp(prefix="aotc-bench-")
    atexit.register(shutil.rmtree, workdir, True)  # the packages run until the child exits
    index = device.index if device.index is not None else -1

    def loader(kind: str):
        path = bundle.path / formats.get("aoti").artifact_path(kind, device.type)
        return aoti_package_loader(str(path), index, workdir)

    def runner(kind: str):
        run = loader(kind).run
        build = bundle.manifest.file(formats.get("aoti").artifact_path(kind, device.type)).build or {}
        if build.get("updates") != aoti_updates.IN_PLACE:
            return run
        updates = aoti_updates.plan(bundle, kind)  # the package writes new values into its inputs
        return lambda flat: updates.outputs(flat, run(flat))

    kinds, kind = bundle.graph_kinds, raw_kind(bundle, spec["train"])
    if not spec["train"] or "inference" in kinds:
        package, flat = loader(kind), _on_golden_inputs(bundle, kind, device)
        run = package.run
        aoti = formats.get("aoti")
        build = bundle.manifest.file(aoti.artifact_path(kind, device.type)).build or {}
        folded = None  # kept alive while the package uses its tensors
        if build.get("weights") == "folded":  # the weights folded once, as aotc does at load
            folded = aoti.folded_weights(bundle.path / aoti.artifact_path(kind, device.type), package)
            folded.sync(flat)
        if build.get("frozen") == "true" or build.get("weights") == "folded":  # user inputs only
            flat = [v for s, v in zip(bundle.signature.graphs[kind].inputs, flat)
                    if s.role not in ("parameter", "buffer", "constant")]

        def infer(_folded=folded):
            with torch.no_grad():  # as every other variant's inference step: the same harness cost
                return run(flat)

        return infer
    sig = bundle.signature.graphs
    lr = 1e-3
    if "joint" in kinds:
        run, flat = runner("joint"), _on_golden_inputs(bundle, "joint", device)
        names = [s.name for s in sig["joint"].inputs]
        grads = [i for i, s in enumerate(sig["joint"].outputs) if s.role == "gradient"]
        params = [flat[names.index(sig["joint"].outputs[i].name.removeprefix("grad:"))] for i in grads]

        if bundle.metadata.optimizer is not None:  # the graph updates: copy its new values in
            outputs = sig["joint"].outputs
            where = {(s.role, s.target): i for i, s in enumerate(sig["joint"].inputs)}
            new = [(i, where["parameter" if s.role == "updated_parameter" else s.role, s.target])
                   for i, s in enumerate(outputs) if s.role in ("updated_parameter", "optimizer_state")]

            def fused_step():
                outs = run(flat)
                pairs = [(flat[j], outs[i]) for i, j in new if outs[i] is not flat[j]]
                if pairs:
                    torch._foreach_copy_([t for t, _ in pairs], [v for _, v in pairs])
                return outs

            return fused_step

        def joint_step():
            outs = run(flat)
            torch._foreach_add_(params, [outs[i] for i in grads], alpha=-lr)
            return outs

        return joint_step

    graphs = TrainingGraphs.build(None, None, sig["forward"], sig["backward"])
    forward, backward = runner("forward"), runner("backward")
    flat = _on_golden_inputs(bundle, "forward", device)
    outs = forward(flat)
    ones = [torch.ones_like(outs[p]) for p in graphs.tangent_outputs]
    roles = [s.role for s in sig["forward"].inputs]
    updates = [(k, t) for k, t in enumerate(graphs.grad_targets) if roles[t] == "parameter"]
    params = [flat[t] for _, t in updates]

    def train_step():
        outs = forward(flat)
        saved = outs[graphs.num_visible:]
        grads = backward([saved[i] if kind == "saved" else ones[i] for kind, i in graphs.backward_inputs])
        torch._foreach_add_(params, [grads[k] for k, _ in updates], alpha=-lr)

    return train_step
