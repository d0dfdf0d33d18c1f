"""``tirl train``: GRPO/PPO with void-turn filtering; no arguments runs the built-in CPU job.

The default job: tir-chain (chained computations, 3-6 tool turns), its
built-in warm-started tiny model (``tiny-chain``), GRPO, void filter
``off`` (the modes are not separable yet: docs/training.md#ablation), the pipeline rollout strategy,
two CPU threads. It writes a
run directory (``runs/<time>-<env>``, or ``-<task file name>`` with ``env.tasks_file``, unless ``--resume``)::

    config.json  metrics.jsonl  tb/  trajectories.jsonl  pipeline_trace.jsonl
    checkpoints/step-N/  eval_before.json  summary.json  (report.html when the diagnostics are installed)
    eval_before_sampled.json  eval_after_sampled.json  (only with trainer.eval_samples = K > 0)
    config_notes.json  (only when TRL/verl names were given: their one-line notes, repeated by --resume)

and prints its path once the run is set up (with the TensorBoard command; not with ``--no-progress``) and at
the end.
Before anything heavy loads, the config is checked (:mod:`tirl.trainer.preflight`: an
unknown env, tools the model cannot render are one ``error:`` line; a task file whose
prompts ask for an answer format the action rule does not count is a warning).

``--resume RUN_DIR`` continues a run from its newest checkpoint with the run's saved config (plus any ``--set``/shortcut
overrides, e.g. ``--steps`` to extend it); steps after that checkpoint are
redone, and the logs are cut back so that no step is lost or repeated. The saved config holds tirl's names
only, so the notes on TRL/verl names that made it are kept beside it (``config_notes.json``) and printed
again, marked ``(saved with the run)``, with the notes of any new ``--set``. A new run saves ``model.path`` and
``env.tasks_file`` absolute when they name local paths (:func:`tirl.trainer.preflight.anchor_paths`), so it
resumes from any working directory.

Ctrl-C (SIGINT) and SIGTERM stop a run the same way (:class:`tirl.trainer.stop_signals.StopSignals`): the
run's clean-up (other ``--nproc`` ranks ended, sandboxes closed; a second signal skips the graceful part and
kills the ranks at once), then one line naming the checkpoint kept and ``tirl train --resume RUN_DIR``
(:func:`interrupted_line`), exit 130 or 143 (the first signal's).

This module only turns arguments into a config and a run directory; the run
itself (evaluation before and after, reference model, trainer, summary,
report) is the recipe in :mod:`tirl.trainer.run`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tirl.cli import port
from tirl.commands import flag_overrides
from tirl.config import TirlConfig, config_to_dict, resolve_config
from tirl.errors import ConfigError, InputError, TirlError, show_value
from tirl.fileio import check_output_dir, write_text
from tirl.jsonl import read_json
from tirl.models.kernels import PORTABLE_ENV, pin_portable
from tirl.models.precision import check_training_precision
from tirl.trainer import run_files
from tirl.trainer.preflight import (
    anchor_paths,
    check_saved_trust,
    preflight,
    run_label,
    start_warnings,
)
from tirl.trainer.run_lock import LOCK_NAME, hold_run_dir
from tirl.trainer.stop_signals import StopSignals
from tirl.wording import counted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tirl train``."""
    parser.add_argument("--config", metavar="FILE.toml", help="a TOML config file (sections as in tirl.config)")
    parser.add_argument(
        "--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
        help="dotted config override, repeatable (e.g. --set algo.clip_high=0.3)",
    )  # fmt: skip
    parser.add_argument("--model", metavar="PATH", help="a local Hugging Face model directory (model.path)")
    parser.add_argument("--env", metavar="NAME", help="environment name (env.name), e.g. tir-math")
    parser.add_argument("--steps", type=int, metavar="N", help="training steps (trainer.steps)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint")
    parser.add_argument(
        "--generator",
        choices=["hf", "openai", "vllm"],
        help="where tokens come from (model.generator); vllm: in-process vLLM on a CUDA GPU (the vllm extra)",
    )
    parser.add_argument("--base-url", metavar="URL", help="OpenAI-compatible server for --generator openai")
    parser.add_argument("--backend", choices=["local", "ray"], help="rollout backend (trainer.backend)")
    parser.add_argument("--ray-address", metavar="ADDR", help="Ray cluster for --backend ray (trainer.ray_address)")
    parser.add_argument("--run-dir", metavar="DIR", help="write the run here instead of runs/<time>-<env>")
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress output at all (by default, on stderr: a live bar on a terminal; when stderr is piped or "
        "a file, one line per step, and during an evaluation a line at its start, every 15 s and at its end)",
    )
    parser.add_argument(
        "--nproc", type=int, default=1, metavar="N", help="data-parallel trainer processes (gloo on CPU, nccl on GPU)"
    )
    parser.add_argument("--master-port", type=port, default=0, metavar="PORT", help="--nproc rendezvous port (0: auto)")


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` items, then the shortcut flags' keys (a key set by both is refused: :func:`flag_overrides`)."""
    return flag_overrides(
        args.overrides,
        [
            ("--model", "model.path", args.model),
            ("--env", "env.name", args.env),
            ("--steps", "trainer.steps", args.steps),
            ("--generator", "model.generator", args.generator),
            ("--base-url", "model.base_url", args.base_url),
            ("--backend", "trainer.backend", args.backend),
            ("--ray-address", "trainer.ray_address", args.ray_address),
        ],
    )


def _check_run_name(name: str | None) -> None:
    """Refuse a ``trainer.run_name`` that is not one directory name under ``trainer.run_dir``.

    ``../escape`` wrote the run outside it, ``a/b`` nested it, ``.`` (the root itself, which exists) made the
    hidden ``runs/.-2``.
    """
    if name and ("/" in name or "\0" in name or name.startswith(".")):
        raise ConfigError(f"config trainer.run_name={show_value(name)} is invalid: give one directory name (no '/', "
                          "not starting with '.'); the run goes under trainer.run_dir — set trainer.run_dir for "
                          "another place, or --run-dir DIR for the run's own directory")  # fmt: skip


def _new_run_dir(cfg: TirlConfig) -> Path:
    root = Path(cfg.trainer.run_dir)
    label = run_label(cfg).replace("/", "-").replace(":", "-")[:60]  # the task file's name, else the env's
    name = cfg.trainer.run_name or f"{time.strftime('%Y%m%d-%H%M%S')}-{label}"
    path = root / name
    n = 1
    while path.exists():
        n += 1
        path = root / f"{name}-{n}"
    return path


def _split(cfg: TirlConfig) -> str:
    return "held-out" if cfg.env.eval_split == "heldout" else "validation"


def _first_missing(path: Path) -> Path:
    """The outermost directory of ``path`` that does not exist yet (what ``mkdir(parents=True)`` creates)."""
    top = path
    for parent in path.parents:
        if parent.exists():
            break
        top = parent
    return top


def read_saved_config(run_dir: Path) -> dict[str, Any]:
    """A run directory's ``config.json`` as written (for :func:`tirl.config.resolve_config`'s ``base``).

    :class:`InputError` when it is missing (not a run directory) or not a JSON object.
    """
    saved = Path(run_dir) / "config.json"
    if not saved.is_file():
        _refuse_inside_a_run(Path(run_dir))
        raise InputError(str(run_dir), None, "has no config.json, so it is not a tirl run directory",
                         "give the directory that `tirl train` printed at the end (runs/...)")  # fmt: skip
    data = read_json(saved)
    if not isinstance(data, dict):
        raise InputError(str(saved), None, "is not a JSON object", "restore the config.json that tirl train wrote")
    return data


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """:func:`read_saved_config` of what ``--resume`` names; a model directory's config.json is refused.

    (That one is transformers': it failed as "unknown config key 'architectures'". ``tirl eval --model`` reads
    either kind, so only ``--resume`` refuses it.)
    """
    data = read_saved_config(run_dir)
    if "trainer" not in data and ("model_type" in data or "architectures" in data):
        _refuse_inside_a_run(run_dir)
        raise InputError(str(run_dir), None, "is a model directory, not a tirl run directory",
                         "give the directory that `tirl train` printed at the end (runs/...); a model goes to "
                         "--model")  # fmt: skip
    return data


def _refuse_inside_a_run(path: Path) -> None:
    """:class:`InputError` naming the run when ``path`` is its ``checkpoints/``, a checkpoint or a checkpoint's model.

    Those used to say "has no config.json" or, for a model, "unknown config key 'architectures'".
    """
    for parent in path.parents[:3]:
        if (parent / run_files.CHECKPOINTS).is_dir() and (parent / "config.json").is_file():
            raise InputError(str(path), None, f"is inside the run directory {parent}",
                             f"give the run directory itself: {parent}")  # fmt: skip


def resolve(args: argparse.Namespace) -> tuple[TirlConfig, Path, Path | None]:
    """The config, the run directory (saved config first when resuming) and what this call created.

    The third value is the outermost directory created for the run (``None`` when resuming or when the run
    directory existed): a failed set-up removes the run directory and those parents again while they are empty.
    """
    overrides = _overrides(args)
    if getattr(args, "master_port", None) and getattr(args, "nproc", 1) == 1:  # ignored before: no rendezvous
        raise InputError("--master-port", None, "is the rendezvous port of --nproc N ranks, and --nproc is 1",
                         "leave --master-port out, or add --nproc N")  # fmt: skip
    if args.resume:
        run_dir = Path(args.resume)
        saved_cfg = read_run_config(run_dir)
        run_files.refuse_links(run_dir)  # its logs are appended to and its checkpoints pruned in place
        if args.config:
            raise InputError("--config", None, "cannot be given with --resume: a resumed run keeps its saved config",
                             "change single keys with --set KEY=VALUE")  # fmt: skip
        if args.run_dir:  # it was ignored: the run went on in --resume's directory
            raise InputError("--run-dir", None, f"cannot be given with --resume: the run continues in {run_dir}",
                             "leave --run-dir out (to start a new run elsewhere, leave --resume out)")  # fmt: skip
        saved_notes = read_saved_notes(run_dir)
        for note in saved_notes:
            print(f"note: {note} (saved with the run)", file=sys.stderr)
        resolved = resolve_config(None, overrides, base=saved_cfg)
        check_saved_trust(resolved, run_dir / "config.json")  # no code or credential target from the run dir
        for note in resolved.notes:
            print(f"note: {note}", file=sys.stderr)
        cfg = anchor_paths(resolved.config)  # a moved model given anew is saved absolute, as a new run's
        check_starting_model(run_dir, saved_cfg, cfg, "--model" if args.model else "model.path")
        check_eval_set(run_dir, saved_cfg, cfg)
        preflight(cfg)
        pin_kernels(cfg)
        _write_notes(run_dir, [*saved_notes, *(n for n in resolved.notes if n not in saved_notes)])
        check_training_precision(cfg.model.dtype, cfg.algo.lora_rank)
        return cfg, run_dir, None
    resolved = resolve_config(args.config, overrides)
    for note in resolved.notes:  # a TRL/verl name read as tirl's: say which key it became
        print(f"note: {note}", file=sys.stderr)
    cfg = anchor_paths(resolved.config)  # the saved config names the same files from any directory (--resume)
    if not args.run_dir:
        _check_run_name(cfg.trainer.run_name)
    preflight(cfg)  # an unknown env, tools the model cannot render: before any directory or model
    pin_kernels(cfg)
    check_training_precision(cfg.model.dtype, cfg.algo.lora_rank)  # before the run directory exists
    run_dir = Path(args.run_dir) if args.run_dir else _new_run_dir(cfg)
    if args.run_dir:  # never overwrite an existing run: its metrics, trajectories and config
        check_output_dir(run_dir)
        if any((run_dir / name).exists() for name in ("config.json", "metrics.jsonl", "checkpoints")):
            raise InputError(str(run_dir), None, "already holds a run",
                             f"continue it with `tirl train --resume {run_dir}`, or give a new --run-dir")  # fmt: skip
        _refuse_foreign_files(run_dir)
    created = None if run_dir.exists() else _first_missing(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_notes(run_dir, resolved.notes)
    return cfg, run_dir, created


#: The ``[env]`` keys that choose the evaluation tasks (what ``eval_before.json`` was measured on).
EVAL_SET_KEYS = ("name", "tasks_file", "prompt_key", "answer_key", "difficulty", "eval_size", "eval_split", "seed",
                 "chain_min", "chain_max")  # fmt: skip


def check_eval_set(run_dir: Path, saved: dict[str, Any], cfg: TirlConfig) -> None:
    """Refuse a resume that changes the evaluation set under a run's ``eval_before.json``.

    ``--resume RUN --set env.eval_size=4`` on a run evaluated on 2 tasks printed "4 tasks: 0.500 before -> 0.750
    after", the before figure measured on other tasks. Only the keys of :data:`EVAL_SET_KEYS`, only while the run
    will evaluate after training (``trainer.eval_before_after``) and has its evaluation before.
    """
    if not cfg.trainer.eval_before_after or not (run_dir / run_files.EVAL_BEFORE).is_file():
        return
    old_env = saved.get("env")
    if not isinstance(old_env, dict):
        old_env = {}
    new_env = config_to_dict(cfg)["env"]
    for key in EVAL_SET_KEYS:
        if key in old_env and old_env[key] != new_env[key]:
            old = json.dumps(old_env[key])
            raise ConfigError(
                f"env.{key}={json.dumps(new_env[key])} changes the evaluation set of {run_dir} (its env.{key} is "
                f"{old}): its {run_files.EVAL_BEFORE} was measured on the run's set, so before and after would not "
                f"be the same tasks — keep env.{key}={old}, or add --set trainer.eval_before_after=false and "
                f"evaluate with `tirl eval --model {run_dir}`"
            )


def check_starting_model(run_dir: Path, saved: dict[str, Any], cfg: TirlConfig, given: str) -> None:
    """Refuse a resume that names another starting model than the run's (``--model``, ``--set model.path``).

    A resumed run trains on from its checkpoint's weights; ``model.path`` is its starting model: the KL reference
    (``algo.kl_coef > 0``) and the model its ``eval_before.json`` measured. ``--resume RUN --model M`` wrote
    ``M`` into the run's config.json and took it as the reference. Allowed: the same directory spelled another
    way, and any path when the saved one no longer exists (the model moved: the new path says where it is now).
    """
    model = saved.get("model")
    old = model.get("path") if isinstance(model, dict) else None
    new = cfg.model.path
    if new == old:
        return
    if isinstance(old, str) and (not Path(old).exists() or (new and Path(old).resolve() == Path(new).resolve())):
        return  # moved, or the same directory
    started = f"started from {old}" if isinstance(old, str) else "started from the built-in model"
    raise InputError(given, None, f"{run_dir} {started}: a resumed run trains on from its checkpoint's weights, "
                     "and its starting model is its KL reference and the model its eval_before.json measured",
                     f"leave it out (to train {new}, start a new run: tirl train --model {new})")  # fmt: skip


def _refuse_foreign_files(run_dir: Path) -> None:
    """Refuse a ``--run-dir`` that holds files no run wrote (``--run-dir runs`` wrote a run among the other runs).

    Allowed: the names a run writes (:func:`tirl.trainer.run_files.is_run_file`): a lock left by an interrupted
    start, and ``tirl ablate``'s ``train.log`` and shared ``eval_before.json``, written before the run starts.
    """
    if not run_dir.is_dir():
        return
    others = sorted(p.name for p in run_dir.iterdir() if not run_files.is_run_file(p.name))
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise InputError(str(run_dir), None, f"is not empty ({shown}): a run's files would land among them",
                         f"give a new or empty --run-dir; to keep runs under {run_dir}, use --set "
                         f"trainer.run_dir={run_dir}")  # fmt: skip


def pin_kernels(cfg: TirlConfig) -> None:
    """``trainer.kernels=portable``: pin the CPU kernels in this process before the model's first kernel.

    :func:`tirl.models.kernels.pin_portable` sets :data:`~tirl.models.kernels.PORTABLE_ENV`; local ``--nproc``
    ranks start later from this process and inherit it. Ray workers do not (their environment is the cluster's),
    so that combination is refused rather than run on kernels the run's record would not name.
    """
    if cfg.trainer.kernels != "portable":
        return
    if cfg.trainer.backend == "ray":
        pinned = " ".join(f"{k}={v}" for k, v in PORTABLE_ENV.items())
        raise ConfigError(
            "trainer.kernels=portable does not reach Ray workers: set " + pinned + " in the cluster's worker "
            "environment and keep trainer.kernels=native, or train with trainer.backend=local"
        )
    pin_portable("trainer.kernels=portable")


NOTES_FILE = run_files.NOTES


def read_saved_notes(run_dir: Path) -> list[str]:
    """The alias notes saved with a run (``[]`` when it used tirl's names only)."""
    path = run_dir / NOTES_FILE
    if not path.is_file():
        return []
    data = read_json(path)
    notes = data.get("notes") if isinstance(data, dict) else None
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise InputError(str(path), None, 'is not {"notes": [strings]}', "restore it, or delete it (notes only)")
    return notes


def _write_notes(run_dir: Path, notes: list[str]) -> None:
    """Keep the notes on TRL/verl names beside the config they made (``config.json`` holds tirl's names)."""
    if notes:
        write_text(run_dir / NOTES_FILE, json.dumps({"notes": notes}, indent=1) + "\n")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``tirl train``."""
    cfg, run_dir, created = resolve(args)  # config errors come before the heavy imports below (~1 s, not ~15 s)
    for warning in start_warnings(cfg):
        print(f"warning: {warning}", file=sys.stderr)
    with StopSignals() as stop:
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # no per-load/per-save bars from transformers in the run's output
            with hold_run_dir(run_dir):  # one writer per run directory: a second --resume of a running run is refused
                return _run_locked(args, cfg, run_dir, created, stop)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM: say what is left and how to go on (the CLI alone: "interrupted")
            stop.settle()  # a signal now would only cut this report short
            removed = _remove_unused(run_dir, created, bool(args.resume))
            first = stop.first or signal.SIGINT
            word = "terminated (SIGTERM)" if first == signal.SIGTERM else "interrupted"
            print(interrupted_line(run_dir, removed=removed, word=word), file=sys.stderr)
            return 128 + first  # 130 / 143, as a shell reports them


def interrupted_line(run_dir: Path, *, removed: bool, word: str = "interrupted") -> str:
    """What an interrupted ``tirl train`` prints: what the run directory kept and the command that continues it."""
    if removed:
        return f"{word} before training started: {run_dir} was removed (nothing to keep)"
    # run_files, not trainer.checkpoint: a Ctrl-C in torch's import leaves a half-imported torch that a second
    # `import torch` fails on (two chained tracebacks instead of this line)
    steps = [step for step, path in run_files.step_dirs(run_dir) if path.is_dir()]
    go_on = f"`tirl train --resume {run_dir}`"
    if not steps:
        return f"{word} before the first checkpoint of {run_dir}: {go_on} starts it again at step 1"
    return f"{word}: {run_dir} keeps checkpoint step-{steps[-1]} — continue it with {go_on}"


def _remove_unused(run_dir: Path, created: Path | None, resume: bool) -> bool:
    """Remove a new run directory that holds nothing but its set-up files (and the parents this call made).

    True when it was removed: a set-up mistake (bad --model, missing server) or Ctrl-C before anything ran leaves
    no empty run directory behind. A resumed run is never removed.
    """
    leftover = {p.name for p in run_dir.iterdir()}
    if resume or not leftover <= {"config.json", NOTES_FILE, "pipeline_trace.jsonl", "ranks", LOCK_NAME}:
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in run_dir.parents:  # and the parents this call made (runs/), while they are empty
        if created is None or not parent.is_relative_to(created) or any(parent.iterdir()):
            break
        parent.rmdir()
    return True


def _run_locked(
    args: argparse.Namespace, cfg: TirlConfig, run_dir: Path, created: Path | None, stop: StopSignals
) -> int:
    """The run itself, under the run directory's lock."""
    from tirl.trainer.run import find_resume

    # resume: the checkpoint is found (and verified) before anything starts or is written, once for every rank
    tc = cfg.trainer
    start = None
    if args.resume:
        start = find_resume(run_dir, tc.checkpoint_every, tc.steps, eval_before=tc.eval_before_after,
                            sampled=tc.eval_samples > 0)  # fmt: skip
    try:
        summary = _train(cfg, run_dir, args, start, stop)
    except TirlError:
        _remove_unused(run_dir, created, bool(args.resume))
        raise
    if "eval/accuracy_before" in summary:
        print(
            f"eval accuracy ({counted(summary['eval/n'], f'{_split(cfg)} {run_label(cfg)} task')}): "
            f"{summary['eval/accuracy_before']:.3f} before -> {summary['eval/accuracy_after']:.3f} after"
        )
        paired = summary.get("eval/paired")
        if paired:
            from tirl.rollout.evaluation import PairedChange

            print(f"  task by task: {PairedChange.from_dict(paired).line()}")
        from tirl.trainer.sampled_eval import summary_lines

        for line in summary_lines(summary):  # trainer.eval_samples: the change at the training sampling
            print(line)
    for line in summary.get("report_warnings", []):  # what `tirl report` says on stderr about this run's files
        print(line, file=sys.stderr)
    if "training_verdict" in summary:  # what `tirl diagnose training` says of metrics.jsonl, in one line
        print(summary["training_verdict"])
    print(f"run directory: {run_dir}")
    return 0


def _train(cfg: TirlConfig, run_dir: Path, args: argparse.Namespace, start: Any, stop: StopSignals) -> dict[str, Any]:
    """The run in this process (``--nproc 1``), with local follower ranks, or on Ray Train workers.

    ``start`` is the verified checkpoint a resume continues from (:func:`tirl.trainer.run.find_resume`), or None;
    ``stop`` runs the coroutine (the first signal cancels it) and kills the local ranks at a second signal.
    """
    from tirl.trainer.run import train_run

    progress = not args.no_progress
    if args.nproc == 1:
        return stop.run(train_run(cfg, run_dir, resume_from=start, progress=progress))
    from tirl.distributed.launch import LocalRanks, check_world
    from tirl.models.loading import check_model_files

    model_path = start.model_dir if start else None
    if model_path is None and cfg.model.path:
        check_model_files(cfg.model.path)  # here, not once per rank after the ranks start (20+ s on Ray Train)
    if cfg.trainer.backend == "ray":  # every rank a Ray Train worker; rank 0 runs the recipe
        from tirl.distributed.ray_ranks import train_on_ray

        if args.master_port:
            raise InputError("--master-port", None, "is not used with --backend ray (Ray Train picks the rendezvous)",
                             "leave --master-port out")  # fmt: skip
        check_world(cfg, args.nproc, 0)
        # rank 0 finds the same verified checkpoint again on its worker (the run directory is shared)
        return train_on_ray(
            cfg, run_dir, args.nproc, resume=bool(args.resume), progress=progress, model_path=model_path
        )
    # ranks 1..N-1 start now and wait for rank 0 (this process) at the rendezvous
    ranks = LocalRanks.launch(cfg, run_dir, args.nproc, args.master_port, model_path)
    stop.on_force(ranks.kill_now)  # a second signal: no grace for the followers, wherever rank 0's clean-up is
    try:
        return stop.run(train_run(cfg, run_dir, resume_from=start, progress=progress, ranks=ranks))
    except BaseException:  # also before the run took the ranks over (it closes them itself: then this does nothing)
        ranks.close(abort=True)
        raise
