"""The CLI through CliRunner: export and inspect of every sample, JSON output, errors."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from conftest import MODE_FLAGS, SAMPLE_NAMES, SAMPLES, invoke, rehash


@pytest.mark.parametrize("name", SAMPLE_NAMES)
@pytest.mark.parametrize("mode", list(MODE_FLAGS))
def test_export_summary_json(sample_bundles, name, mode):
    path, summary = sample_bundles[(name, mode)]
    expected = {"inference": ["inference"], "joint": ["joint"], "autograd": ["forward", "backward"]}[mode]
    assert summary["bundle"] == str(path)
    assert summary["model"] == name
    assert list(summary["graphs"]) == expected
    assert all(g["nodes"] > 0 for g in summary["graphs"].values())
    # what the bundle takes on disk, every file but the manifest that lists them
    on_disk = [f for f in path.rglob("*") if f.is_file() and f != path / "manifest.json"]
    assert on_disk and summary["size_bytes"] == sum(f.stat().st_size for f in on_disk)
    assert set(summary["seconds"]) >= {"load", "capture", "write", "total"}


@pytest.mark.parametrize("name", SAMPLE_NAMES)
@pytest.mark.parametrize("mode", list(MODE_FLAGS))
def test_inspect_json_matches_bundle(sample_bundles, name, mode):
    path, summary = sample_bundles[(name, mode)]
    result = invoke("inspect", path, "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["manifest"]["model"]["name"] == name
    assert info["manifest"]["graph_kinds"] == list(summary["graphs"])
    assert info["graphs"].keys() == summary["graphs"].keys()
    for kind in summary["graphs"]:
        # the operator calls of the saved graph itself, counted from the loaded program
        program = torch.export.load(str(path / "graphs" / f"{kind}.pt2"))
        ops = Counter(
            str(n.target) for n in program.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
        )
        assert ops and info["graphs"][kind]["ops"] == dict(ops)
        assert info["graphs"][kind]["num_nodes"] == summary["graphs"][kind]["nodes"] == sum(ops.values())
    files = {f["path"]: f for f in info["manifest"]["files"]}
    assert "weights.safetensors" in files
    for f in files.values():
        assert (path / f["path"]).stat().st_size == f["size"]


def test_inspect_tables(sample_bundles):
    path, _ = sample_bundles[("mlp", "joint")]
    result = invoke("inspect", path)
    assert result.exit_code == 0, result.stderr
    text = result.stderr
    running_mean = next(line for line in text.splitlines() if "bn.running_mean" in line)
    assert running_mean.split("│")[-2].strip() == "data"  # BatchNorm stats in train mode
    assert "backward signature" in text and "parameter" in text
    assert "aten." in text
    assert result.stdout == ""  # tables are for people: stderr


@pytest.mark.parametrize(
    "mode, program, third",
    [
        # Under no_grad AOTAutograd returns a view of an intermediate as a plain output.
        ("inference", "inference", "non_alias"),
        ("autograd", "forward", "alias_of_intermediate_base_is_user_output"),
    ],
)
def test_inspect_inplace_shows_aliasing(sample_bundles, mode, program, third):
    path, _ = sample_bundles[("inplace", mode)]
    info = json.loads(invoke("inspect", path, "--json").stdout)
    outputs = info["metadata"]["programs"][program]["outputs"]
    assert [o["output_type"] for o in outputs] == ["non_alias", "alias_of_input", third]
    assert outputs[1]["base"] == "y"
    inputs = {i["name"]: i for i in info["metadata"]["programs"][program]["inputs"]}
    assert inputs["y"]["mutation_type"] == "MUTATED_OUT_GRAPH"


def test_inspect_graph_prints_code(sample_bundles):
    path, _ = sample_bundles[("mlp", "inference")]
    result = invoke("inspect", path, "--graph", "inference")
    assert result.exit_code == 0
    assert "def forward" in result.stdout and "torch.ops.aten" in result.stdout
    missing = invoke("inspect", path, "--graph", "joint")
    assert missing.exit_code == 1
    assert "has no 'joint' graph; it has inference" in missing.stderr


def test_piped_tables_keep_their_width(tmp_path):
    import aotc

    name = "a_rather_long_submodule_name_" * 10  # 290 characters: folded anywhere under that
    model = torch.nn.Sequential()
    model.add_module(name, torch.nn.Linear(4, 2))
    path = aotc.export(model, (torch.randn(3, 4),), tmp_path / "long").path
    result = invoke("inspect", path)  # CliRunner: stderr is not a terminal
    assert result.exit_code == 0, result.stderr
    rows = [line for line in result.stderr.splitlines() if f"{name}.weight" in line]
    assert rows and all("float32" in row for row in rows)  # the whole row on one line


def test_every_command_has_help():
    from aotc.cli.main import cli

    for name, command in cli.commands.items():
        assert command.help and "Example" in command.help, name
        assert invoke(name, "--help").exit_code == 0


# ------------------------------------------------------------------------ user errors


def _error(result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: ")
    return lines[-1]


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(body))
    return path


GOOD = """
import torch
def build_model():
    return torch.nn.Linear(4, 2)
