"""The semantic corpus: eager vs. `aotc.load` of the exported bundle, call by call.

For every program (tests/corpus.py and the ones ported from PyTorch's
test_aotdispatch.py in tests/corpus_upstream.py), eager runs on one fresh copy of model
and inputs and the loaded bundle on another, and tests/checker.py compares everything a
caller can see. A program aotc cannot replay must be refused at export with a named
error: those few are listed in REFUSED with the reason, and the test checks the refusal.
Tolerance: float32 values agree to rtol=1e-5/atol=1e-6 on fx (eager's own kernels).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

import aotc
from aotc._torch_compat import pytree
from aotc.errors import CaptureError
from checker import Observation, compare, compare_grads
from conftest import AOTI_CORPUS, ONNX_CORPUS, backend_fixture
from corpus import all_cases

CASES = all_cases()
BY_NAME = {c.name: c for c in CASES}
BACKENDS = ["fx", pytest.param("aoti", marks=pytest.mark.slow)]
# fx runs eager's kernels: only rounding differs. AOTInductor fuses and reorders float
# math, so its results differ from eager by a few ulps more.
TOL = {"fx": dict(rtol=1e-5, atol=1e-6), "aoti": dict(rtol=1e-4, atol=1e-5), "onnx": dict(rtol=1e-4, atol=1e-5)}

# (case name, mode) -> words the export's CaptureError must contain. Each is a program
# whose eager behaviour aotc cannot replay ahead of time (docs/semantics.md, "What aotc refuses").
_SET_ = "calls set_() on an input"
REFUSED: dict[tuple[str, str], str] = {
    # set_() plus another mutation of the same input: AOTAutograd's functional export
    # (keep_input_mutations=False) cannot return the storage swap as an output
    ("set_input_to_new_tensor", "eval"): _SET_,
    ("set_input_to_new_tensor", "train"): _SET_,
    ("set_input_then_mutate_source", "eval"): _SET_,
    ("set_input_then_mutate_source", "train"): _SET_,
    # forward turns grad on itself: under no_grad eager returns a differentiable output,
    # which an inference graph has no backward for (its train variant passes)
    ("enable_grad_region_with_mutations", "eval"): "requires grad even under no_grad",
}


# case -> words aotc's refusal to export its inference graph to ONNX must contain (the
# whole corpus, as AOTC_FULL_CORPUS=1 runs it; make test runs the compiled_in_ci subset)
_NO_ONNX_OP = "operators without an ONNX translation: aten.as_strided_scatter"
_SHARED = "share memory (as views of one tensor the graph does not return)"
_RANDOM = "draws random numbers"
ONNX_REFUSED: dict[str, str] = {
    # inputs mutated through a synthetic base: the functional graph writes the base with
    # as_strided_scatter, which torch.onnx cannot translate
    **dict.fromkeys([
        "mutate_row_aliasing_other_input", "mutate_row_other_input_is_base", "mutate_one_alias_return_view_of_other",
        "mutate_third_aliasing_first", "mutate_aliased_inputs_none_require_grad", "aliased_pairs_out_of_order",
        "aliased_mutated_and_output_aliases", "data_and_metadata_mutation_aliased_rows",
        "mutate_overlapping_as_strided_views"], _NO_ONNX_OP),
    # outputs that view one intermediate share memory in eager; onnxruntime returns copies
    **dict.fromkeys([
        "two_views_of_one_intermediate", "all_three_alias_types", "intermediate_twice_and_its_view",
        "two_flat_views_of_intermediate", "intermediate_view_and_detached_row", "views_of_two_intermediates_mixed",
        "unbind_intermediate", "unbind_intermediate_and_view", "unbind_intermediate_itself_and_view"], _SHARED),
    # training-mode batch norm: ONNX's BatchNormalization does not update running stats as torch does
    "batch_norm_running_stats_as_inputs": "onnxruntime does not reproduce the inference graph",
    # ops that draw random numbers: onnxruntime would draw other ones
    "dropout_plus_input": f"{_RANDOM} (aten.native_dropout.default)",
    "rand_like_mutation_and_randn": f"{_RANDOM} (aten.rand_like.default, aten.randn.default)",
}


def _onnx_refused(name: str, refusal: str | None) -> bool:
    """True when ONNX export was refused as ONNX_REFUSED expects; fails on any other refusal,
    and on a listed refusal that no longer happens."""
    expected = ONNX_REFUSED.get(name)
    if refusal is None:
        assert expected is None, f"{name} now exports to ONNX, but is listed in ONNX_REFUSED: update the table"
        return False
    assert expected is not None, f"{name}: ONNX export refused, and the refusal is not in ONNX_REFUSED: {refusal}"
    assert expected in refusal, f"{name}: ONNX refused for another reason than listed: {refusal}"
    return True


def _bundle(corpus_bundles, name: str, mode: str) -> Path | None:
    """The case's bundle; None (after checking the refusal) when export refused it."""
    found = corpus_bundles[(name, mode)]
    expected = REFUSED.get((name, mode))
    if isinstance(found, Path):
        assert expected is None, f"{name} ({mode}) exported, but is listed as refused: update REFUSED"
        return found
    assert expected is not None, f"{name} ({mode}) was refused at export: {found}"
    assert isinstance(found, CaptureError) and expected in str(found), str(found)
    return None


