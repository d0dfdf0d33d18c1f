r"""swe-lite: fix a planted bug in a small Python repository with bash; hidden tests give the reward.

A SkyRL-v0-style task at laptop scale. The three calls are the three
pipeline stages:

``reset(task)`` — Initializer
    Materialises the task's template once into the cache, copies it into a
    fresh workspace (timed: ``info["copy_s"]``, ``info["init_s"]``,
    ``info["template_cached"]``, ``info["workspace"]``) and returns
    ``[system, user]``.

``step(message)`` — Agent Runner
    Judged by :func:`tirl.parsing.judge_message` (the void-turn rule):

    * executable ``bash``/``sh`` blocks run with ``bash -c`` in the sandbox,
      with the workspace as the writable working directory; ``python`` blocks
      run as ``python3 -`` (a script on stdin, so the repository is
      importable); blocks run in order and their outputs form one tool
      message (``"```output\n…\n```"``, with ``[exit status N]`` on failure);
    * **submitting** ends the episode (``terminated``, reason ``submitted``):
      a shell block whose last non-blank line is ``submit`` (lines before it
      run first), or any final answer such as ``<answer>submit</answer>``;
      function calling: ``bash`` with ``{"command": ...}`` and ``submit``;
    * a void turn ends the episode (reason ``void``); reaching ``max_turns``
      truncates it (``max_turns``); a message longer than ``max_action_chars``
      truncates it (``overlong``); a sandbox failure truncates it (``error``).
      The call order, this dispatch and the limits are
      :class:`~tirl.envs.tool_env.ToolEnv`'s; this module writes the
      workspace, the commands and the hidden-test reward.

``evaluate()`` — Evaluator
    Generated tasks, and JSONL tasks with ``hidden_tests`` and no
    ``test_command``, go to the **judge** (:mod:`tirl.envs.scorer`): pytest
    runs the hidden tests in a process that never imports the workspace, and
    the code under test runs in a fresh subject process per test that only
    returns values; the verdict is a line that carries a per-run secret the
    agent's code cannot read. The reward is 1.0 when every hidden test passes
    (``reward_mode="all"``; a skipped test is not a pass, an ``xfail`` test that
    fails counts nowhere), or the fraction passed (``"fraction"``), with
    ``eval_timeout_s``. A failure the episode causes is its reward 0 with
    ``info["eval_failure"]`` (``workspace_full``, ``staging_failed``,
    ``no_verdict``, ``timed_out``), never an exception; a broken sandbox raises
    :class:`~tirl.envs.base.EnvError`. It runs whether or not the agent
    submitted. JSONL tasks with a ``test_command`` run it with ``bash``
    instead, with pytest on ``PYTHONPATH``; the reward then comes from pytest's
    summary line, or from the exit status when there is none.

Not covered: a ``test_command``'s verdict is as forgeable as the command (the
code under test runs inside it); what the judge does not cover is listed in
:mod:`tirl.envs.scorer_runner` and docs/sandbox.md; Python state does not
persist between commands (files do); ``python`` may not exist in the sandbox,
``python3`` does.
"""

from __future__ import annotations

import functools
import re
import secrets
import shlex
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Unpack

from tirl.config import EnvConfig
from tirl.envs.base import EnvError, EpisodeOverError, EvalResult, Task
from tirl.envs.common import block_lang
from tirl.envs.observation import clip
from tirl.envs.scorer import EVAL_DIR, Judgement, hidden_helpers, judge, shadowed_modules, staging_failure
from tirl.envs.tasks.swe_gen import SHADOW_FIX, expert_solution, generate_swe_tasks, load_swe_tasks, shadow_problem
from tirl.envs.tool_env import ToolEnv, ToolEnvOptions, call_arguments
from tirl.envs.workspace import Workspace, clear_path, default_cache_dir, materialise, provision, pytest_bundle
from tirl.parsing import ActionKind, TurnVerdict
from tirl.sandbox.base import ExecResult, Lang
from tirl.types import Message, TerminationReason, ToolCall

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "SweLiteEnv",
    "expert_solution",
    "generate_swe_tasks",
    "load_swe_tasks",
    "parse_pytest_summary",
    "task_source",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are in the root of a Python repository. Run shell commands in ```bash blocks; you will see "
    "their output. Use python3. When the bug is fixed, reply with a ```bash block that contains only: submit"
)
SUBMIT = "submit"

