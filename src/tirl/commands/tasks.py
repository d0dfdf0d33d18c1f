"""``tirl tasks export``: write an environment's tasks as files a user (or SkyRL) can read and edit.

``tirl tasks export --env swe-lite --out DIR`` writes swe-lite tasks into the
new directory ``DIR`` (:func:`tirl.integrations.skyrl_swe.export_tasks`):
``skyrl.jsonl`` (SkyRL-style rows, ``env_class: "swe-lite"``, for ``--env
skyrl-gym:swe-lite`` or ``--env skyrl-gym``), ``swe-lite.jsonl`` (the same tasks in swe-lite's own JSONL,
for ``--env swe-lite``) and each generated task's ``repos/<id>/`` and
``hidden/<id>/``. The tasks are the curriculum's (``env.difficulty=2``, the
swe-lite preset: ``--split`` and ``--seed`` pick them as
:func:`~tirl.envs.tasks.swe_curriculum.generate_curriculum` does), the 33
planted bugs (``--set env.difficulty=1``), or a user's swe-lite JSONL
(``--set env.tasks_file=FILE``: its repositories are referenced, not copied).
Only swe-lite exports; nothing is overwritten (``DIR`` must be new or empty).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tirl tasks``."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="export")
    ex = sub.add_parser("export", help="write tasks as SkyRL-style and swe-lite JSONL files with their repositories")
    ex.add_argument("--env", choices=("swe-lite",), default="swe-lite", help="the environment whose tasks to write")
    ex.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) directory to write into")
    ex.add_argument("--n", type=int, default=8, metavar="N", help="number of tasks (default 8)")
    ex.add_argument("--seed", type=int, default=0, metavar="S", help="the draw's seed (default 0)")
    ex.add_argument(
        "--split",
        choices=("train", "heldout", "validation"),
        default=None,
        help="curriculum split to draw from (default train; env.difficulty=2 only)",
    )
    ex.add_argument(
        "--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[], help="dotted config override"
    )


#: the config keys an export reads (its --set takes these only)
READ = ("env.difficulty", "env.tasks_file")


def run(args: argparse.Namespace) -> int:
    """Resolve the tasks, then write them (all or nothing)."""
    from tirl.commands import flag_overrides
    from tirl.config import resolve_config
    from tirl.config_ranges import check_flag
    from tirl.errors import ConfigError
    from tirl.integrations.skyrl_swe import export_tasks

    if args.n < 1:
        raise ConfigError(f"--n {args.n}: export at least one task — use --n 1 or more")
    check_flag("--n", "env.eval_size", args.n)  # 1 to 1,000,000 (99999999999 ran without end)
    check_flag("--seed", "env.seed", args.seed)  # the env's seed range, as tirl eval --seed
    if any(o.split("=", 1)[0].strip() == "env.name" for o in args.overrides):  # --env's value would win silently
        raise ConfigError("--set env.name: tirl tasks export names its env with --env — use --env NAME")
    resolved = resolve_config(None, flag_overrides(args.overrides, [("--env", "env.name", args.env)]))
    for key, source in resolved.sources.items():  # any other key was accepted and ignored
        if source == "--set" and key not in (*READ, "env.name"):  # env.name: --env's own (--set of it: refused above)
            hint = " (the draw's seed is --seed)" if key == "env.seed" else ""
            raise ConfigError(f"--set {key}: tirl tasks export reads only {' and '.join(READ)}{hint} — drop it")
    env = resolved.config.env
    if env.tasks_file:
        from tirl.envs.tasks.swe_gen import load_swe_tasks

        if args.split is not None:
            raise ConfigError("--split draws from the generated curriculum, not env.tasks_file — drop --split")
        tasks = load_swe_tasks(env.tasks_file)[: args.n]
    elif env.difficulty >= 2:
        from tirl.envs.tasks.swe_curriculum import SPEC_DIFFICULTY, generate_curriculum

        spec = env.difficulty >= SPEC_DIFFICULTY
        tasks = generate_curriculum(args.n, seed=args.seed, split=args.split or "train", spec=spec)
    else:
        from tirl.envs.tasks.swe_gen import generate_swe_tasks

        if args.split is not None:
            raise ConfigError("--split needs the curriculum (env.difficulty=2); the 33 planted bugs have no splits")
        tasks = generate_swe_tasks(args.n, seed=args.seed)
    done = export_tasks(tasks, args.out)
    print(f"wrote {done.tasks} swe-lite tasks to {done.out}/")
    print(f"  SkyRL-style rows: tirl train --env skyrl-gym:swe-lite --set env.tasks_file={done.skyrl_file}")
    print(f"  swe-lite JSONL:   tirl train --env swe-lite --set env.tasks_file={done.swe_file}")
    return 0
