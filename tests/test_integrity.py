"""Damaged and hostile bundles, interrupted and concurrent writes, concurrent calls.

The random corruptions are in test_fuzz.py; here are the cases with exact expectations.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
import torch

import aotc
from aotc.bundle import Bundle
from aotc.errors import BundleError
from conftest import ROOT, SAMPLES, invoke, rehash

def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.fixture
def mlp(sample_bundles, tmp_path) -> Path:
    return _copy(sample_bundles[("mlp", "inference")][0], tmp_path / "b")


# --------------------------------------------------------------- what a bundle may hold


def test_every_file_is_listed_and_hashed(mlp):
    listed = {f.path: f.kind for f in Bundle.open(mlp).manifest.files}
    assert listed["signature.json"] == "signature" and listed["metadata.json"] == "metadata"
    on_disk = {p.relative_to(mlp).as_posix() for p in mlp.rglob("*") if p.is_file()}
    assert on_disk == set(listed) | {"manifest.json"}


def test_an_edited_metadata_file_is_refused(mlp):
    meta = json.loads((mlp / "metadata.json").read_text())
    meta["programs"]["inference"]["inputs"][0]["requires_grad"] = False
    (mlp / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(BundleError, match=r"metadata.json is \d+ bytes, the manifest says|metadata.json has sha256"):
        Bundle.open(mlp)


def test_an_edited_manifest_fails_its_checksum(mlp):
    text = (mlp / "manifest.json").read_text().replace('"training": false', '"training": true ')
    (mlp / "manifest.json").write_text(text)
    with pytest.raises(BundleError, match="manifest.json does not match its checksum"):
        Bundle.open(mlp)


def test_an_unlisted_file_is_refused(mlp):
    (mlp / "graphs" / "extra.pt2").write_bytes(b"not listed")
    with pytest.raises(BundleError, match="'graphs/extra.pt2' is not listed in manifest.json"):
        Bundle.open(mlp)


def test_a_dropped_entry_is_refused_even_rehashed(mlp):
    rehash(mlp, lambda m: m.update(files=[f for f in m["files"] if f["path"] != "metadata.json"]))
    with pytest.raises(BundleError, match="'metadata.json' is not listed as a metadata file"):
        Bundle.open(mlp)


@pytest.mark.parametrize("what", ["file", "folder"])
def test_symlinks_are_refused(mlp, tmp_path, what):
    outside = tmp_path / "outside"
    if what == "file":
        outside.mkdir()
        shutil.copy(mlp / "weights.safetensors", outside / "w")
        (mlp / "weights.safetensors").unlink()
        (mlp / "weights.safetensors").symlink_to(outside / "w")
        name = "weights.safetensors"
    else:
        shutil.move(mlp / "graphs", outside)
        (mlp / "graphs").symlink_to(outside, target_is_directory=True)
        name = "graphs"
    rehash(mlp)  # hashes match through the link: only the link itself is wrong
    with pytest.raises(BundleError, match=f"'{name}' is a symbolic link"):
        Bundle.open(mlp)


@pytest.mark.parametrize("field, value, message", [
    ("outputs.0.base_idx", 7, None),
    ("inputs.0.tensor.dtype", "Tensor", "is not a dtype aotc knows"),
    ("inputs.0.tensor.stride", [-4, 1], "must be non-negative"),
    ("inputs.2.name", "..", "is user_input"),
    ("outputs.0.index", 3, "is not a user output of the graph"),
    ("inputs.0.mutation_type", "MUTATED_OUT_GRAPH", "the graph returns no new value"),
])
def test_rehashed_metadata_is_validated_before_use(sample_bundles, tmp_path, field, value, message):
    path = _copy(sample_bundles[("inplace", "inference")][0], tmp_path / "b")
    meta = json.loads((path / "metadata.json").read_text())
    node = meta["programs"]["inference"]
    *parents, leaf = field.split(".")
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if field == "outputs.0.base_idx":
        node["output_type"] = "alias_of_input"
        message = "7 is not a valid base for alias_of_input"
    node[leaf] = value
    (path / "metadata.json").write_text(json.dumps(meta))
    rehash(path)
    with pytest.raises(BundleError) as e:
        Bundle.open(path)
    assert message in str(e.value) and "metadata.json" in str(e.value)


def test_safetensors_header_claiming_a_huge_length_is_named(mlp):
    data = bytearray((mlp / "weights.safetensors").read_bytes())
    data[:8] = (2**62).to_bytes(8, "little")
    (mlp / "weights.safetensors").write_bytes(bytes(data))
    rehash(mlp)
    bundle = Bundle.open(mlp)  # hashes match: the header is checked where it is read
    with pytest.raises(BundleError, match="its header claims 4611686018427387904 bytes"):
        bundle.weights()
    result = invoke("verify", mlp, "--no-run")
    assert result.exit_code == 1 and "its header claims 4611686018427387904 bytes" in result.stderr


def _rezip(path: Path, edit) -> None:
    with zipfile.ZipFile(path) as src:
        members = [(i.filename, src.read(i.filename)) for i in src.infolist()]
    members = edit(members)
    with zipfile.ZipFile(path, "w") as dst:
        for name, data in members:
            dst.writestr(name, data)


def test_shared_library_inside_a_graph_archive_is_refused(mlp):
    pt2 = mlp / "graphs" / "inference.pt2"
    prefix = zipfile.ZipFile(pt2).namelist()[0].split("/")[0]
    _rezip(pt2, lambda m: m + [(f"{prefix}/data/weights/evil.so", b"\x7fELF")])
    rehash(mlp)
    with pytest.raises(BundleError, match="member 'inference/data/weights/evil.so' is not part of an aotc graph"):
        aotc.load(mlp, backend="fx")


def test_opaque_constants_in_a_graph_archive_are_refused(mlp):
    # torch.export.load unpickles opaque constants with plain pickle: never reach it
    config = json.dumps({"config": {"c": {"path_name": "c", "value_type": "opaque"}}}).encode()
    _rezip(mlp / "graphs" / "inference.pt2",
           lambda m: [(n, config if n.endswith("model_constants_config.json") else d) for n, d in m])
    rehash(mlp)
    with pytest.raises(BundleError, match="lists stored weights or constants"):
        aotc.load(mlp, backend="fx")


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    """An empty $TMPDIR for this test: what a load extracts, and leaves, shows up here."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setenv("TMPDIR", str(path))
    monkeypatch.setattr("tempfile.tempdir", None)
    return path