# at most 12 digits, never the tail of a longer number: a test command's output is the agent's to shape, and a
# 5,000-digit count made int() raise inside the evaluator
_SUMMARY_RE = re.compile(r"(?<!\d)(\d{1,12}) (passed|failed|errors?|skipped)")


def parse_pytest_summary(output: str) -> dict[str, int] | None:
    r"""Counts from pytest's last summary line (``"2 failed, 3 passed in 0.05s"``), or None.

    >>> parse_pytest_summary("..F\n1 failed, 2 passed in 0.01s")
    {'passed': 2, 'failed': 1, 'errors': 0, 'skipped': 0}
    """
    for line in reversed(output.splitlines()):
        if " in " in line and _SUMMARY_RE.search(line):
            counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
            for number, word in _SUMMARY_RE.findall(line):
                counts["errors" if word.startswith("error") else word] += int(number)
            return counts
    return None


@functools.lru_cache(maxsize=256)
def _shadowed(repo: Path, hidden: Path) -> tuple[str, ...]:
    """:func:`~tirl.envs.scorer.shadowed_modules` once per template (templates do not change)."""
    return tuple(shadowed_modules(repo, hidden))


@functools.lru_cache(maxsize=256)
def _helpers(repo: Path, hidden: Path) -> tuple[str, ...]:
    """:func:`~tirl.envs.scorer.hidden_helpers` once per template."""
    return tuple(hidden_helpers(repo, hidden))


def _split_submit(body: str) -> tuple[str, bool]:
    """``(commands before, True)`` when the block's last non-blank line is ``submit``."""
    lines = body.rstrip().split("\n")
    if lines and lines[-1].strip() == SUBMIT:
        return "\n".join(lines[:-1]), True
    return body, False


