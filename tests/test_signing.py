"""Signed bundles (aotc sign, model-signing's format): a bundle signed by a configured key
loads; with keys configured, every edit an attacker can make, re-hashing the manifest as
they would, is refused with SignatureError before anything is loaded, and a planted shared
library never runs. Without keys, loading compiled code says what it is trusted on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

import aotc
from aotc.errors import BundleError, SignatureError, UnsignedNativeCodeWarning
from conftest import ROOT, invoke, rehash

pytest.importorskip("model_signing", reason="the sign extra (make test installs it)")


def _key_pair(folder: Path, name: str) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / f"{name}.pem", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """A compiled bundle signed with key a; b is another publisher's key pair."""
    root = tmp_path_factory.mktemp("signed")
    keys = {name: _key_pair(root, name) for name in ("a", "b")}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8)
    path = aotc.export(model, (x,), root / "bundle").path
    aotc.compile(path)
    result = invoke("sign", path, "--key", keys["a"][0], "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["files"] == len(aotc.Bundle.open(path).manifest.files) + 1  # and manifest.json
    return path, keys, model, x


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_a_signed_bundle_loads_with_its_key(signed, monkeypatch):
    path, keys, model, x = signed
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsignedNativeCodeWarning)  # signed: nothing to say
        loaded = aotc.load(path, backend="aoti", public_keys=[keys["a"][1]])
    torch.testing.assert_close(loaded(x), model(x))
    monkeypatch.setenv("AOTC_PUBLIC_KEYS", f"{keys['b'][1]}:{keys['a'][1]}")  # the policy, from the environment
    torch.testing.assert_close(aotc.load(path, backend="aoti")(x), model(x))
    shown = invoke("inspect", path, "--public-key", keys["a"][1])
    assert f"signature: signed, by {keys['a'][1]}" in " ".join(shown.stderr.split())


def _edit_weights(path: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(path / "weights.safetensors")
    name = next(iter(tensors))
    tensors[name] = tensors[name] + 1
    save_file(tensors, path / "weights.safetensors")
    rehash(path)


def _add_file(path: Path) -> None:
    (path / "notes.txt").write_text("added after signing")
    rehash(path, lambda m: m["files"].append({"path": "notes.txt", "kind": "other", "size": 0, "sha256": ""}))


def _remove_file(path: Path) -> None:
    (path / "graphs/inference.py").unlink()
    rehash(path, lambda m: m.update(files=[f for f in m["files"] if f["path"] != "graphs/inference.py"]))


def _edit_signature(path: Path) -> None:
    raw = json.loads((path / "model.sig").read_text())
    payload = raw["dsseEnvelope"]["payload"]
    raw["dsseEnvelope"]["payload"] = payload[:-8] + ("A" if payload[-8] != "A" else "B") + payload[-7:]
    (path / "model.sig").write_text(json.dumps(raw))


def _sign_with_b(path: Path, keys) -> None:
    assert invoke("sign", path, "--key", keys["b"][0]).exit_code == 0


# edit -> the words of the refusal
EDITS = {
    "weights edited, manifest re-hashed": (lambda p, k: _edit_weights(p),
                                           "files changed since signing: manifest.json, weights.safetensors"),
    "file added": (lambda p, k: _add_file(p), "files changed since signing: manifest.json; files added since "
                                             "signing: notes.txt"),
    "file removed": (lambda p, k: _remove_file(p), "files changed since signing: manifest.json; files removed "
                                                  "since signing: graphs/inference.py"),
    "signed by another key": (_sign_with_b, "signed with a key that is not among the configured ones"),
    "signature file edited": (lambda p, k: _edit_signature(p), "model.sig is not a valid signature"),
    "signature removed": (lambda p, k: (p / "model.sig").unlink(), "is unsigned, and public keys are configured"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_every_edit_after_signing_is_refused(signed, tmp_path, edit):
    path, keys, _, _ = signed
    copy = _copy(path, tmp_path / "b")
    change, words = EDITS[edit]
    change(copy, keys)
    with pytest.raises(SignatureError, match=words.replace("(", r"\(").replace(")", r"\)")):
        aotc.load(copy, public_keys=[keys["a"][1]])
    result = invoke("verify", copy, "--public-key", keys["a"][1])
    assert result.exit_code == 1 and words in " ".join(result.stderr.split())
    shown = invoke("inspect", copy, "--public-key", keys["a"][1], "--no-verify")
    if shown.exit_code == 0:  # inspect shows the status; it refuses only what Bundle.open refuses
        assert "signature: signature invalid" in shown.stderr or "signature: unsigned" in shown.stderr


def _planted(path: Path, tmp_path: Path) -> Path:
    """The compiled package's shared library replaced by one whose load writes a marker
    file, and the manifest re-hashed: what an attacker with write access would do."""
    marker = tmp_path / "planted-code-ran"
    source = tmp_path / "evil.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void ran(void) {\n'
                      f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}\n}}\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "evil.so"), str(source)], check=True)
    package = path / "compiled/cpu/inference.pt2"
    with zipfile.ZipFile(package) as old, zipfile.ZipFile(tmp_path / "new.pt2", "w") as new:
        for item in old.infolist():
            data = (tmp_path / "evil.so").read_bytes() if item.filename.endswith(".so") else old.read(item)
            new.writestr(item, data)
    shutil.copyfile(tmp_path / "new.pt2", package)
    rehash(path)
    return marker


