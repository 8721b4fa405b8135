"""Bundle writing and reading: round trip, golden files, atomicity, safe loading."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import aotc
from aotc.bundle import Bundle, load_exported_program
from aotc.capture import CaptureOptions, capture
from aotc.errors import BundleError
from aotc.bundle.regions_schema import RegionsManifest
from aotc.bundle.schema import Manifest, Metadata, Signature, json_schema, to_json
from conftest import ROOT, fresh_sample

GOLDEN = Path(__file__).parent / "golden"


def check_golden(name: str, data) -> None:
    """Compare with the checked-in tests/golden/<name>. Only `python tests/golden.py`
    writes those files, for a person to review the diff; this test never does."""
    path = GOLDEN / name
    assert path.exists(), f"{path} missing; run python tests/golden.py and review what it writes"
    expected = json.loads(path.read_text())
    assert expected == json.loads(json.dumps(data)), f"{name} changed; run python tests/golden.py and review the diff"


def test_round_trip_every_field(tmp_path):
    spec = fresh_sample("inplace")
    captured = capture(spec.module, spec.args, {}, options=CaptureOptions(mode="autograd"))
    spec = fresh_sample("inplace")
    bundle = aotc.export(spec.module, spec.args, tmp_path / "b", graphs=("forward", "backward"))

    assert bundle.metadata.programs == captured.programs
    assert bundle.metadata.user_inputs == captured.user_input_meta
    assert bundle.signature.graphs == {k: g.signature for k, g in captured.graphs.items()}
    assert bundle.signature.user_inputs == captured.user_inputs
    for name, cls in [("manifest.json", Manifest), ("signature.json", Signature), ("metadata.json", Metadata)]:
        on_disk = json.loads((tmp_path / "b" / name).read_text())
        opened = {"manifest.json": bundle.manifest, "signature.json": bundle.signature, "metadata.json": bundle.metadata}[name]
        assert to_json(opened) == on_disk
    weights = bundle.weights()
    assert weights.keys() == spec.module.state_dict().keys()
    for k, v in spec.module.state_dict().items():
        torch.testing.assert_close(weights[k], v, rtol=0, atol=0)
    listed = {f.path for f in bundle.manifest.files}
    on_disk = {str(p.relative_to(tmp_path / "b")) for p in (tmp_path / "b").rglob("*") if p.is_file()}
    assert on_disk - listed == {"manifest.json"}  # every other file is hashed


def test_json_schemas_golden():
    for cls in (Manifest, Signature, Metadata, RegionsManifest):
        check_golden(f"schema/{cls.__name__.lower()}.schema.json", json_schema(cls))


def test_small_bundle_golden(tmp_path):
    spec = fresh_sample("inplace")
    aotc.export(spec.module, spec.args, tmp_path / "b", graphs=("forward", "backward"))
    for name in ("signature.json", "metadata.json"):
        check_golden(f"inplace-autograd/{name}", json.loads((tmp_path / "b" / name).read_text()))


def test_subclass_bundle_golden(tmp_path):
    from golden import pair_program

    aotc.export(*pair_program(), tmp_path / "b", graphs=("forward", "backward"))
    for name in ("signature.json", "metadata.json"):
        check_golden(f"pair-autograd/{name}", json.loads((tmp_path / "b" / name).read_text()))


def test_failed_write_keeps_old_bundle(tmp_path, monkeypatch):
    model = torch.nn.Linear(4, 2)
    out = tmp_path / "b"
    aotc.export(model, (torch.randn(3, 4),), out)
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    from aotc.exporters import fx

    def explode(*args, **kwargs):
        raise KeyboardInterrupt  # as if the user pressed Ctrl-C mid-write

    monkeypatch.setattr(fx, "write", explode)
    with pytest.raises(KeyboardInterrupt):
        aotc.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),), out, force=True)
    after = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]  # no temp dir left behind


def test_refuses_to_replace_a_non_bundle(tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(BundleError, match="is not an aotc bundle; refusing to replace it"):
        aotc.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),), out, force=True)
    assert (out / "notes.txt").read_text() == "keep me"


def test_loading_a_graph_never_unpickles(tmp_path):
    # An aotc graph archive whose sample inputs pickle a call to os.getcwd: torch.export.load
    # unpickles that member (falling back to weights_only=False); aotc refuses the archive.
    import io
    import zipfile

    bundle = aotc.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),), tmp_path / "b")
    good = bundle.graph_path("inference")
    payload = io.BytesIO()
    torch.save((os.getcwd,), payload)
    evil = tmp_path / "evil.pt2"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(evil, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            dst.writestr(item, payload.getvalue() if item.filename.endswith("sample_inputs/model.pt") else data)
    assert load_exported_program(good) is not None
    with pytest.raises(BundleError, match="holds pickled example inputs"):
        load_exported_program(evil)


def test_opening_runs_nothing(tmp_path, monkeypatch):
    aotc.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),), tmp_path / "b")

    def forbidden(*args, **kwargs):
        raise AssertionError("Bundle.open must not load graphs or weights")

    monkeypatch.setattr(torch.export, "load", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    bundle = Bundle.open(tmp_path / "b")
    assert bundle.graph_kinds == ["inference"]


def test_cli_import_is_light_and_python_m_works():
    code = "import sys, aotc.cli.main; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    result = subprocess.run([sys.executable, "-m", "aotc", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0 and "export" in result.stdout and "inspect" in result.stdout


def test_library_accepts_a_plain_function(tmp_path):
    def fn(x, y):
        return x * y + 1

    bundle = aotc.export(fn, (torch.randn(3), torch.randn(3)), tmp_path / "f")
    assert [u.name for u in bundle.signature.user_inputs] == ["x", "y"]
    a, b = torch.randn(3), torch.randn(3)
    (out,) = bundle.load_program("inference").module()(a, b)
    torch.testing.assert_close(out, fn(a, b))


class _Polar(torch.nn.Module):
    """Lumina2's rotary frequencies: complex128 from float64 angles (torch.polar)."""

    def __init__(self, keep: str = "inside"):
        super().__init__()
        self.keep = keep
        angles = torch.arange(3.0, dtype=torch.float64)
        self.register_buffer("freqs", torch.polar(torch.ones_like(angles), angles) if keep == "buffer" else angles)

    def forward(self, x):
        freqs = self.freqs if self.keep == "buffer" else torch.polar(torch.ones_like(self.freqs), self.freqs)
        rotated = freqs * x
        return rotated if self.keep == "output" else torch.view_as_real(rotated).sum(-1)