class SweLiteEnv(ToolEnv):
    """One swe-lite episode (create one per trajectory; share the sandbox)."""

    name = "swe-lite"
    answer_reason = TerminationReason.SUBMITTED  # any final answer submits

    takes_reward_mode: ClassVar[bool] = True  # make_env passes env.reward_mode
    defaults: ClassVar[ToolEnvOptions] = {
        "max_turns": 10,
        "system_prompt": DEFAULT_SYSTEM_PROMPT,
        "max_obs_chars": 2000,
    }

    def __init__(
        self,
        *,
        command_timeout_s: float | None = None,
        eval_timeout_s: float = 60.0,
        reward_mode: str = "all",
        cache_dir: str | Path | None = None,
        work_root: str | Path | None = None,
        keep_workspace: bool = False,
        **options: Unpack[ToolEnvOptions],
    ) -> None:
        """``options``: :class:`~tirl.envs.tool_env.ToolEnvOptions`; defaults here: 10 turns, 2000 output chars."""
        if reward_mode not in ("all", "fraction"):
            raise ValueError(f"reward_mode must be 'all' or 'fraction', got {reward_mode!r}")
        super().__init__(**options)
        self.command_timeout_s = command_timeout_s
        self.eval_timeout_s = eval_timeout_s
        self.reward_mode = reward_mode
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.work_root = Path(work_root) if work_root is not None else None
        self.keep_workspace = keep_workspace
        self._workspace: Workspace | None = None
        self._hidden: Path | None = None
        self._helpers: tuple[str, ...] = ()  # the hidden tests' own modules, imported by the judge itself

    @property
    def workspace(self) -> Path | None:
        """The episode's working copy (None before reset and after close)."""
        return None if self._workspace is None else self._workspace.path

    async def setup(self, task: Task) -> dict[str, Any]:
        """Materialise the template (cached) and copy it into a fresh workspace (Initializer stage).

        A task for the judge whose repository provides a module the judge imports itself is refused
        (:class:`~tirl.envs.base.EnvError`): its hidden tests would run on the judge's copy.
        """
        template = materialise(task, self.cache_dir)
        judged = template.hidden is not None and not isinstance(task.data.get("test_command"), str)
        if judged and (shadowed := _shadowed(template.repo, template.hidden)):
            raise EnvError(f"task {task.id!r}: {shadow_problem(list(shadowed))}; {SHADOW_FIX}")
        self._workspace = provision(template, self.work_root)
        self._hidden = template.hidden
        self._helpers = _helpers(template.repo, template.hidden) if judged and template.hidden else ()
        return {
            "copy_s": round(self._workspace.copy_s, 6),
            "template_cached": template.cached,
            "workspace": str(self._workspace.path),
        }

    async def act(self, verdict: TurnVerdict, info: dict[str, Any]) -> tuple[list[Message], bool]:
        """Run the turn's commands in the workspace; ``submit`` ends the episode after the lines before it."""
        if verdict.kind is ActionKind.CODE:
            commands, submitted = self._commands_from_blocks([(block_lang(b), b.body) for b in verdict.code])
        else:
            commands, submitted = self._commands_from_calls(verdict.tool_calls)
        observation: list[Message] = []
        if commands:
            assert self._workspace is not None
            observation = await self.run_commands(
                commands,
                info,
                timeout_s=self.command_timeout_s,
                workdir=self._workspace.path,
                compact_errors=False,
                show_status=True,
            )
        return observation, submitted

    @staticmethod
    def _commands_from_blocks(blocks: list[tuple[Lang, str]]) -> tuple[list[tuple[Lang, str]], bool]:
        commands: list[tuple[Lang, str]] = []
        for lang, body in blocks:
            if lang == "bash":
                before, submitted = _split_submit(body)
                if before.strip():
                    commands.append(("bash", before))
                if submitted:
                    return commands, True
            else:
                marker = f"TIRL_PY_{secrets.token_hex(6)}"
                commands.append(("bash", f"python3 - <<'{marker}'\n{body}\n{marker}"))
        return commands, False

    @staticmethod
    def _commands_from_calls(calls: tuple[ToolCall, ...]) -> tuple[list[tuple[Lang, str]], bool]:
        commands: list[tuple[Lang, str]] = []
        for call in calls:
            if call.name == SUBMIT:
                return commands, True
            command = call_arguments(call).get("command")
            if call.name in ("bash", "shell") and isinstance(command, str):
                commands.append(("bash", command))
            else:
                text = f"[unknown tool: {call.name}; use bash or submit]"
                commands.append(("bash", f"printf '%s\\n' {shlex.quote(text)}"))  # the name is text, never expanded
        return commands, False

    async def score(self, task: Task) -> EvalResult:
        """Run the hidden tests (Evaluator stage): the judge for generated tasks, ``test_command`` for JSONL ones."""
        if self._workspace is None:
            raise EpisodeOverError("evaluate called before reset or after close")
        start = time.perf_counter()
        ws = self._workspace.path
        bundle = pytest_bundle(self.cache_dir)  # the host's cache: a failure here is infrastructure
        command = task.data.get("test_command")
        if not isinstance(command, str):
            if self._hidden is None:
                raise EnvError(f"task {task.id!r} has no hidden tests")
            sandbox = await self.sandbox()
            judged = await judge(sandbox, ws, self._hidden, bundle, self.eval_timeout_s, self._helpers)
            return self._judged(judged, time.perf_counter() - start)
        try:
            self._stage_command(ws, bundle)
        except OSError as exc:  # the agent filled or broke its workspace: its failure, reward 0
            return self._judged(Judgement(None, staging_failure(exc), None, str(exc)), time.perf_counter() - start)
        script = (
            f'export PYTHONPATH="{EVAL_DIR}/pytest.zip:.${{PYTHONPATH:+:$PYTHONPATH}}" '
            f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1\n{command}"
        )
        sandbox = await self.sandbox()
        result = await sandbox.run(script, lang="bash", timeout_s=self.eval_timeout_s, workdir=ws)
        if result.error is not None:
            raise EnvError(f"sandbox error while running the hidden tests: {result.error}")
        return self._reward(result, parse_pytest_summary(result.stdout), time.perf_counter() - start)

    def _stage_command(self, ws: Path, bundle: Path) -> None:
        eval_dir = ws / EVAL_DIR
        clear_path(eval_dir)  # whatever the agent left there (a link, a file, a deep tree) goes; never followed
        eval_dir.mkdir()
        shutil.copy(bundle, eval_dir / "pytest.zip")
        if self._hidden is not None:
            dest = ws / self._hidden.name
            clear_path(dest)
            shutil.copytree(self._hidden, dest, symlinks=True)

    def _judged(self, judged: Judgement, eval_s: float) -> EvalResult:
        """The reward of a judge's run; no verdict (or no run) is reward 0 with ``eval_failure`` saying why."""
        verdict = judged.verdict
        result = replace(judged.result, stdout="") if judged.result else ExecResult("", judged.detail, None)
        if verdict is None:
            counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
        else:
            counts = {"passed": verdict.passed, "failed": verdict.failed, "errors": verdict.errors}
            counts["skipped"] = verdict.skipped
        timed_out = result.timed_out or (verdict is not None and verdict.timed_out)
        evaluated = self._reward(result, counts, eval_s, timed_out=timed_out)
        evaluated.info["eval_failure"] = judged.failure
        if verdict is not None and verdict.failures:
            evaluated.info["tests_failing"] = list(verdict.failures)
        return evaluated

    def _reward(
        self, result: ExecResult, counts: dict[str, int] | None, eval_s: float, *, timed_out: bool | None = None
    ) -> EvalResult:
        if timed_out is None:
            timed_out = result.timed_out
        if counts is None:  # no summary: timed out, crashed, or a non-pytest command
            passed_all = result.ok and not timed_out
            counts = {"passed": int(passed_all), "failed": int(not passed_all), "errors": 0, "skipped": 0}
        # A skipped test is no pass: one that skips on what the workspace holds (``if not hasattr(mod, "f"):
        # pytest.skip()``) let an agent delete the function and score 1.0. (An ``xfail`` test that failed as
        # marked is in no count: tirl.envs.scorer_runner.)
        total = counts["passed"] + counts["failed"] + counts["errors"] + counts["skipped"]
        all_pass = total > 0 and counts["passed"] == total and not timed_out
        fraction = counts["passed"] / total if total else 0.0
        reward = (1.0 if all_pass else 0.0) if self.reward_mode == "all" else fraction
        info = {
            "eval_s": round(eval_s, 6),
            "tests_passed": counts["passed"],
            "tests_failed": counts["failed"],
            "tests_errors": counts["errors"],
            "tests_skipped": counts["skipped"],
            "tests_total": total,
            "eval_timed_out": timed_out,
            "eval_exit_code": result.exit_code,
            "reward_mode": self.reward_mode,  # tirl audit holds the reward to this mode's rule
            "eval_output": clip(result.stdout + result.stderr, 1500),
        }
        return EvalResult(reward=reward, correct=all_pass, info=info)

    async def teardown(self) -> None:
        """Delete the workspace (unless ``keep_workspace``)."""
        if self._workspace is not None and not self.keep_workspace:
            self._workspace.remove()
            shutil.rmtree(self._workspace.path.parent, ignore_errors=True)
        self._workspace = None


def task_source(config: EnvConfig, n: int, seed: int) -> list[Task]:
    """Registry task source: the JSONL file ``config.tasks_file`` (first ``n``) or ``n`` generated tasks.

    ``env.difficulty=1``: the 33 planted bugs of ``swe_programs.toml``; ``2``: the curriculum
    (:mod:`tirl.envs.tasks.swe_curriculum`), whose split follows the seed (held-out, validation, else train);
    ``3`` or more: the spec curriculum (the same bugs, each function with a docstring quoting its correct text).
    """
    if config.tasks_file:
        return load_swe_tasks(Path(config.tasks_file))[:n]
    if config.difficulty >= 2:
        from tirl.envs.tasks.swe_curriculum import SPEC_DIFFICULTY, generate_curriculum, split_for_seed

        split = split_for_seed(seed, config.seed)
        return generate_curriculum(n, seed=seed, split=split, spec=config.difficulty >= SPEC_DIFFICULTY)
    return generate_swe_tasks(n, seed=seed)
