"""Shared fixtures: sample-model bundles exported once per session, and graph runners."""

from __future__ import annotations

import copy
import json
import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Compiler caches live in the repo's ignored build dir, never in the user's home.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / "build" / "inductor-cache"))
os.environ.setdefault("AOTC_CACHE_DIR", str(ROOT / "build" / "aotc-cache"))

import pytest  # noqa: E402
import torch  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from aotc.cli.main import cli  # noqa: E402
from aotc.sources.model_file import load_model  # noqa: E402
from corpus import all_cases, compiled_in_ci  # noqa: E402

# Bundles whose graphs the aoti-backend tests need compiled (sample name, capture mode).
COMPILED_SAMPLES = [
    ("mlp", "inference"),
    ("mlp", "autograd"),
    ("mlp", "joint"),
    ("cnn", "autograd"),
    ("cnn", "joint"),
    ("tiny_transformer", "inference"),
    ("tiny_transformer", "autograd"),
    ("tiny_transformer", "joint"),
]
# Corpus cases the aoti- and the onnx-backend tests compile, per mode ("eval" | "train"; all
# of them with AOTC_FULL_CORPUS=1).
_FULL_CORPUS = os.environ.get("AOTC_FULL_CORPUS") == "1"
AOTI_CORPUS = {mode: {c.name for c in all_cases()} if _FULL_CORPUS else compiled_in_ci(all_cases(), "aoti", mode)
               for mode in ("eval", "train")}
ONNX_CORPUS = {c.name for c in all_cases()} if _FULL_CORPUS else compiled_in_ci(all_cases(), "onnx")
SAMPLES = ROOT / "sample_models"
SAMPLE_NAMES = ["mlp", "cnn", "tiny_transformer", "inplace", "classifier"]
MODE_FLAGS = {"inference": [], "joint": ["--joint"], "autograd": ["--autograd"]}


def invoke(*args: str):
    """Run the CLI in-process; stdout and stderr are kept apart."""
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="session")
def sample_bundles(tmp_path_factory) -> dict[tuple[str, str], tuple[Path, dict]]:
    """(model, mode) -> (bundle dir, export --json summary), for every sample and mode."""
    root = tmp_path_factory.mktemp("bundles")
    out = {}
    for name in SAMPLE_NAMES:
        for mode, flags in MODE_FLAGS.items():
            target = root / f"{name}-{mode}"
            result = invoke("export", SAMPLES / f"{name}.py", *flags, "-o", target, "--json")
            assert result.exit_code == 0, result.stderr
            out[(name, mode)] = (target, json.loads(result.stdout))
    return out


@pytest.fixture(scope="session")
def corpus_bundles(tmp_path_factory) -> dict[tuple[str, str], Path | Exception]:
    """(case name, "eval" | "train") -> bundle of that corpus program, or the AotcError
    aotc refused its export with (the tests check that refusal is an expected one)."""
    import aotc
    from aotc.errors import AotcError

    root = tmp_path_factory.mktemp("corpus")
    out: dict[tuple[str, str], Path | Exception] = {}
    for case in all_cases():
        for mode in ("eval", "train") if case.train else ("eval",):
            args, kwargs = case.make_inputs()
            graphs = ("inference",) if mode == "eval" else ("forward", "backward")
            try:
                out[(case.name, mode)] = aotc.export(
                    case.build(), (args, kwargs), root / f"{case.name}-{mode}", graphs=graphs
                ).path
            except AotcError as e:
                out[(case.name, mode)] = e
    return out


def _compile(path: str) -> str:
    import aotc

    aotc.compile(path)
    return path


@pytest.fixture(scope="session")
def int8_bundle(tmp_path_factory) -> Path:
    """sample_models/int8_mlp.py (torchao int8 weight-only) exported by the CLI, with ONNX."""
    target = tmp_path_factory.mktemp("int8") / "int8"
    result = invoke("export", SAMPLES / "int8_mlp.py", "--onnx", "-o", target)
    assert result.exit_code == 0, result.stderr
    return target