def test_complex128_inside_the_graph_is_taken_and_stored_is_refused_by_name(tmp_path):
    """safetensors has no complex128: a model computing with it exports; one whose buffer or
    output is complex128 is refused by name before a file is written (it was a KeyError from
    safetensors: Lumina2's transformer blocks as regions in the sweep)."""
    x = torch.rand(3, dtype=torch.float64)
    aotc.export(_Polar(), (x,), tmp_path / "inside")
    torch.testing.assert_close(aotc.load(tmp_path / "inside")(x), _Polar()(x), rtol=0, atol=0)
    for keep, name in [("buffer", "'buffer:freqs' (complex128)"), ("output", "'output[0]' (complex128)")]:
        with pytest.raises(aotc.CaptureError, match=rf"{re.escape(name)} cannot be stored: .*no complex128"):
            aotc.export(_Polar(keep), (x,), tmp_path / keep)
        assert not (tmp_path / keep).exists()


def test_tensor_subclass_is_refused(tmp_path):
    class Sub(torch.Tensor):
        pass

    x = torch.randn(3).as_subclass(Sub)
    with pytest.raises(aotc.CaptureError, match="'t' is a Sub, which aotc cannot store: .*not a traceable wrapper"):
        aotc.export(lambda t: t + 1, (x,), tmp_path / "s")
    jagged = torch.nested.nested_tensor_from_jagged(torch.randn(5, 2), torch.tensor([0, 2, 5]))
    with pytest.raises(aotc.CaptureError, match="nested tensor holds rows of different lengths"):
        aotc.export(lambda t: t + 1, (jagged,), tmp_path / "n")
