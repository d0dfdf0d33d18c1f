"""``tirl audit TRAJ.jsonl|RUN_DIR``: void turns, tool errors and, for test-judged rewards, the verdict checks.

Void turns with reasons, the detector-too-eager rate, turn/length/tool-error stats and, for test-judged
rewards (swe-lite), the checks of :mod:`tirl.diagnostics.verdicts`; ``--rejudge`` replays the rewarded
episodes (:mod:`tirl.envs.swe_replay`).

A run directory's own ``config.json`` gives the action rule (as the run judged its turns) and, for
``--rejudge``, the env, the sandbox and the task file; ``--config`` does the same for a bare file
(a run directory and ``--config`` together are refused). Without either, the rule is tirl's default and
the re-judge replays on swe-lite's preset, under ``env.reward_mode=fraction`` when a recorded reward lies
strictly between 0 and 1 (only a fraction run records one), else ``all``. Exit status: 0, or 1 when
``--rejudge`` finds a reward that is not earned (``outside_sources`` or ``not_reproduced``); bad input is one
``error:`` line, exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tirl.commands.filter import add_rule_arguments, rule_options
from tirl.config import TirlConfig, config_from_dict, load_config, resolve_config
from tirl.diagnostics.audit import audit_trajectories
from tirl.diagnostics.render import print_audit
from tirl.envs.base import EnvError
from tirl.errors import InputError, SetupError
from tirl.filters import rules_with_options
from tirl.jsonl import dumps_json, read_json, read_trajectories
from tirl.parsing import ParseRules
from tirl.types import Trajectory

if TYPE_CHECKING:  # the replay imports the env and the sandbox, loaded only with --rejudge
    from tirl.envs.swe_replay import Rejudgement

SWE_ENVS = ("swe-lite", "skyrl-gym:swe-lite")
SUSPECT = ("outside_sources", "not_reproduced")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``tirl audit`` (the rule options are those of ``tirl filter``)."""
    parser.add_argument("input", type=Path, help="trajectory JSONL (or a run directory with trajectories.jsonl)")
    add_rule_arguments(parser)
    parser.add_argument(
        "--rejudge",
        action="store_true",
        help="swe-lite: replay every rewarded trajectory in the sandbox and judge its edits on the task's own "
        "files alone (exit 1 when a reward is not earned)",
    )
    parser.add_argument("--json", action="store_true", help="print the audit as JSON")


def _run_config(args: argparse.Namespace) -> tuple[TirlConfig | None, str]:
    """The config the trajectories were made under (``None``: not known) and where it came from."""
    saved = args.input / "config.json" if args.input.is_dir() else None
    if saved is not None and (saved.exists() or saved.is_symlink()):
        if args.config is not None:
            fix = "drop --config: a run's trajectories are audited under the config that made them"
            raise InputError(str(args.config), None, f"{args.input} is a run directory with its own config.json", fix)
        fix = "restore the config.json tirl wrote, or audit the trajectories file itself"
        if not saved.is_file():  # a FIFO would hang the read; skipping it would audit under the default rule
            raise InputError(str(saved), None, "cannot read the run's config: it is not a regular file", fix)
        try:
            data = read_json(saved, missing_fix=fix)
        except InputError as exc:
            raise InputError(str(saved), None, f"cannot read the run's config: {exc.problem}", fix) from None
        return config_from_dict(data), str(saved)
    if args.config is not None:
        return load_config(args.config), str(args.config)
    return None, ""


def _replay_config(cfg: TirlConfig | None, where: str) -> TirlConfig:
    if cfg is None:
        return resolve_config(None, ["env.name=swe-lite"]).config
    if cfg.env.name not in SWE_ENVS:
        raise InputError(where, None, f"--rejudge replays swe-lite episodes, and this config's env is "
                         f"{cfg.env.name!r}", "drop --rejudge (its rewards are answer matches: see the "
                         "detector-too-eager check), or give the swe-lite run's config")  # fmt: skip
    return cfg


def _fraction_run(trajectories: list[Trajectory]) -> bool:
    """Whether a reward strictly between 0 and 1 is recorded: only ``env.reward_mode=fraction`` gives one."""
    return any(0.0 < float(t.reward or 0.0) < 1.0 for t in trajectories)