@pytest.fixture(scope="session")
def gpt_regions(tmp_path_factory) -> Path:
    """sample_models/gpt_blocks.py as a regional bundle of its six blocks (dynamic batch and sequence)."""
    target = tmp_path_factory.mktemp("regions") / "gpt"
    result = invoke("export", SAMPLES / "gpt_blocks.py", "--regions", "blocks.*", "-o", target)
    assert result.exit_code == 0, result.stderr
    return target


@pytest.fixture(scope="session")
def compiled(sample_bundles, corpus_bundles, int8_bundle, gpt_regions) -> bool:
    """AOTInductor-compile every bundle the aoti tests use, once, two at a time.

    About 5 s of g++ per graph on 2 cores; the compile cache (build/aotc-cache) makes a
    second run on the same checkout take seconds.
    """
    corpus = [str(p) for (name, mode), p in corpus_bundles.items() if isinstance(p, Path) and name in AOTI_CORPUS[mode]]
    paths = [str(sample_bundles[key][0]) for key in COMPILED_SAMPLES] + corpus + [str(int8_bundle), str(gpt_regions)]
    with ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn")) as pool:
        list(pool.map(_compile, paths))
    return True


@pytest.fixture(scope="session")
def onnx_exported(corpus_bundles) -> dict[Path, str]:
    """Add ONNX models to every eval corpus bundle; bundle -> refusal message where
    aotc refused the export (the message names the operators or outputs)."""
    from aotc.errors import AotcError
    from aotc.exporters.onnx import add_to_bundle

    refused = {}
    for (name, mode), path in corpus_bundles.items():
        if mode == "eval" and isinstance(path, Path) and name in ONNX_CORPUS:
            try:
                add_to_bundle(path)
            except AotcError as e:
                refused[path] = str(e)
    return refused


def backend_fixture(request, backend: str, bundle: Path | None = None) -> str | None:
    """For tests parametrized over backends: make sure the artifacts exist first. Returns
    the message aotc refused the bundle's ONNX export with (None when it exported): the
    caller checks it against its table of expected refusals, never skips."""
    if backend == "aoti":
        request.getfixturevalue("compiled")
    if backend == "onnx":
        return request.getfixturevalue("onnx_exported").get(bundle)
    return None


def fresh_sample(name: str):
    """A new model and new example inputs from a sample model file."""
    return load_model(str(SAMPLES / f"{name}.py"))


def clone_inputs(args):
    return tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)


def run_flat(program, signature, state: dict[str, torch.Tensor], user_inputs: list, extra: dict | None = None):
    """Call a flat bundle graph: inputs picked by slot role, outputs returned by slot name."""
    args = []
    for slot in signature.inputs:
        if slot.role in ("parameter", "buffer"):
            args.append(state[slot.target])
        elif slot.role == "user_input":
            args.append(user_inputs[slot.index])
        else:
            args.append(extra[slot.name])
    outs = program.module()(*args)
    return dict(zip([s.name for s in signature.outputs], outs, strict=True))


def eager_copy(model):
    return copy.deepcopy(model)


def rehash(path: Path, edit=None) -> None:
    """Re-sign a bundle after a deliberate edit, as a hostile editor would: apply
    `edit(manifest_dict)`, record every listed file's size and sha256 again, and the
    manifest's checksum. What is left to catch the edit is aotc's validation."""
    from aotc.bundle import manifest_checksum, sha256_file

    name = "manifest.json" if (path / "manifest.json").is_file() else "regions.json"  # a regional bundle's
    manifest = json.loads((path / name).read_text())
    if edit is not None:
        edit(manifest)
    for f in manifest["files"]:
        if (path / f["path"]).is_file():
            f["size"], f["sha256"] = (path / f["path"]).stat().st_size, sha256_file(path / f["path"])
    manifest["checksum"] = manifest_checksum(manifest)
    (path / name).write_text(json.dumps(manifest))
