"""Detection and false-alarm rates of `diagnose training` on seeded synthetic logs (not a test; run by hand).

    cd tests/diagnostics && ../../.venv/bin/python measure_rates.py [N_SEEDS] [IS_SIGMA] [TAIL]

Healthy logs: every finding is a false alarm. Injected logs (one symptom at a
random step in 30..170): counted as detected when the verdict is the injected
kind *at* the injected step (detector_inactive: any window).
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from diag_synth import tirl_log, write_jsonl

from tirl.diagnostics.adapters import load_metrics
from tirl.diagnostics.training import diagnose_training

SYMPTOMS = ("void_leak", "late_filter", "detector_inactive", "empty_batch")


def main(n: int, is_sigma: float = 0.1, tail: float = 0.0) -> None:
    tmp = Path(tempfile.mkdtemp())
    t0 = time.perf_counter()
    alarms = 0
    for seed in range(n):
        diag = diagnose_training(
            load_metrics(write_jsonl(tmp / "h.jsonl", tirl_log(seed=10_000 + seed, is_sigma=is_sigma, tail=tail)))
        )
        alarms += bool(diag.findings)
    print(f"IS noise sigma {is_sigma}, tail {tail}")
    print(f"healthy: {alarms}/{n} logs with a finding (200 steps each)")
    for kind in SYMPTOMS:
        hit = 0
        for seed in range(n):
            at = random.Random(seed).randint(30, 170)
            diag = diagnose_training(
                load_metrics(
                    write_jsonl(
                        tmp / "s.jsonl", tirl_log(seed=seed, inject=kind, at=(at,), is_sigma=is_sigma, tail=tail)
                    )
                )
            )
            ok = diag.verdict == kind and (kind == "detector_inactive" or any(f.step == at for f in diag.findings))
            hit += ok
        print(f"{kind}: detected {hit}/{n}")
    print(f"{(time.perf_counter() - t0) / (5 * n) * 1000:.1f} ms per 200-step log")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        int(args[0]) if args else 100,
        float(args[1]) if len(args) > 1 else 0.1,
        float(args[2]) if len(args) > 2 else 0.0,
    )
