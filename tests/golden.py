"""Regenerate the golden files of tests/golden/ from this checkout, for review.

    .venv/bin/python tests/golden.py && git diff tests/golden

The tests only read these files (tests/test_bundle.py); a change in them is a change in
the bundle format, to be reviewed like code.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

GOLDEN = Path(__file__).parent / "golden"


def _write(name: str, data) -> None:
    path = GOLDEN / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {path}")


def main() -> None:
    import aotc
    from aotc.bundle.regions_schema import RegionsManifest
    from aotc.bundle.schema import Manifest, Metadata, Signature, json_schema
    from conftest import fresh_sample

    for cls in (Manifest, Signature, Metadata, RegionsManifest):
        _write(f"schema/{cls.__name__.lower()}.schema.json", json_schema(cls))
    spec = fresh_sample("inplace")
    with tempfile.TemporaryDirectory() as tmp:
        aotc.export(spec.module, spec.args, Path(tmp) / "b", graphs=("forward", "backward"))
        for name in ("signature.json", "metadata.json"):
            _write(f"inplace-autograd/{name}", json.loads((Path(tmp) / "b" / name).read_text()))
        aotc.export(*pair_program(), Path(tmp) / "pair", graphs=("forward", "backward"))
        for name in ("signature.json", "metadata.json"):
            _write(f"pair-autograd/{name}", json.loads((Path(tmp) / "pair" / name).read_text()))


def pair_program():
    """A model with tensor subclass parameters, input and output (tests/subclass_models.py)."""
    from subclass_models import PairLinear, pair, pair_inputs

    x, _ = pair_inputs()
    return PairLinear(), (x, pair(2, 3, seed=4, requires_grad=True))


if __name__ == "__main__":
    main()
