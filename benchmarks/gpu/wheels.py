"""`make gpu-wheels`: what the prepared GPU run (benchmarks/gpu/check.sh) installs on a lent
GPU machine, which has no network: wheels for its Python (3.12) of aotc's dependencies
that its image lacks, and the Debian packages of the C++ runtime's headers (nlohmann-json,
OpenSSL's), all under build/gpu-wheels/ (ignored; the device tool carries it).

The image's packages (machine-packages.txt, from the device tool's KINDS.md) are left out:
the carried tree must stay under 64 MiB. The model libraries are the newest of aotc's
ranges in pyproject.toml, as make test installs them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "build" / "gpu-wheels"
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64"]
DEBS = ["nlohmann-json3-dev", "libssl-dev", "libssl3"]
# carried though the image has them: its transformers is older than aotc's range, and
# pydantic (for model-signing) wants a newer typing_extensions than an image may hold
ALWAYS = ("transformers", "diffusers", "typing-extensions")
LIMIT_MIB = 45  # of the 64 MiB a call carries, beside the working tree (about 3 MiB)


def _name(project: str) -> str:
    return re.sub(r"[-_.]+", "-", project).lower()


def _wheel_name(wheel: str) -> str:
    return _name(wheel.split("-")[0])


def requirements() -> tuple[list[str], list[str]]:
    """(with their dependencies, without): the sign extra and pytest's timeout; the model
    libraries alone (what they need is in the image, and their trees reach torch)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    libraries = [d for d in extras["hf"] + extras["models"] if not d.startswith("peft")]  # peft: in the image
    return [*extras["sign"], "importlib_metadata", "pytest-timeout"], libraries


def main() -> int:
    lines = (HERE / "machine-packages.txt").read_text().splitlines()
    present = {_name(line.strip()) for line in lines if line.strip() and not line.startswith("#")}
    with tempfile.TemporaryDirectory() as tmp:
        platforms = [f for p in PLATFORMS for f in ("--platform", p)]
        download = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", "3.12",
                    "--implementation", "cp", *platforms, "-d", tmp]
        with_deps, alone = requirements()
        subprocess.run([*download, *with_deps], check=True)
        subprocess.run([*download, "--no-deps", *alone], check=True)
        if OUT.exists():
            shutil.rmtree(OUT)
        (OUT / "debs").mkdir(parents=True)
        kept = [w for w in sorted(Path(tmp).glob("*.whl"))
                if _wheel_name(w.name) not in present or _wheel_name(w.name) in ALWAYS]
        for wheel in kept:
            shutil.copy(wheel, OUT)
    subprocess.run(["apt-get", "download", *DEBS], cwd=OUT / "debs", check=True, capture_output=True)
    size = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file()) / 2**20
    for f in sorted(OUT.rglob("*.*")):
        print(f"{f.stat().st_size / 2**20:6.1f} MiB  {f.relative_to(OUT)}", file=sys.stderr)
    print(f"{size:.1f} MiB in {OUT.relative_to(ROOT)}", file=sys.stderr)
    if size > LIMIT_MIB:
        print(f"over {LIMIT_MIB} MiB: the device tool carries 64 MiB a call, the working tree included", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
