"""What a command prints is aotc's own: run as a user runs it (a real process, a real
stderr), `aotc export` shows its phases, its summary and nothing from other libraries
(torchao's "Failed to load ...so" on import, torch's pytree deprecations); `--debug`
shows them."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import ROOT, SAMPLES

# Every line aotc's export prints on stderr, by its shape
AOTC_LINE = re.compile(
    r"✓ \w+ +[\d.]+ s"  # a phase and its time
    r"|\S+ -> .+"  # the model and where its bundle went
    r"|[┏┃┡│└].*"  # the graph table
    r"|[\d.]+ (B|KiB|MiB|GiB) in [\d.]+ s"  # the bundle's size and the time taken
)


def _export(target, out, *flags: str) -> list[str]:
    result = subprocess.run([sys.executable, "-m", "aotc", "export", str(target), "-o", str(out), *flags],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return [line.rstrip() for line in result.stderr.splitlines() if line.strip()]


def _not_aotcs(lines: list[str]) -> list[str]:
    return [line for line in lines if not AOTC_LINE.fullmatch(line)]


def test_export_of_a_model_file_prints_aotcs_lines_only(tmp_path):
    lines = _export(SAMPLES / "mlp.py", tmp_path / "mlp")
    assert _not_aotcs(lines) == [] and any(line.startswith("✓ capture") for line in lines)


def test_export_of_a_hf_folder_prints_aotcs_lines_only(tmp_path):
    pytest.importorskip("transformers", reason="the hf extra (make test installs it)")
    from hf_models import CASES

    CASES["bert"].build().save_pretrained(tmp_path / "bert")
    lines = _export(tmp_path / "bert", tmp_path / "b")
    assert _not_aotcs(lines) == [] and any(line.startswith("✓ capture") for line in lines)
    # the same export with --debug shows what the libraries said (torchao, imported by
    # transformers, logs the kernels it cannot load on this machine)
    noisy = _not_aotcs(_export(tmp_path / "bert", tmp_path / "b", "--force", "--debug"))
    assert any("torchao" in line or "_pytree" in line for line in noisy), noisy
