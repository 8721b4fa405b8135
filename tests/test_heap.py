"""aotc.runtime.heap: a CPU package's buffers stay in the process between calls instead of
being faulted in anew on every call; the environment's own malloc settings win, and
AOTC_KEEP_HEAP=0 turns it off. Each case runs in a fresh process: mallopt is process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from aotc.runtime import heap

# a call's buffers, as a compiled graph allocates and frees them: 60 MiB in 3 MiB blocks;
# prints what keep() said and the page faults of each of six calls
CALLS = """
import json, resource, torch
from aotc.runtime import heap
state = heap.keep()
faults = []
for _ in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffers = [torch.ones(3 * 2**20 // 4) for _ in range(20)]
    del buffers
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"state": state, "faults": faults}))
"""

glibc_only = pytest.mark.skipif(not heap._glibc_version(), reason="mallopt's thresholds are glibc's")


def calls(**env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "AOTC_KEEP_HEAP" and not k.startswith("MALLOC_")}
    proc = subprocess.run([sys.executable, "-c", CALLS], capture_output=True,
                          text=True, env={**environ, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@glibc_only
def test_kept_heap_stops_faulting_after_the_first_calls():
    kept = calls()
    assert kept["state"] == "kept"
    # the first call faults its 60 MiB in (15k pages); later calls reuse them
    assert kept["faults"][0] > 10_000
    assert sum(kept["faults"][3:]) < 2_000, kept


@glibc_only
def test_the_environment_and_the_opt_out_leave_malloc_alone():
    tuned = calls(MALLOC_TOP_PAD_="131072")  # static thresholds: glibc trims the freed top every call
    assert tuned["state"] == "off: the environment sets MALLOC_TOP_PAD_"
    assert min(tuned["faults"][3:]) > 10_000, tuned
    assert calls(AOTC_KEEP_HEAP="0")["state"] == "off: AOTC_KEEP_HEAP=0"
    assert calls(GLIBC_TUNABLES="glibc.malloc.trim_threshold=1048576")["state"] == \
        "off: the environment sets GLIBC_TUNABLES"
