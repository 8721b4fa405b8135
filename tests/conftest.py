"""Shared fixtures: sample-model bundles exported once per session, and graph runners."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from aotc.cli.main import cli
from aotc.model_file import load_model

ROOT = Path(__file__).resolve().parent.parent
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
