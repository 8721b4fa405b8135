"""verify's check of shape profiles (aotc.profiles): each profile's package at the two ends
of its ranges and a size between, against the fx graph on the same inputs (the graph export
checked against eager). Sizes inside one profile run that profile's package: profiles do not
overlap, and a call runs the first profile its sizes hold."""

from __future__ import annotations

from aotc._torch_compat import pytree
from aotc.bundle.files import Bundle
from aotc.contract.outputs import load_spec
from aotc.exporters.aoti_profiles import parse_build
from aotc.runtime.inputs import random_inputs
from aotc.runtime.subclasses import caller_inputs
from aotc.tools.observe import is_input_entry


def profile_sizes(ranges) -> list[dict[str, int]]:
    """The sizes to check a profile at: every dim at its low end, in the middle, at its high end."""
    picks = [{s: lo for s, lo, _ in ranges}, {s: (lo + hi) // 2 for s, lo, hi in ranges},
             {s: hi for s, _, hi in ranges}]
    return [p for i, p in enumerate(picks) if p not in picks[:i]]


def profiled_packages(bundle: Bundle, device: str) -> list[tuple[str, tuple]]:
    """(package path, its ranges) of every shape profile compiled for `device`."""
    return [(f.path, parse_build(f.build["profile"])) for f in bundle.manifest.files
            if f.kind == "compiled" and f.device == device and (f.build or {}).get("profile")]


def check_profiles(bundle: Bundle, device: str, run_artifact, compare, override, trusted=(),
                   public_keys=None) -> list:
    """verify's checks of every profile compiled for `device`, labelled with its sizes (verify
    gives its own `run_artifact` and `compare`)."""
    checks = []
    spec = load_spec(bundle.signature.in_spec)
    for path, ranges in profiled_packages(bundle, device):
        for sizes in profile_sizes(ranges):
            inputs = caller_inputs(bundle, random_inputs(bundle.metadata, spec, seed=0, sizes=sizes), trusted)
            fresh = pytree.tree_map(lambda t: t.clone() if hasattr(t, "clone") else t, inputs)
            want = run_artifact(bundle, "fx", "cpu", inputs, {}, trusted, public_keys)
            got = run_artifact(bundle, "aoti", device, fresh, {}, trusted, public_keys)
            label = f"aoti/{device} {path.rsplit('/', 1)[1]} at " + ",".join(f"{s}={n}" for s, n in sizes.items())
            expected = {k: v for k, v in want.items() if not is_input_entry(k)}
            checks += compare(label, expected, got, {}, override)
    return checks
