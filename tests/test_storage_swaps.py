"""Storage swaps of an input: `set_()`, and from torch 2.14 on `aten.shallow_copy_data_` (how
torch traces a `.data` assignment), which AOTAutograd's InputAliasInfo marks with
`mutation_is_shallow_copy_data` and replays with that op instead of `set_`.

aotc's functional capture cannot return a swap (AOTAutograd refuses it with
keep_input_mutations=False), so capture refuses either by name. A bundle whose metadata
records a swap anyway is replayed as AOTAutograd would, with the op its flag names, and
refused by name under a torch that lacks that op; the C++ runtime refuses it.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from torch import nn

import aotc
from aotc import _torch_compat as tc
from aotc.errors import BundleError, CaptureError
from conftest import invoke, rehash

SINCE = (2, 14)  # the torch that added aten.shallow_copy_data_ and the flag


def _torch() -> tuple[int, int]:
    return tuple(int(p) for p in tc.torch_minor(torch.__version__).split("."))


class SetsStorage(nn.Module):
    def forward(self, a, x):
        with torch.no_grad():
            a.set_(x * 2)
        return x + 1


class ShallowCopiesData(nn.Module):
    def forward(self, a, x):
        torch.ops.aten.shallow_copy_data_(a, x * 2)
        return x + 1


def test_the_op_and_the_flag_come_with_torch_2_14():
    assert tc.has_shallow_copy_data() == (_torch() >= SINCE)
    from torch._functorch._aot_autograd.schemas import InputAliasInfo

    assert ("mutation_is_shallow_copy_data" in InputAliasInfo.__dataclass_fields__) == (_torch() >= SINCE)


@pytest.mark.parametrize("model, words", [
    (SetsStorage, "SetsStorage.forward calls set_() on an input, giving it another tensor's storage"),
    (ShallowCopiesData, "ShallowCopiesData.forward calls aten.shallow_copy_data_ (a .data assignment) on an input, "
                        "giving it another tensor's storage"),
])
@pytest.mark.parametrize("graphs", [("inference",), ("forward", "backward")])
def test_capture_refuses_a_storage_swap_by_name(tmp_path, model, words, graphs):
    if model is ShallowCopiesData and not tc.has_shallow_copy_data():
        with pytest.raises(AttributeError):  # a torch before 2.14: no such op to call
            model()(torch.ones(3), torch.ones(3))
        return
    x = torch.ones(3, requires_grad=graphs != ("inference",))
    with pytest.raises(CaptureError) as e:
        aotc.export(model(), (torch.zeros(3), x), tmp_path / "b", graphs=graphs)
    assert words in str(e.value)


class TransposesAndScales(nn.Module):
    def forward(self, a):
        a.t_()
        a.mul_(2)
        return a + 1


@pytest.fixture(scope="module")
def swap_bundle(tmp_path_factory):
    """An inference bundle whose input changes data and layout: its new value is a fresh
    tensor the graph returns, which a storage swap would hand to the input."""
    path = tmp_path_factory.mktemp("swap") / "b"
    aotc.export(TransposesAndScales(), (torch.randn(2, 3),), path)
    return path


def _as_swap(src, dst, shallow: bool):
    shutil.copytree(src, dst)
    meta = json.loads((dst / "metadata.json").read_text())
    for program in meta["programs"].values():
        for i in program["inputs"]:
            if i["mutation_type"] == "MUTATED_OUT_GRAPH":
                i.update(mutates_storage_metadata=True, mutation_is_shallow_copy_data=shallow)
    (dst / "metadata.json").write_text(json.dumps(meta))
    rehash(dst)
    return dst


@pytest.mark.parametrize("shallow", [False, True], ids=["set_", "shallow_copy_data_"])
def test_a_recorded_storage_swap_is_replayed_with_its_op(swap_bundle, tmp_path, shallow):
    path = _as_swap(swap_bundle, tmp_path / "b", shallow)
    if shallow and not tc.has_shallow_copy_data():
        with pytest.raises(BundleError) as e:
            aotc.load(path, backend="fx")
        assert (f"input 'a' of this bundle has its storage swapped by a .data assignment (aten.shallow_copy_data_, "
                f"traced by torch 2.14 and later), which torch {torch.__version__} cannot replay") in str(e.value)
        return
    loaded = aotc.load(path, backend="fx")
    a = torch.randn(2, 3)
    want = a.t() * 2
    before = a._version
    with torch.no_grad():
        loaded(a)
    assert torch.equal(a, want) and a.stride() == want.stride()
    # set_ counts as a write to the input; shallow_copy_data_ (a .data assignment) does not,
    # and neither leaves the as_strided_ and copy_ of an ordinary mutation's replay
    assert (a._version == before) == shallow
    out = json.loads(invoke("inspect", path, "--json").stdout)
    assert out["cpp"]["inference"]["refused"] == "an input whose storage the graph swaps (set_ or a .data assignment)"