def _answer_judged(trajectories: list[Trajectory]) -> bool:
    """Whether every rewarded trajectory was judged by its answer (``info.eval.expected``: tir-math, tir-chain)."""
    rewarded = [t for t in trajectories if float(t.reward or 0.0) > 0.0]
    evals = [t.info.get("eval") if isinstance(t.info, dict) else None for t in rewarded]
    return bool(evals) and all(isinstance(e, dict) and "expected" in e for e in evals)


def _rejudge(trajectories: list[Trajectory], cfg: TirlConfig, rules: ParseRules) -> list[Rejudgement]:
    """Replay the rewarded trajectories on ``cfg``'s sandbox and tasks (:mod:`tirl.envs.swe_replay`)."""
    from tirl.envs.registry import load_tasks
    from tirl.envs.swe_lite import SweLiteEnv
    from tirl.envs.swe_replay import rejudge_rewarded
    from tirl.sandbox import create_sandbox

    tasks = None
    if cfg.env.tasks_file:
        tasks = {t.id: t for t in load_tasks(cfg.env, 10**9)}

    async def main() -> list[Rejudgement]:
        sandbox = create_sandbox(cfg.sandbox)
        try:
            return await rejudge_rewarded(
                trajectories,
                lambda: SweLiteEnv(
                    sandbox=sandbox, max_turns=cfg.env.max_turns, rules=rules, reward_mode=cfg.env.reward_mode
                ),  # a fraction reward is replayed as one
                tasks,
            )
        finally:
            await sandbox.close()

    try:
        return asyncio.run(main())
    except EnvError as exc:  # the sandbox itself broke: no verdict can be trusted, so none is printed
        fix = "try `tirl sandbox exec` on a small file, or set sandbox.backend"
        raise SetupError(f"the sandbox failed while re-judging: {exc}; {fix}") from None


def run(args: argparse.Namespace) -> int:
    """Audit the file under the run's (or ``--config``'s) rule, with the rule options applied."""
    path = args.input / "trajectories.jsonl" if args.input.is_dir() else args.input
    if args.input.is_dir() and not path.is_file():  # it said: RUN/x/trajectories.jsonl does not exist
        raise InputError(str(args.input), None, "is a directory without trajectories.jsonl",
                         "give a trajectory JSONL file or a run directory that `tirl train` wrote")  # fmt: skip
    cfg, where = _run_config(args)
    options = rule_options(args)
    replay_cfg = _replay_config(cfg, where) if args.rejudge else None
    rules = rules_with_options(cfg if cfg is not None else load_config(None), options)
    trajectories = [t for _, t in read_trajectories(path)]
    if not trajectories:  # it printed a table of zeros, exit 0
        raise InputError(str(path), None, "holds no trajectories (a run writes them from its first step on)",
                         "give a trajectory JSONL with at least one line")  # fmt: skip
    if replay_cfg is not None and cfg is None and _answer_judged(trajectories):  # it said "unresolved", exit 0
        raise InputError(str(path), None, "--rejudge replays swe-lite episodes, and these were judged by their "
                         "answers (info.eval.expected: tir-math, tir-chain)", "drop --rejudge (their rewards are "
                         "answer matches: see the detector-too-eager check), or give the swe-lite run's config with "
                         "--config")  # fmt: skip
    if replay_cfg is not None and cfg is None and _fraction_run(trajectories):  # a bare file of a fraction run
        replay_cfg = replace(replay_cfg, env=replace(replay_cfg.env, reward_mode="fraction"))
    report = audit_trajectories(trajectories, rules)
    data = report.to_dict()
    suspect = 0
    if replay_cfg is not None:
        from tirl.diagnostics.verdicts import rejudge_summary

        replay_rules = rules_with_options(replay_cfg, options)
        summary = rejudge_summary(_rejudge(trajectories, replay_cfg, replay_rules))
        data["rejudged"] = summary
        suspect = sum(summary["by_status"][s] for s in SUSPECT)
    if args.json:
        print(dumps_json(data, indent=2))
    else:
        print_audit(data, str(path))
    return 1 if suspect else 0