def test_zip_slip_in_a_compiled_package_writes_nothing(sample_bundles, compiled, tmp_path, scratch):
    path = _copy(sample_bundles[("mlp", "inference")][0], tmp_path / "b")
    package = path / "compiled" / "cpu" / "inference.pt2"
    prefix = zipfile.ZipFile(package).namelist()[0].split("/")[0]
    _rezip(package, lambda m: m + [(f"{prefix}/data/aotinductor/model/../../../../../../escaped.txt", b"x")])
    rehash(path)
    with pytest.raises(BundleError, match="would be written outside the archive"):
        aotc.load(path, backend="aoti")
    assert not list(tmp_path.rglob("escaped.txt"))
    assert list(scratch.iterdir()) == []


def test_a_failed_compiled_load_leaves_no_temp_dirs(sample_bundles, compiled, tmp_path, scratch):
    # A package whose library is not one (CRCs good, hash re-signed): the loader fails
    # after extracting; aotc removes what it extracted.
    path = _copy(sample_bundles[("mlp", "inference")][0], tmp_path / "b")
    package = path / "compiled" / "cpu" / "inference.pt2"
    _rezip(package, lambda m: [(n, b"\x7fELF broken" if n.endswith(".so") else d) for n, d in m])
    rehash(path)
    with pytest.raises(BundleError, match="could not be loaded as an AOTInductor package"):
        aotc.load(path, backend="aoti")
    assert list(scratch.iterdir()) == []


def test_a_loaded_package_removes_its_files_when_collected(sample_bundles, compiled, scratch):
    import gc

    module = aotc.load(sample_bundles[("mlp", "inference")][0], backend="aoti")
    assert module(torch.randn(8, 16)).shape == (8, 4)
    assert len(list(scratch.iterdir())) == 1
    del module
    gc.collect()
    assert list(scratch.iterdir()) == []


# --------------------------------------------------------------- user errors, named


def test_unknown_device_is_a_named_error(sample_bundles):
    result = invoke("run", sample_bundles[("mlp", "inference")][0], "--device", "tpu:x")
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: device 'tpu:x' is not a device name; use cpu, cuda or cuda:N."


def test_unwritable_output_is_refused_before_tracing(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        result = invoke("export", SAMPLES / "mlp.py", "-o", locked / "b")
        assert result.exit_code == 1
        assert result.stderr.strip() == f"Error: cannot write the bundle '{locked / 'b'}': '{locked}' is not a writable directory."
    finally:
        locked.chmod(0o700)


def test_out_of_range_token_ids_name_the_input(tmp_path):
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4))
    aotc.export(model, (torch.tensor([[1, 2, 3]]),), tmp_path / "b")
    module = aotc.load(tmp_path / "b")
    with pytest.raises(aotc.GraphRunError, match=r"Check the values of 'input' \(values 1\.\.12, 1\.\.3 at export\)"):
        module(torch.tensor([[1, 12, 3]]))


# --------------------------------------------------------------- interrupted and concurrent writes