def example_inputs():
    return (torch.randn(3, 4),)
"""


def test_missing_model_file(tmp_path):
    line = _error(invoke("export", tmp_path / "nope.py", "-o", tmp_path / "b"))
    assert line == f"Error: Model file '{tmp_path / 'nope.py'}' not found. Give the path of a Python file that defines build_model() and example_inputs(), or 'package.module:factory'."


def test_syntax_error(tmp_path):
    path = _write(tmp_path, "import torch\n\ndef build_model(:\n    pass\n")
    line = _error(invoke("export", path, "-o", tmp_path / "b"))
    assert line == f"Error: Model file '{path}' has a syntax error at line 3: invalid syntax. Fix the file and run again."


def test_syntax_error_debug_shows_traceback(tmp_path):
    path = _write(tmp_path, "def build_model(:\n    pass\n")
    result = invoke("export", path, "-o", tmp_path / "b", "--debug")
    assert result.exit_code == 1 and "Traceback" in result.stderr


def test_no_factory(tmp_path):
    path = _write(tmp_path, "import torch\ndef example_inputs():\n    return (torch.randn(2),)\n")
    line = _error(invoke("export", path, "-o", tmp_path / "b"))
    assert line == (
        f"Error: Model file '{path}' has no function 'build_model'. Define build_model() "
        "returning a torch.nn.Module, or name another factory with --entry."
    )


def test_factory_returns_no_module(tmp_path):
    path = _write(tmp_path, GOOD.replace("return torch.nn.Linear(4, 2)", "return [1, 2]"))
    line = _error(invoke("export", path, "-o", tmp_path / "b"))
    assert line == f"Error: build_model() in '{path}' returned a list, not a torch.nn.Module. Return the model instance."


def test_entry_option_and_module_ref(tmp_path, monkeypatch):
    path = _write(tmp_path, GOOD + "\ndef other():\n    return torch.nn.Linear(4, 3)\n")
    result = invoke("export", path, "--entry", "other", "-o", tmp_path / "b", "--json")
    assert result.exit_code == 0, result.stderr
    monkeypatch.syspath_prepend(str(tmp_path))
    result = invoke("export", "model:other", "-o", tmp_path / "c", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["model"] == "model"


def test_checkpoint_key_mismatch(tmp_path):
    path = _write(tmp_path, GOOD)
    ckpt = tmp_path / "w.safetensors"
    save_file({"weight": torch.zeros(2, 4), "extra": torch.zeros(1)}, str(ckpt))
    line = _error(invoke("export", path, "--checkpoint", ckpt, "-o", tmp_path / "b"))
    assert line == (
        f"Error: Checkpoint '{ckpt}' does not match the model: missing keys: bias; unexpected keys: "
        "extra. Check that the checkpoint was saved from this model's state_dict()."
    )


def test_checkpoint_shape_mismatch(tmp_path):
    path = _write(tmp_path, GOOD)
    ckpt = tmp_path / "w.safetensors"
    save_file({"weight": torch.zeros(3, 4), "bias": torch.zeros(2)}, str(ckpt))
    line = _error(invoke("export", path, "--checkpoint", ckpt, "-o", tmp_path / "b"))
    assert "shape mismatches: weight (model (2, 4), checkpoint (3, 4))" in line


def test_checkpoint_is_applied(tmp_path):
    # classifier.py builds zero weights; its CHECKPOINT holds the real ones.
    out = tmp_path / "b"
    assert invoke("export", SAMPLES / "classifier.py", "-o", out).exit_code == 0
    from safetensors.torch import load_file

    shipped = load_file(str(SAMPLES / "classifier.safetensors"))
    exported = load_file(str(out / "weights.safetensors"))
    assert shipped.keys() == exported.keys()
    for k in shipped:
        torch.testing.assert_close(exported[k], shipped[k], rtol=0, atol=0)


def test_non_scalar_loss_for_joint(tmp_path):
    path = _write(tmp_path, GOOD + "\ndef loss(out, x):\n    return out.sum(1)\n")
    line = _error(invoke("export", path, "--joint", "-o", tmp_path / "b"))
    assert line == (
        "Error: loss() returned a tensor of shape (3,); a joint graph needs a scalar loss "
        "(shape ()). Reduce it, e.g. with .mean() or .sum()."
    )


def test_missing_loss_for_joint(tmp_path):
    path = _write(tmp_path, GOOD)
    line = _error(invoke("export", path, "--joint", "-o", tmp_path / "b"))
    assert "defines no loss(outputs, *inputs); --joint needs one" in line


def test_existing_bundle_needs_force(tmp_path):
    path = _write(tmp_path, GOOD)
    out = tmp_path / "b"
    assert invoke("export", path, "-o", out).exit_code == 0
    before = (out / "manifest.json").read_text()
    line = _error(invoke("export", path, "-o", out))
    assert line == f"Error: '{out}' already exists. Pass --force (force=True) to replace it with the new bundle, or choose another output directory."
    assert (out / "manifest.json").read_text() == before
    assert invoke("export", path, "-o", out, "--force").exit_code == 0


def test_failed_export_leaves_no_partial_bundle(tmp_path):
    path = _write(tmp_path, GOOD + "\ndef loss(out, x):\n    return out.sum(1)\n")
    _error(invoke("export", path, "--joint", "-o", tmp_path / "b"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.py"]


def test_bad_dynamic_flag(tmp_path):
    path = _write(tmp_path, GOOD)
    result = invoke("export", path, "--dynamic", "x", "-o", tmp_path / "b")
    assert result.exit_code == 2 and "is not NAME:DIM" in result.stderr


def test_dynamic_flag(tmp_path):
    path = _write(tmp_path, GOOD)
    out = tmp_path / "b"
    assert invoke("export", path, "--dynamic", "input:0", "-o", out).exit_code == 0
    meta = json.loads((out / "metadata.json").read_text())
    dims = meta["user_inputs"][0]["dynamic_dims"]
    assert list(dims) == ["0"] and (dims["0"]["min"], dims["0"]["max"]) == (0, None)
    # and the bundle runs other batch sizes as eager does (same weights)
    import aotc

    loaded = aotc.load(out)
    eager = torch.nn.Linear(4, 2)
    eager.load_state_dict(loaded.state_dict())
    for batch in (1, 7):
        x = torch.randn(batch, 4)
        torch.testing.assert_close(loaded(x), eager(x).detach())


# ---------------------------------------------------------------- corrupted bundles


def _copy_bundle(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_inspect_edited_byte(sample_bundles, tmp_path):
    path = _copy_bundle(sample_bundles[("mlp", "inference")][0], tmp_path / "b")
    weights = path / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    line = _error(invoke("inspect", path))
    assert line.startswith(f"Error: Bundle '{path}': weights.safetensors has sha256 ")
    assert line.endswith("The file was modified; export the bundle again.")


def test_inspect_deleted_file(sample_bundles, tmp_path):
    path = _copy_bundle(sample_bundles[("mlp", "inference")][0], tmp_path / "b")
    (path / "graphs" / "inference.pt2").unlink()
    line = _error(invoke("inspect", path))
    assert line == (
        f"Error: Bundle '{path}' is missing graphs/inference.pt2 (listed in manifest.json). "
        "The bundle is incomplete; export it again."
    )


def test_inspect_malformed_json(sample_bundles, tmp_path):
    path = _copy_bundle(sample_bundles[("mlp", "inference")][0], tmp_path / "b")
    (path / "manifest.json").write_text("{not json")
    assert "manifest.json is not valid JSON" in _error(invoke("inspect", path))


def test_inspect_newer_format(sample_bundles, tmp_path):
    path = _copy_bundle(sample_bundles[("mlp", "inference")][0], tmp_path / "b")
    rehash(path, lambda m: m.update(format_version=99))
    line = _error(invoke("inspect", path))
    assert "has format_version 99, newer than this aotc reads (4). Upgrade aotc" in line


def test_inspect_schema_violation(sample_bundles, tmp_path):
    path = _copy_bundle(sample_bundles[("mlp", "inference")][0], tmp_path / "b")
    meta = json.loads((path / "metadata.json").read_text())
    meta["programs"]["inference"]["inputs"][0]["mutation_type"] = "SOMETIMES"
    (path / "metadata.json").write_text(json.dumps(meta))
    rehash(path)
    line = _error(invoke("inspect", path))
    assert "metadata.json.programs.inference.inputs[0].mutation_type: expected one of" in line


def test_inspect_not_a_bundle(tmp_path):
    line = _error(invoke("inspect", tmp_path / "missing"))
    assert line == f"Error: Bundle '{tmp_path / 'missing'}' not found: no such directory."
