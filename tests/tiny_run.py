"""What the real-CLI training tests share: a tiny random model saved to disk and the `--set` flags of a tiny run.

Also the generator and agent-loop tests' 2-layer random policy, saved and loaded the way a user's checkpoint is.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

from tirl.ablation import last_wins
from tirl.models.loading import Policy, load_policy
from tirl.models.tiny import TinyModelSpec, build_tiny_model, save_policy

#: A tiny run with the job's own evaluation (the real-CLI run-directory tests).
TINY_RUN_ARGS = [
    "--set", "trainer.prompts_per_step=2",
    "--set", "algo.group_size=2",
    "--set", "generation.max_new_tokens=16",
    "--set", "generation.max_total_tokens=200",
    "--set", "filter.mode=off",  # a random model only writes void turns; train on them anyway
    "--set", "trainer.threads=1",
    "--no-progress",
]  # fmt: skip
#: The same without the evaluation, every step an update.
TINY_TRAIN_ARGS = [
    *TINY_RUN_ARGS,
    "--set", "algo.kl_coef=0.01",  # every step updates (all-zero advantages would skip the update)
    "--set", "trainer.eval_before_after=false",
]  # fmt: skip


def with_sets(base: list[str], *items: str) -> list[str]:
    """``base`` with each ``KEY=VALUE`` of ``items`` as a ``--set``, replacing ``base``'s own ``--set`` of that key.

    The CLI refuses a key given twice in ``--set`` (the last one used to win without a word), so a test that
    changes one of the shared tiny-run keys says so here instead of repeating it. The last of each key is
    :func:`tirl.ablation.last_wins`'s (a TRL/verl alias is its tirl key); the ``--set`` flags go last.
    """
    others: list[str] = []
    sets: list[str] = []
    args = iter(base)
    for arg in args:
        if arg == "--set":
            sets.append(next(args))
        else:
            others.append(arg)
    return [*others, *(a for item in last_wins([*sets, *items]).values() for a in ("--set", item))]


def save_tiny_model(out: Path) -> Path:
    """A 1-layer random model (hidden 32) and its tokenizer saved at ``out``; the directory."""
    spec = TinyModelSpec(hidden_size=32, layers=1, heads=2, kv_heads=2, intermediate_size=64, max_positions=256)
    model, tok = build_tiny_model(spec, seed=0)
    return save_policy(model, tok, out)


def saved_two_layer_policy(out: Path, seed: int) -> Policy:
    """A 2-layer random Llama (hidden 32) of ``seed`` saved at ``out`` with save_pretrained, then loaded from there."""
    spec = TinyModelSpec(hidden_size=32, layers=2, heads=2, kv_heads=2, intermediate_size=64)
    model, tok = build_tiny_model(spec, seed=seed)
    save_policy(model, tok, out)
    return load_policy(out)


def tirl_in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``tirl ARGS`` through ``tirl.cli.main`` in this process: exit status, stdout, stderr.

    What a subprocess would give, without a fresh torch import per call (8-17 s each on a busy 2-core machine).
    """
    from tirl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(["tirl", *args], code, out.getvalue(), err.getvalue())