def _load_in_a_process(path: Path, keys: list[Path]) -> subprocess.CompletedProcess:
    code = ("import sys, aotc; aotc.load(sys.argv[1], backend='aoti', public_keys=sys.argv[2:] or None)")
    return subprocess.run([sys.executable, "-c", code, str(path), *map(str, keys)], capture_output=True, text=True,
                          cwd=ROOT)


def test_a_planted_library_never_runs_from_a_bundle_the_key_did_not_sign(signed, tmp_path):
    path, keys, _, _ = signed
    copy = _copy(path, tmp_path / "b")
    marker = _planted(copy, tmp_path)
    refused = _load_in_a_process(copy, [keys["a"][1]])
    assert refused.returncode != 0 and "SignatureError" in refused.stderr
    assert "files changed since signing: compiled/cpu/inference.pt2, manifest.json" in " ".join(refused.stderr.split())
    assert not marker.exists()
    # the same bundle without keys: its hashes match, and the planted code runs at load (why keys matter;
    # and the proof that the marker would have been written)
    _load_in_a_process(copy, [])
    assert marker.read_text() == "ran"


def test_without_keys_compiled_code_is_trusted_on_the_bundles_hashes_and_says_so(signed, tmp_path, monkeypatch):
    from aotc.bundle import signing

    path, _, model, x = signed
    monkeypatch.delenv("AOTC_PUBLIC_KEYS", raising=False)
    monkeypatch.setattr(signing, "_told", False)
    with pytest.warns(UnsignedNativeCodeWarning, match="trusted because the bundle's own hashes match"):
        loaded = aotc.load(path, backend="aoti")
    torch.testing.assert_close(loaded(x), model(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsignedNativeCodeWarning)
        aotc.load(path, backend="aoti")  # once per process
    shown = " ".join(invoke("inspect", path).stderr.split())
    assert "signature: has a signature (model.sig), not checked: no public key given" in shown
    assert "compiled native code in this bundle is trusted because the bundle's own hashes match" in shown


def test_compiling_drops_the_signature_and_signing_again_covers_the_new_files(signed, tmp_path):
    path, keys, model, x = signed
    copy = _copy(path, tmp_path / "b")
    result = invoke("compile", copy, "--no-cache")
    assert result.exit_code == 0, result.stderr
    assert "signature (model.sig) covered its files before compiling, so it was removed" in " ".join(
        result.stderr.split())
    assert not (copy / "model.sig").exists()
    with pytest.raises(SignatureError, match="is unsigned"):
        aotc.load(copy, public_keys=[keys["a"][1]])
    assert invoke("sign", copy, "--key", keys["a"][0]).exit_code == 0
    torch.testing.assert_close(aotc.load(copy, backend="aoti", public_keys=[keys["a"][1]])(x), model(x))


def test_diff_reports_a_signature_added_removed_or_changed(signed, tmp_path):
    path, keys, _, _ = signed
    unsigned = _copy(path, tmp_path / "unsigned")
    (unsigned / "model.sig").unlink()
    by_b = _copy(path, tmp_path / "by-b")
    _sign_with_b(by_b, keys)
    for old, new, what in ((unsigned, path, "added"), (path, unsigned, "removed"), (path, by_b, "key")):
        result = invoke("diff", old, new, "--json")
        changes = [c for c in json.loads(result.stdout)["changes"] if c["kind"] == "signing"]
        assert len(changes) == 1 and result.exit_code == 1, (old, new)
        assert changes[0]["what"] == what if what != "key" else changes[0]["old"]["key"] != changes[0]["new"]["key"]
    assert invoke("diff", path, _copy(path, tmp_path / "same")).exit_code == 0


def test_a_regional_bundle_is_signed_whole(gpt_regions, compiled, tmp_path):
    """One signature covers a regional bundle's regions.json and every group's files: apply
    and a group loaded on its own accept it with the key; a compiled group's library
    replaced (the group's manifest and regions.json re-hashed) is refused before it loads."""
    import importlib.util

    from conftest import SAMPLES

    private, public = _key_pair(tmp_path, "a")
    copy = _copy(gpt_regions, tmp_path / "regions")
    result = invoke("sign", copy, "--key", private, "--json")
    assert result.exit_code == 0, result.stderr
    files = [p for p in copy.rglob("*") if p.is_file() and p.name != "model.sig"]
    assert json.loads(result.stdout)["files"] == len(files) and any("groups" in p.parts for p in files)

    spec = importlib.util.spec_from_file_location("gpt_blocks_signed", SAMPLES / "gpt_blocks.py")
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    eager = sample.build_model().eval()
    model = aotc.apply(copy, sample.build_model().eval(), backend="aoti", public_keys=[public])
    ids = sample.example_inputs()[0]
    with torch.no_grad():
        torch.testing.assert_close(model(ids), eager(ids), rtol=1e-4, atol=1e-5)
    aotc.load(copy / "groups/g0", backend="fx", public_keys=[public])  # its regional bundle's signature

    marker = _planted(copy / "groups/g0", tmp_path)
    rehash(copy)  # regions.json re-hashed over the group's new manifest: the regional bundle opens
    assert aotc.RegionalBundle.open(copy).groups["g0"].path == copy / "groups/g0"
    with pytest.raises(SignatureError, match="files changed since signing: groups/g0/compiled/cpu/inference.pt2"):
        aotc.apply(copy, sample.build_model().eval(), backend="aoti", public_keys=[public])
    with pytest.raises(SignatureError, match="files changed since signing"):
        aotc.load(copy / "groups/g0", backend="aoti", public_keys=[public])
    assert not marker.exists()


def test_keys_in_the_environment_leave_export_alone_and_apply_to_every_command(signed, tmp_path, monkeypatch):
    """A production machine with AOTC_PUBLIC_KEYS set: export's own checks of the bundle it
    writes (the replay, the small sizes of a dynamic dim) ask for no signature; every
    command that loads a bundle asks for one, and an explicit empty list of keys asks for none."""
    path, keys, model, x = signed
    monkeypatch.setenv("AOTC_PUBLIC_KEYS", str(keys["a"][1]))
    fresh = aotc.export(model, (x,), tmp_path / "fresh",
                        dynamic_shapes={"input": {0: torch.export.Dim("batch", max=64)}}).path
    with pytest.raises(SignatureError, match="is unsigned"):
        aotc.load(fresh)
    loaded = aotc.load(fresh, public_keys=[])
    for batch in (x, x[:1]):  # a batch of 1 replayed at export too: the dim was not narrowed
        torch.testing.assert_close(loaded(batch), model(batch))
    for command in (["run", fresh], ["bench", fresh, "--baselines", "none", "--iters", "1", "--warmup", "0"]):
        refused = invoke(*command)
        assert refused.exit_code == 1 and "is unsigned, and public keys are configured" in refused.stderr, command
    monkeypatch.delenv("AOTC_PUBLIC_KEYS")
    for command in (["run", path], ["bench", path, "--baselines", "raw", "--iters", "1", "--warmup", "0"]):
        ran = invoke(*command, "--public-key", keys["a"][1], "--json")
        assert ran.exit_code == 0, (command, ran.stderr)
    rows = {r["variant"]: r["error"] for r in json.loads(ran.stdout)["results"]}
    assert rows == {"aotc fx": "", "aotc aoti/cpu": "", "aoti raw runner": ""}  # each process checked the key


def test_keys_of_the_wrong_kind_are_refused_by_name(signed, tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    path, keys, _, _ = signed
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = tmp_path / "rsa.pem", tmp_path / "rsa.pub"
    private.write_bytes(rsa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    public.write_bytes(rsa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
    result = invoke("sign", _copy(path, tmp_path / "b"), "--key", private)
    assert result.exit_code == 1 and f"private key '{private}' is not an elliptic-curve key" in result.stderr
    with pytest.raises(SignatureError, match=f"public key '{public}' is not an elliptic-curve key"):
        aotc.load(path, public_keys=[keys["a"][1], public])
    (tmp_path / "junk.pub").write_text("not a key")
    with pytest.raises(SignatureError, match="is not a PEM public key"):
        aotc.load(path, public_keys=tmp_path / "junk.pub")


def test_a_linked_signature_is_refused_before_anything_it_points_to_is_read(signed, tmp_path, monkeypatch):
    """model.sig as a link to a file outside the bundle: refused by lstat, by name, and the
    file it points to is never opened (model-signing would read it, and every linked file)."""
    import builtins

    path, keys, _, _ = signed
    copy = _copy(path, tmp_path / "linked")
    outside = tmp_path / "outside.sig"
    shutil.copy(copy / "model.sig", outside)
    (copy / "model.sig").unlink()
    (copy / "model.sig").symlink_to(outside)
    opened = []
    real_open, real_os_open = builtins.open, os.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (opened.append(str(f)), real_open(f, *a, **k))[1])
    monkeypatch.setattr(os, "open", lambda f, *a, **k: (opened.append(str(f)), real_os_open(f, *a, **k))[1])
    with pytest.raises(BundleError) as e:
        aotc.load(copy, backend="aoti", public_keys=[keys["a"][1]])
    assert str(e.value) == f"Bundle '{copy}': 'model.sig' is a symbolic link; a bundle holds plain files only."
    assert not [f for f in opened if "outside" in f or f.endswith("model.sig")]
    result = invoke("diff", path, copy)  # aotc diff reads model.sig too: refused, not followed
    assert result.exit_code == 2 and "'model.sig' is a symbolic link" in result.stderr  # diff's refusal: 2
