"""Every zoo's cases, by name; each zoo lists only what its venv can build."""

from __future__ import annotations

import importlib

from benchmarks.sweep.cases import Case

ZOOS = ("benchmarks.sweep.zoo_transformers", "benchmarks.sweep.zoo_diffusers", "benchmarks.sweep.zoo_timm")


def zoo_module(library: str):
    return importlib.import_module(f"benchmarks.sweep.zoo_{library}")


def all_cases(libraries=("transformers", "diffusers", "timm")) -> list[Case]:
    """Case lists only: building a zoo's list imports its library, never builds a model."""
    found = []
    for library in libraries:
        found.extend(zoo_module(library).cases())
    return found


def excluded(libraries=("transformers", "diffusers", "timm")) -> dict[str, str]:
    out = {}
    for library in libraries:
        out.update(getattr(zoo_module(library), "EXCLUDED", {}))
    return out


def find(name: str) -> Case:
    library = name.split("/", 1)[0]
    for case in zoo_module(library).cases():
        if case.name == name:
            return case
    raise KeyError(f"no sweep case named {name!r}")


if __name__ == "__main__":  # the case list of the zoos this venv holds, for run.py in another venv
    import json
    import sys

    libraries = sys.argv[1:] or ["transformers", "diffusers", "timm"]
    print(json.dumps([dict(name=c.name, library=c.library, family=c.family, head=c.head, venv=c.venv)
                      for c in all_cases(libraries)]))
