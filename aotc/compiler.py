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

import os
from pathlib import Path

from aotc.bundle.files import Bundle
from aotc.exporters.formats import BuildOptions, GraphCallback, add_artifacts
from aotc.runtime.regional import is_regional, update_groups


def default_cache_dir() -> Path:
    env = os.environ.get("AOTC_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "aotc"


def compile(
    path: str | Path,
    devices=("cpu",),
    *,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    freeze: bool = False,
    on_graph: GraphCallback | None = None,
) -> Bundle:
    """Compile every graph of the bundle at `path` for each device; returns the new Bundle
    (for a regional bundle, each group's bundle, and the new RegionalBundle). With
    `freeze`, inference graphs are compiled with their weights folded in (exporters/aoti.py):
    faster on CPU convolutions, but the loaded module refuses new weights."""

    if is_regional(path):
        return update_groups(path, lambda group: compile(group, devices, cache_dir=cache_dir, use_cache=use_cache,
                                                            freeze=freeze, on_graph=on_graph))

    options = BuildOptions(cache_dir=Path(cache_dir) if cache_dir else default_cache_dir(), use_cache=use_cache,
                           freeze=freeze)

    def report(kind: str, device: str, event: str) -> None:  # events: "start", "compiled", "cached"
        if on_graph:
            on_graph(kind, device, "compiled" if event == "built" else event)

    return add_artifacts(path, "aoti", devices, options=options, on_graph=report)