def _staging_dirs(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def _complete(path: Path) -> str:
    """The bundle's creation stamp, after checking it is whole."""
    from aotc.tools.verify import integrity

    bundle = Bundle.open(path)
    integrity(bundle)
    return bundle.manifest.created + bundle.manifest.files[0].sha256


def _cli(args: list[str]) -> None:
    from aotc.cli.main import cli

    cli(args, prog_name="aotc")


@pytest.fixture(scope="module")
def warm_processes():
    """Processes forked from a server that has imported torch and aotc: each run of the
    CLI starts in milliseconds instead of seconds, so 20 kills stay cheap."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "aotc.api", "aotc.compiler", "aotc.cli.main"])
    return ctx


def _timed_run(ctx, args: list[str]) -> float:
    start = time.monotonic()
    proc = ctx.Process(target=_cli, args=(args,))
    proc.start()
    proc.join()
    assert proc.exitcode == 0, f"aotc {' '.join(args)} failed"
    return time.monotonic() - start


def _killed_run(ctx, args: list[str], after: float) -> bool:
    """Run the CLI, SIGKILL it after `after` seconds; whether it finished first."""
    proc = ctx.Process(target=_cli, args=(args,))
    proc.start()
    proc.join(after)
    if proc.exitcode is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        return False
    return proc.exitcode == 0


@pytest.mark.slow
def test_killed_exports_and_compiles_leave_the_old_or_the_new_bundle(tmp_path, warm_processes):
    rng = random.Random(11)
    target = tmp_path / "b"
    export = ["export", str(SAMPLES / "mlp.py"), "-o", str(target), "--force"]
    compile_ = ["compile", str(target)]
    export_time = _timed_run(warm_processes, export)
    compile_time = _timed_run(warm_processes, compile_)
    seen = {_complete(target)}
    finished = 0
    for trial in range(20):
        args, duration = (compile_, compile_time) if trial % 3 == 2 else (export, export_time)
        # a run writes the target only at its end: kill mostly in its second half
        finished += _killed_run(warm_processes, args, rng.uniform(0.3, 1.1) * duration)
        seen.add(_complete(target))  # old or new, and whole, whatever the moment of the kill
    _timed_run(warm_processes, export)
    _complete(target)
    assert _staging_dirs(tmp_path) == []  # the next run removed what killed runs left
    assert len(seen) > 2 and finished < 20  # some kills landed mid-run, some runs replaced the bundle


@pytest.mark.slow
def test_concurrent_exports_to_one_target_end_in_one_complete_bundle(tmp_path, warm_processes):
    target = tmp_path / "b"
    args = ["export", str(SAMPLES / "mlp.py"), "-o", str(target), "--force"]
    procs = [warm_processes.Process(target=_cli, args=(args,)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    _complete(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


@pytest.mark.parametrize("backend", ["fx", "aoti"])
def test_eight_threads_give_the_single_thread_results(sample_bundles, compiled, backend):
    module = aotc.load(sample_bundles[("mlp", "inference")][0], backend=backend)
    inputs = [torch.randn(8, 16, generator=torch.Generator().manual_seed(i)) for i in range(50)]
    with torch.no_grad():
        expected = [module(x) for x in inputs]
    results: dict[int, list] = {}

    def work(k: int) -> None:
        with torch.no_grad():
            results[k] = [module(x) for x in inputs]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(8):
        assert all(torch.equal(a, b) for a, b in zip(results[k], expected)), f"thread {k}"


# --------------------------------------------------------------- the format registry


def test_every_format_has_the_same_members():
    from aotc.exporters import formats

    members = ("FORMAT", "FILE_KIND", "artifact_path", "has_artifacts", "load_graph", "build")
    for name in formats.names():
        module = formats.get(name)
        assert module.FORMAT == name
        assert all(hasattr(module, m) for m in members), name
    with pytest.raises(aotc.AotcError, match="unknown format 'tflite'; aotc has fx, aoti, onnx"):
        formats.get("tflite")


def test_the_library_imports_no_exporter_by_name():
    # exporters are reached through aotc.exporters.formats only; loading an fx bundle imports no other format
    code = (
        "import sys, torch, aotc; m = aotc.load(sys.argv[1], backend='fx'); "
        "assert 'aotc.exporters.onnx' not in sys.modules and 'aotc.exporters.aoti' not in sys.modules, "
        "sorted(k for k in sys.modules if k.startswith('aotc.exporters'))"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        aotc.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), Path(tmp) / "b")
        subprocess.run([sys.executable, "-c", code, str(Path(tmp) / "b")], check=True, cwd=ROOT)
    # nor names one: only the registry (exporters/formats.py) knows them
    naming = sorted(p.relative_to(ROOT).as_posix() for folder in ("aotc", "cli", "exporters")
                    for p in (ROOT / folder).rglob("*.py")
                    if re.search(r"aotc\.exporters\.(fx|aoti|onnx)\b|exporters import (fx|aoti|onnx)\b", p.read_text()))
    assert naming == ["exporters/formats.py"]
