"""``tirl eval``: greedy accuracy of a checkpoint on the fixed held-out evaluation set.

The set is ``--n`` tasks of the environment generated from the evaluation
seed of ``--seed`` (see :mod:`tirl.trainer.wiring`: disjoint from every
training step's tasks). With the defaults it is exactly the set behind
``eval/accuracy_before``/``eval/accuracy_after`` in a default run's
``summary.json``. ``--model`` takes a model directory or a run directory (its
newest checkpoint is used); no ``--model`` evaluates the built-in model. A run
directory's own tasks are evaluated: the ``[env]`` and ``[filter]`` sections
of its ``config.json`` are the base (a note says so), which ``--env``/``--n``/
``--seed``/``--set`` override; ``--config`` evaluates with that file instead.
``--split validation`` evaluates on the validation set instead: as many
tasks, disjoint from the held-out set and from the built-in checkpoint's SFT
demonstrations, for choosing settings without looking at the held-out set.
``--sampled`` samples at ``generation.temperature``/``generation.top_p`` (what training samples; change them
with ``--set``) instead of greedily: one episode per task, seeded per task, so the same command gives the
same episodes — the solve rate RL's rollouts start from, which can be far below the greedy one.
``--samples K`` (with ``--sampled``) draws K episodes per task, as a training step draws a group, and prints
pass@k for k = 1, 2, 4, ..., K (:mod:`tirl.rollout.pass_at_k`): what the samples solve at all, the ceiling
that reinforcing them can lift the greedy solve rate towards.
The envs are the clean ones whatever ``env.ood_rate`` a run trained with: out-of-distribution tool output in an
evaluation is asked for with ``--set env.eval_ood_rate=RATE`` (a stress evaluation; the record's ``ood_rate``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tirl.cli import elapsed
from tirl.commands import flag_overrides
from tirl.config import ResolvedConfig, TirlConfig, resolve_config
from tirl.config_ranges import RANGES, check_flag
from tirl.errors import ConfigError, InputError
from tirl.trainer.preflight import check_saved_trust, context_warning, preflight, run_label

if TYPE_CHECKING:
    from tirl.rollout.pass_at_k import PassAtK

#: The most episodes ``--samples`` draws per task (a typo of 1000 would run for hours): trainer.eval_samples' bound.
MAX_SAMPLES = int(RANGES["trainer.eval_samples"].hi)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tirl eval``."""
    parser.add_argument("--model", metavar="PATH", help="model directory, or a run directory (newest checkpoint)")
    parser.add_argument(
        "--n", type=int, metavar="N", help="number of tasks (env.eval_size: 200, or a run directory's own)"
    )
    parser.add_argument("--seed", type=int, default=None, metavar="S", help="env seed the held-out set derives from")
    parser.add_argument("--env", metavar="NAME", help="environment name (env.name: tir-chain, or a run directory's)")
    parser.add_argument("--config", metavar="FILE.toml", help="a TOML config file")
    parser.add_argument(
        "--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[], help="dotted config override"
    )
    parser.add_argument(
        "--split",
        choices=("heldout", "validation"),
        default="heldout",
        help="heldout: the reported evaluation set; validation: the set to tune settings on (never the held-out one)",
    )
    parser.add_argument(
        "--sampled",
        action="store_true",
        help="sample at generation.temperature/top_p (the training sampling) instead of greedy decoding",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=1,
        metavar="K",
        help="with --sampled: K episodes per task and pass@k for k = 1, 2, 4, ..., K (default 1)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _model_dir(path: str | None) -> str | None:
    if path is None:
        return None
    p = Path(path)
    if (p / "checkpoints").is_dir():
        from tirl.trainer.checkpoint import damage_summary, find_checkpoint, warn_skipped

        ckpt, skipped = find_checkpoint(p)
        if ckpt is None:
            why = f" (damaged: {damage_summary(skipped)})" if skipped else ""
            raise InputError(str(p), None, f"is a run directory without a complete checkpoint{why}",
                             "train longer, restore a checkpoint, or give a model directory")  # fmt: skip
        warn_skipped(skipped, ckpt)
        return str(ckpt.model_dir)
    return str(p)


def _config(args: argparse.Namespace) -> TirlConfig:
    """The config of the evaluation, checked (:func:`~tirl.trainer.preflight.preflight`) before anything loads."""
    if args.samples < 1 or args.samples > MAX_SAMPLES:
        raise InputError("--samples", None, f"must be between 1 and {MAX_SAMPLES}, got {args.samples}",
                         "give the number of episodes to draw per task, e.g. --samples 8")  # fmt: skip
    if args.samples > 1 and not args.sampled:
        raise InputError("--samples", None, "needs --sampled (greedy decoding draws the same episode every time)",
                         "add --sampled, or drop --samples")  # fmt: skip
    check_flag("--n", "env.eval_size", args.n)  # the error names the flag the user typed, not the key it sets
    check_flag("--seed", "env.seed", args.seed)  # it said "config env.seed=-1", a key the user never typed
    flags = [("--n", "env.eval_size", args.n), ("--seed", "env.seed", args.seed), ("--env", "env.name", args.env)]
    flag_overrides(args.overrides, [("--model", "model.path", args.model)])  # --model would win without a word
    sets = flag_overrides(args.overrides, flags)
    base = _run_tasks(Path(args.model)) if args.model and not args.config else None
    resolved = resolve_config(args.config, sets, base)
    if base is not None:  # the run directory's env: never code it names unless the command line repeats it
        check_saved_trust(resolved, Path(args.model) / "config.json")
    _check_decoding(args, resolved)
    for note in resolved.notes:
        print(f"note: {note}", file=sys.stderr)
    cfg = resolved.config
    model_dir = args.model_dir = _model_dir(args.model)  # once: a skipped damaged checkpoint is reported once
    preflight(cfg, model_path=model_dir)
    seen = cfg if model_dir is None else replace(cfg, model=replace(cfg.model, path=model_dir))
    warning = context_warning(seen)  # the cap beyond the model's positions: every long episode ends overlong
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    if base is not None:  # after the checks: a refused command prints its one error line only
        what = f"env {cfg.env.name}" + (f", tasks_file {cfg.env.tasks_file}" if cfg.env.tasks_file else "")
        g = cfg.generation
        how = f"temperature {g.temperature:g}, top-p {g.top_p:g}" if args.sampled else "greedy"
        how += f", {g.max_new_tokens} new tokens a turn, {g.max_total_tokens} in all"
        print(f"note: evaluating on the run's tasks ({what}) and decoding ({how}) from "
              f"{Path(args.model) / 'config.json'} — --env/--set change them, --config replaces them",
              file=sys.stderr)  # fmt: skip
    return cfg


# the [generation] keys that shape an episode: a run evaluated at other caps or another temperature was
# another measurement (a run at max_new_tokens=20 read 0.000 after training, `tirl eval --model RUN` 0.250)
RUN_DECODING = ("temperature", "top_p", "max_new_tokens", "max_total_tokens")


def _check_decoding(args: argparse.Namespace, resolved: ResolvedConfig) -> None:
    """Refuse sampling settings that would do nothing.

    A ``--set`` temperature or top-p under greedy decoding (no ``--sampled``), and ``--sampled`` at temperature 0
    (K samples of a task were one episode: pass@K of nothing). A config file's (shared with ``tirl train``) is
    a note; a run directory's own is the run's, said nowhere.
    """
    g = resolved.config.generation
    if args.sampled and g.temperature == 0:
        raise ConfigError("--sampled at generation.temperature=0 is greedy decoding: every sample of a task is one "
                          "episode — set a temperature above 0, or drop --sampled")  # fmt: skip
    if args.sampled:
        return
    for key, value in (("temperature", g.temperature), ("top_p", g.top_p)):
        source = resolved.sources.get(f"generation.{key}")
        if source == "--set":
            raise ConfigError(f"--set generation.{key}={value:g}: greedy decoding (tirl eval without --sampled) "
                              "takes no temperature or top-p — add --sampled to sample at it, or drop it")  # fmt: skip
        if source == "file":
            print(f"note: generation.{key} from the config file is not used: greedy decoding (add --sampled to "
                  "sample at it)", file=sys.stderr)  # fmt: skip


def _run_tasks(run_dir: Path) -> dict[str, Any] | None:
    """The ``[env]``, ``[filter]`` and decoding of a run directory's ``config.json`` (None: not a run directory).

    A model directory also has a ``config.json`` (the model's, from transformers) but none of these sections,
    so it reads as None and the evaluation keeps the default env, with no note.

    Only what defines the tasks, the action rule and how an episode is decoded (:data:`RUN_DECODING`, so
    ``--sampled`` samples at the run's temperature): the run's generator, server, devices, precision and cache
    sizes are not reused.
    """
    if not (run_dir / "config.json").is_file():
        return None
    from tirl.commands.train import read_saved_config

    saved = read_saved_config(run_dir)
    sections = {k: saved[k] for k in ("env", "filter") if isinstance(saved.get(k), dict)}
    if sections and isinstance(gen := saved.get("generation"), dict):
        sections["generation"] = {k: gen[k] for k in RUN_DECODING if k in gen}
    return sections or None  # a model directory's config.json (transformers') has neither: not a run


async def _run(args: argparse.Namespace, cfg: TirlConfig) -> tuple[dict[str, Any], PassAtK | None]:
    """The evaluation's JSON record, and its pass@k counts under ``--samples`` (else None)."""
    from tirl.trainer.progress import EvalProgress
    from tirl.trainer.sampled_eval import draw, eval_json, sampling_strategy
    from tirl.trainer.wiring import TaskSets, build_parts

    model = args.model_dir  # resolved by _config
    tasks = TaskSets(cfg).split(args.split, option="--split")  # a bad task file: an error before the model loads
    parts = build_parts(cfg, model_path=model, trace_path=None)
    try:
        split = "held-out" if args.split == "heldout" else "validation"
        what = f"{split} {run_label(cfg)} tasks"
        if args.samples > 1:
            what = f"{args.samples} x {len(tasks)} {what}"
        # --sampled: the training runner (its temperature and top-p); greedy: the evaluation strategy
        sampling = sampling_strategy(parts, cfg) if args.sampled else contextlib.nullcontext(parts.eval_strategy)
        async with (
            sampling as strategy,
            EvalProgress(len(tasks) * args.samples, what, lambda: getattr(strategy, "last_board", None),
                         enabled=not args.json),
        ):  # fmt: skip
            rep, passes = await draw(strategy, tasks, args.samples, step=cfg.trainer.seed)
    finally:
        await parts.close()
    record = eval_json(
        cfg, rep, passes, model=model or cfg.model.path or "built-in", split=args.split, sampled=args.sampled
    )
    return record, passes


def run(args: argparse.Namespace) -> int:
    """Entry point of ``tirl eval``."""
    cfg = _config(args)  # config errors come before the heavy imports below
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no per-load/per-save bars from transformers in the run's output
    out, passes = asyncio.run(_run(args, cfg))
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"accuracy {out['accuracy']:.3f} ({out['correct']}/{out['n']}) on {out['label']} "
            f"{'held-out' if out['split'] == 'heldout' else 'validation'} tasks "
            f"(seed {out['seed']}, {out['decoding']}), model {out['model']}, {out['wall_s']:.1f}s evaluating "
            f"({elapsed():.1f}s the whole command)"
        )
        print("terminations: " + ", ".join(f"{k} {v}" for k, v in out["terminations"].items()))
        if passes is not None:
            print(passes.line())
    return 0
