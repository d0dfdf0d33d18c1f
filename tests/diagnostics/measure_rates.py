"""Detection and false-alarm rates of `diagnose training` on seeded synthetic logs (not a test; run by hand).

    cd tests/diagnostics && ../../.venv/bin/python measure_rates.py [N_SEEDS] [IS_SIGMA] [TAIL]

Healthy logs: every finding is a false alarm; three families, the default (void
share 6 % falling to 3 %), a wandering one (void share 17 % falling to 8 %
with the same binomial noise) and a flaky one (the default with 2 % of the
episodes failing at random: run timeouts and evaluation failures). Injected logs (one symptom at a random step in
30..170; void_drift in 30..150, so its 30-step ramp ends inside the log):
counted as detected when the verdict is the injected kind *at* the injected
step (detector_inactive: any window; void_drift: onset within -5..+20 steps
of the ramp's start). Then the issue-10-shaped 30-step runs of
``diag_synth.issue10_run`` with the verdict each must get.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from diag_synth import ISSUE10_KINDS, issue10_run, tirl_log, write_jsonl

from tirl.diagnostics.adapters import load_metrics
from tirl.diagnostics.training import diagnose_training

SYMPTOMS = ("void_leak", "late_filter", "detector_inactive", "empty_batch", "void_drift", "rollout_faults")
EXPECTED = {
    "drop_collapse": "void_drift",
    "drop_slow": "void_drift",
    "off_spike": "void_leak",
    "mask_wander": "healthy",
}


def main(n: int, is_sigma: float = 0.1, tail: float = 0.0) -> None:
    tmp = Path(tempfile.mkdtemp())
    t0 = time.perf_counter()
    alarms = 0
    for seed in range(n):
        for void_p, faults in (((0.06, 0.03), 0.0), ((0.17, 0.08), 0.0), ((0.06, 0.03), 0.02)):
            rows = tirl_log(seed=10_000 + seed, is_sigma=is_sigma, tail=tail, void_p=void_p, faults=faults)
            alarms += bool(diagnose_training(load_metrics(write_jsonl(tmp / "h.jsonl", rows))).findings)
    print(f"IS noise sigma {is_sigma}, tail {tail}")
    print(f"healthy: {alarms}/{3 * n} logs with a finding (200 steps each)")
    for kind in SYMPTOMS:
        hit = 0
        for seed in range(n):
            at = random.Random(seed).randint(30, 150 if kind == "void_drift" else 170)
            rows = tirl_log(seed=seed, inject=kind, at=(at,), is_sigma=is_sigma, tail=tail)
            diag = diagnose_training(load_metrics(write_jsonl(tmp / "s.jsonl", rows)))
            if kind == "void_drift":
                ok = diag.verdict == kind and any(at - 5 <= (f.step or 0) <= at + 20 for f in diag.findings)
            else:
                ok = diag.verdict == kind and (kind == "detector_inactive" or any(f.step == at for f in diag.findings))
            hit += ok
        print(f"{kind}: detected {hit}/{n}")
    for kind in ISSUE10_KINDS:
        verdicts = [
            diagnose_training(load_metrics(write_jsonl(tmp / "r.jsonl", issue10_run(kind, seed)))).verdict
            for seed in range(n)
        ]
        print(f"issue-10 {kind} (30 steps): {verdicts.count(EXPECTED[kind])}/{n} {EXPECTED[kind]}")
    print(f"{(time.perf_counter() - t0) / (9 + len(ISSUE10_KINDS)) / n * 1000:.1f} ms per log (30-step runs included)")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        int(args[0]) if args else 100,
        float(args[1]) if len(args) > 1 else 0.1,
        float(args[2]) if len(args) > 2 else 0.0,
    )