def _skip_uncompiled(name: str, backend: str, mode: str) -> None:
    if name not in {"aoti": AOTI_CORPUS[mode], "onnx": ONNX_CORPUS}.get(backend, {name}):
        pytest.skip(f"compiled for {backend} only with AOTC_FULL_CORPUS=1 (seconds per graph)")


def _observe(case, fn, module) -> Observation:
    args, kwargs, leaves = case.make_call()
    return Observation.call(fn, args, kwargs, leaves, module)


@pytest.mark.parametrize("backend", [*BACKENDS, "onnx"])
@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_eval_matches_eager(request, corpus_bundles, name, backend):
    bundle = _bundle(corpus_bundles, name, "eval")
    if bundle is None:
        return
    _skip_uncompiled(name, backend, "eval")
    refusal = backend_fixture(request, backend, bundle)
    if backend == "onnx" and _onnx_refused(name, refusal):
        return
    case = BY_NAME[name]
    loaded = aotc.load(bundle, backend=backend)
    eager = case.build().eval()
    with torch.no_grad():  # inference bundles are for serving
        for call in range(2):  # state (buffers, mutated inputs) carries over as in eager
            expected = _observe(case, eager, eager)
            actual = _observe(case, loaded, loaded)
            compare(actual, expected, f"{name} (call {call})", TOL[backend])
    args, kwargs, _ = case.make_call()
    if not any(t.requires_grad for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)):
        # under grad mode, as serving code that forgets no_grad calls it: outputs have
        # history exactly where eager's do (a backward that refuses, see test_gradients.py)
        expected = _observe(case, eager, eager)
        actual = _observe(case, loaded, loaded)
        compare(actual, expected, f"{name} (under grad mode)", TOL[backend])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", [c.name for c in CASES if c.train])
def test_train_matches_eager(request, corpus_bundles, name, backend):
    bundle = _bundle(corpus_bundles, name, "train")
    if bundle is None:
        return
    _skip_uncompiled(name, backend, "train")
    backend_fixture(request, backend)
    case = BY_NAME[name]
    loaded = aotc.load(bundle, backend=backend, mode="train")
    eager = case.build().train()
    tol = TOL[backend]
    expected = _observe(case, eager, eager)
    actual = _observe(case, loaded, loaded)
    compare(actual, expected, name, tol)
    expected.backward(seed=3)
    actual.backward(seed=3)
    compare_grads(actual, expected, name, tol)
    # A caller may differentiate some of what the call returned: eager leaves .grad None
    # for every leaf those do not reach, and so must the bundle (see compare_grads).
    for which in ("outputs", "first"):
        for module in (eager, loaded):
            module.zero_grad(set_to_none=True)
        expected = _observe(case, eager, eager)
        actual = _observe(case, loaded, loaded)
        if 0 < len(expected.roots(which)) < len(expected.roots()):
            expected.backward(seed=3, which=which)
            actual.backward(seed=3, which=which)
            compare_grads(actual, expected, f"{name} (backward from {which})", tol)


def test_corpus_size():
    families = Counter(c.family for c in CASES if c.family != "aotc")
    assert sum(families.values()) >= 60, families
    for family in ("input_mutation", "output_aliases", "synthetic_base", "requires_grad", "buffer"):
        assert families[family] >= 3, families
    assert len({name for name, _ in REFUSED}) <= 3
