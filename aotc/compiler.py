"""`aotc.compile`: add AOTInductor artifacts to a bundle, reusing earlier results.

The compiling itself, its cache and the checks a compiled graph needs are the `aoti`
format's (exporters/aoti.py, exporters/aoti_cache.py); this is the library function.

Every graph kind in the bundle is compiled for each asked device into
`compiled/<device>/<kind>.pt2`, listed in the manifest with its size, sha256 and build
fingerprint; an unchanged graph reuses its earlier compile. The bundle is updated
atomically: a staging copy (hard links) gets the new files and manifest, then replaces
the bundle.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aotc.bundle.files import Bundle
from aotc.errors import InputError
from aotc.exporters.formats import BuildOptions, GraphCallback, add_artifacts
from aotc.profiles import bundle_dims
from aotc.profiles import parse as parse_profiles
from aotc.runtime.regional import is_regional, update_groups


def default_cache_dir() -> Path:
    env = os.environ.get("AOTC_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "aotc"


@dataclass(frozen=True)
class CompileOptions:
    """How `compile` builds, beside what (the bundle and the devices): where compiled results
    are cached (AOTC_CACHE_DIR, else ~/.cache/aotc), whether an identical earlier build is
    reused, how CPU inference graphs get their weights: compiled frozen, the weights folded
    in at load and again whenever they change (`fold`, the default), kept as graph inputs
    (`fold=False`), or embedded in the package (`freeze`: no folding at load and a package
    that runs without aotc, but the loaded module refuses new weights); shape `profiles`
    (aotc.profiles: "x:0=1", "x:0=2..16"), each compiled into a package of its own beside the
    generic one (`generic=False`: profiles alone); and a callback told each graph as it
    starts and ends: on_graph(kind, device, "start" | "compiled" | "cached")."""

    cache_dir: str | Path | None = None
    use_cache: bool = True
    freeze: bool = False
    fold: bool = True
    profiles: tuple[str, ...] = ()
    generic: bool = True
    on_graph: GraphCallback | None = None


def compile(path: str | Path, devices=("cpu",), *, options: CompileOptions | None = None, **settings: Any) -> Bundle:
    """Compile every graph of the bundle at `path` for each device; returns the new Bundle
    (for a regional bundle, each group's bundle, and the new RegionalBundle).

    `options` (CompileOptions) says how; its fields can be given as keywords instead
    (`freeze=True`, `cache_dir=...`), each overriding `options`."""

    names = [f.name for f in dataclasses.fields(CompileOptions)]
    unknown = sorted(set(settings) - set(names))
    if unknown:
        raise TypeError(f"compile() got an unexpected keyword argument {unknown[0]!r}; it takes devices, options, "
                        f"and CompileOptions' fields: {', '.join(names)}.")
    o = dataclasses.replace(options or CompileOptions(), **settings)
    if is_regional(path):
        return update_groups(path, lambda group: compile(group, devices, options=o))

    build = BuildOptions(cache_dir=Path(o.cache_dir) if o.cache_dir else default_cache_dir(), use_cache=o.use_cache,
                         freeze=o.freeze, fold=o.fold)

    def report(kind: str, device: str, event: str) -> None:  # events: "start", "compiled", "cached"
        if o.on_graph:
            o.on_graph(kind, device, "compiled" if event == "built" else event)

    bundle = Bundle.open(path)
    if not o.generic and not o.profiles:
        raise InputError("generic=False (--no-generic) leaves only the shape profiles' packages, and no profile "
                         "was given: add --profile DIM=LO..HI.")
    profiles = parse_profiles(list(o.profiles), bundle_dims(bundle), f"bundle '{bundle.path}'")
    return add_artifacts(path, "aoti", devices, options=build, on_graph=report, profiles=profiles, generic=o.generic)
