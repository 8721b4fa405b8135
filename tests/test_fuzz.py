"""300 random corruptions (AOTC_FUZZ_TRIALS) of sample bundles (tests/fuzz.py), each through open / inspect /
load / call / verify in a child process: every trial ends in a named aotc error, or in
results equal to the pristine bundle's, or in results verify reports as wrong."""

from __future__ import annotations

import os

import pytest

from fuzz import build_samples, run_fuzz, summarize

TRIALS = int(os.environ.get("AOTC_FUZZ_TRIALS", "300"))  # make test; make fuzz N=10000 runs more
SEED = int(os.environ.get("AOTC_FUZZ_SEED", "20261123"))


@pytest.mark.slow
def test_random_corruptions_end_in_named_errors_or_correct_results(tmp_path, compiled):
    samples = build_samples(tmp_path / "samples")  # the aoti compile reuses the session's cache
    outcomes = run_fuzz(samples, TRIALS, SEED, tmp_path / "trials")
    print(summarize(outcomes))
    assert len(outcomes) == TRIALS
    failures = [o for o in outcomes if o.failed]
    assert not failures, "\n\n".join(
        f"trial {o.trial} (reproduce: python tests/fuzz.py --seed {SEED} --only {o.trial}): {o.result}\n"
        f"{o.corruption}\n{o.message}" for o in failures[:5]
    )
    kinds = {o.corruption.kind for o in outcomes}
    assert len(kinds) >= 10  # every kind of corruption was tried
    assert any(o.result.startswith("refused:load") for o in outcomes)  # some reached the deeper parsers
    assert any(o.result == "wrong, caught by verify" for o in outcomes)
