"""aotc across torch versions: the tested range, the refusal of any other torch, and
bundles that cross an upgrade (exported under one torch, loaded under another).

The cross-version tests need a second Python whose torch is another tested version, with
aotc installed: `make test-torch TORCH=2.14.1` runs this file under torch 2.14.1 with
AOTC_OTHER_PYTHON set to .venv's Python (torch 2.13), so both directions run: the other
torch exports and this one loads, and the other way round. Without it they skip, saying so.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import torch

import aotc
from aotc import _torch_compat as tc
from aotc.errors import BundleError, UnsupportedTorchError
from conftest import MODE_FLAGS, ROOT, SAMPLE_NAMES, SAMPLES, invoke, rehash

OTHER = os.environ.get("AOTC_OTHER_PYTHON")
needs_other = pytest.mark.skipif(not OTHER, reason="needs a second torch: make test-torch TORCH=2.15.0 sets "
                                                   "AOTC_OTHER_PYTHON")


def test_torch_minor_of_release_local_and_nightly_versions():
    assert tc.torch_minor("2.14.1") == "2.14"
    assert tc.torch_minor("2.13.0+cpu") == "2.13"
    assert tc.torch_minor("2.15.0.dev20260101+cu130") == "2.15"


def test_this_torch_is_tested_and_pyproject_requires_the_tested_range():
    assert tc.torch_minor(torch.__version__) in tc.TESTED_TORCH
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    first, last = tc.TESTED_TORCH[0], tc.TESTED_TORCH[-1]
    upper = f"{last.split('.')[0]}.{int(last.split('.')[1]) + 1}"
    assert f"torch>={first},<{upper}" in deps


MODEL_LIBRARIES = ("transformers", "diffusers", "peft", "torchao")


def test_the_model_libraries_are_ranges_and_the_installed_releases_are_in_them():
    """pyproject.toml gives each model library a range of tested releases, never one exact
    version (which would make pip replace a user's), and the installed one is in it: the
    newest in make test's venv; under make test-torch LIBS=oldest (AOTC_LIBS), the lowest,
    installed before aotc's extras, which kept it."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    specs = {r.name: r.specifier for r in (Requirement(d) for k in ("hf", "models", "quant") for d in extras[k])}
    assert set(specs) == set(MODEL_LIBRARIES)
    for name, spec in specs.items():
        assert sorted(s.operator for s in spec) == ["<", ">="], f"{name}: {spec}"
        installed = importlib.metadata.version(name)
        assert spec.contains(installed), f"{name} {installed} is outside {spec}"
        lowest = Version(next(s.version for s in spec if s.operator == ">="))
        if os.environ.get("AOTC_LIBS") == "oldest":
            assert Version(installed).release[:2] == lowest.release[:2], f"{name} {installed}, not the lowest {lowest}"


def test_an_untested_torch_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    monkeypatch.delenv("AOTC_UNTESTED_TORCH", raising=False)
    with pytest.raises(UnsupportedTorchError) as e:
        tc._check_tested()
    assert str(e.value) == (
        "aotc is tested with torch 2.11 to 2.15; this is torch 2.99.0, whose private APIs (AOTAutograd, "
        "torch.export, inductor) aotc has not been checked against. Install a tested torch (pip install "
        "'torch>=2.11,<2.16'), or set AOTC_UNTESTED_TORCH=1 to try this one."
    )
    monkeypatch.setenv("AOTC_UNTESTED_TORCH", "1")
    with pytest.warns(UserWarning, match=r"this is torch 2.99.0.*Going on: AOTC_UNTESTED_TORCH=1 is set"):
        tc._check_tested()


def test_the_cli_under_an_untested_torch_exits_1_with_the_tested_versions(tmp_path):
    code = ("import sys, torch; torch.__version__ = '2.99.0'; sys.argv = ['aotc'] + sys.argv[1:]; "
            "from aotc.cli.main import main; main()")
    env = {k: v for k, v in os.environ.items() if k != "AOTC_UNTESTED_TORCH"}
    proc = subprocess.run([sys.executable, "-c", code, "export", str(SAMPLES / "mlp.py"), "-o", str(tmp_path / "b")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "aotc is tested with torch 2.11 to 2.15; this is torch 2.99.0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_export_records_torch_exports_format(sample_bundles):
    manifest = json.loads((sample_bundles[("mlp", "inference")][0] / "manifest.json").read_text())
    assert manifest["export_schema"] == list(tc.export_schema_version())
    assert manifest["torch_version"] == torch.__version__


def test_graphs_in_another_export_format_are_refused_by_name(sample_bundles, tmp_path):
    dst = tmp_path / "b"
    shutil.copytree(sample_bundles[("mlp", "inference")][0], dst)
    rehash(dst, lambda m: m.update(export_schema=[99, 0], torch_version="2.99.0"))
    with pytest.raises(BundleError) as e:
        aotc.load(dst, backend="fx")
    assert str(e.value) == (
        f"Bundle '{dst}': its graphs were saved by torch 2.99.0 in torch.export's format 99.0; this torch "
        f"{torch.__version__} reads format {tc.export_schema_version()[0]}.x. Export the model again under this "
        "torch (aotc export), or load the bundle under torch 2.99.0."
    )


def test_a_format_2_bundle_without_the_export_format_loads(sample_bundles, tmp_path):
    dst = tmp_path / "b"
    shutil.copytree(sample_bundles[("mlp", "inference")][0], dst)
    rehash(dst, lambda m: (m.pop("export_schema"), m.update(format_version=2)))
    assert aotc.load(dst, backend="fx").backend == "fx"
    rehash(dst, lambda m: m.update(format_version=1))
    with pytest.raises(BundleError, match=r"has format_version 1: it predates hashing every file of a bundle, and "
                                          r"this aotc reads versions 2 to 4"):
        aotc.load(dst, backend="fx")


def test_inspect_says_which_torch_built_each_compiled_file(sample_bundles, tmp_path):
    path = tmp_path / "mlp"
    shutil.copytree(sample_bundles[("mlp", "inference")][0], path, ignore=shutil.ignore_patterns("compiled"))
    rehash(path, lambda m: m.update(files=[f for f in m["files"] if f["kind"] != "compiled"]))
    assert invoke("compile", path).exit_code == 0
    out = " ".join(invoke("inspect", path).stderr.split())
    assert f"torch {torch.__version__}" in out and f"(torch.export format {'.'.join(map(str, tc.export_schema_version()))})" in out
    assert re.search(rf"compiled/cpu/inference.pt2: built by torch {re.escape(torch.__version__)} for cpu", out)
    assert "which refuses it" not in out

    dst = tmp_path / "b"
    shutil.copytree(path, dst)

    def older(m):
        for f in m["files"]:
            if f["kind"] == "compiled":
                f["build"]["torch"] = "2.12.0"

    rehash(dst, older)
    out = " ".join(invoke("inspect", dst).stderr.split())
    assert (f"compiled/cpu/inference.pt2: built by torch 2.12.0 for cpu" in out
            and f"this is torch {torch.__version__}, which refuses it: aotc compile BUNDLE rebuilds it" in out)


# ------------------------------------------------------------------ across two torches


@needs_other
@pytest.mark.parametrize("name", SAMPLE_NAMES)
@pytest.mark.parametrize("mode", list(MODE_FLAGS))
def test_every_sample_in_every_graph_kind_compiles_and_verifies(sample_bundles, tmp_path, name, mode):
    """The compatibility subset's core (make test-torch): make test compiles a few of these
    bundles; under a second torch, every one is compiled and verified against eager."""
    path = tmp_path / f"{name}-{mode}"
    shutil.copytree(sample_bundles[(name, mode)][0], path)
    result = invoke("compile", path)
    assert result.exit_code == 0, result.stderr
    result = invoke("verify", path, "--model", SAMPLES / f"{name}.py", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert {c["artifact"] for c in json.loads(result.stdout)["checks"]} >= {"fx", "aoti/cpu"}



def _other(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([OTHER, "-m", "aotc", *map(str, args)], capture_output=True, text=True, timeout=900)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _other_torch() -> str:
    return subprocess.run([OTHER, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                          check=True).stdout.strip()


@needs_other
@pytest.mark.parametrize("mode", ["inference", "autograd", "joint"])
def test_a_bundle_exported_under_the_other_torch_runs_here(tmp_path, mode):
    """Its compiled package is refused with the command that rebuilds it; that command
    works, and then the graphs and the new package give the other torch's eager results
    (the bundle's references) and this torch's eager results on random inputs."""
    other = _other_torch()
    assert tc.torch_minor(other) != tc.torch_minor(torch.__version__)
    path = tmp_path / f"mlp-{mode}"
    flags = {"inference": [], "autograd": ["--autograd"], "joint": ["--joint"]}[mode]
    _other("export", SAMPLES / "mlp.py", *flags, "-o", path)
    _other("compile", path)
    assert json.loads((path / "manifest.json").read_text())["torch_version"] == other

    refused = invoke("verify", path)
    assert refused.exit_code == 1
    assert (f"was built for torch {other}, this is torch {torch.__version__}. Compile the bundle again "
            "(aotc compile BUNDLE), or use backend='fx'." in " ".join(refused.stderr.split()))

    assert invoke("compile", path).exit_code == 0
    result = invoke("verify", path, "--model", SAMPLES / "mlp.py", "--json")
    assert result.exit_code == 0, result.stdout
    assert {c["artifact"] for c in json.loads(result.stdout)["checks"]} >= {"fx", "aoti/cpu"}
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["torch_version"] == other  # the graphs are still the ones the other torch saved
    assert {f["build"]["torch"] for f in manifest["files"] if f["kind"] == "compiled"} == {torch.__version__}


@needs_other
def test_a_bundle_exported_here_runs_under_the_other_torch(tmp_path):
    other = _other_torch()
    path = tmp_path / "tiny_transformer-autograd"
    assert invoke("export", SAMPLES / "tiny_transformer.py", "--autograd", "-o", path).exit_code == 0
    assert invoke("compile", path).exit_code == 0
    refused = _other("verify", path, check=False)
    assert refused.returncode == 1
    assert (f"was built for torch {torch.__version__}, this is torch {other}. Compile the bundle again"
            in " ".join(refused.stderr.split()))
    _other("compile", path)
    _other("verify", path, "--model", SAMPLES / "tiny_transformer.py")
