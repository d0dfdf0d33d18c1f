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

``evaluate()`` — Evaluator
    Copies the hidden tests (and a zip of pytest, see
    :func:`tirl.envs.workspace.pytest_bundle`) into ``.tirl_eval/`` of the
    workspace and runs them with pytest inside the sandbox, with
    ``eval_timeout_s``; ``--confcutdir``/``--rootdir`` keep a ``conftest.py``
    or ``pytest.ini`` the agent wrote out of the run. The reward is 1.0 when
    every hidden test passes (``reward_mode="all"``), or the fraction passed
    (``"fraction"``). It runs whether or not the agent submitted. Tasks from
    JSONL run their own ``test_command`` with ``bash`` instead, with pytest on
    ``PYTHONPATH``; the reward then comes from pytest's summary line, or from
    the exit status when there is none.

Not covered: the code under test runs in the same process as the pytest
runner, so an adversarial "fix" could fake a result line (a per-run nonce
makes that harder, not impossible); Python state does not persist between
commands (files do); ``python`` may not exist in the sandbox, ``python3`` does.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from tirl.config import EnvConfig, SandboxConfig
from tirl.envs.base import EnvError, EpisodeOverError, EvalResult, StepResult, Task
from tirl.envs.common import SandboxLease, block_lang, final_result, run_blocks
from tirl.envs.observation import clip, observation_text, tool_message, wrap_output
from tirl.envs.tasks.swe_gen import expert_solution, generate_swe_tasks, load_swe_tasks
from tirl.envs.workspace import Workspace, default_cache_dir, materialise, provision, pytest_bundle
from tirl.parsing import DEFAULT_RULES, ActionKind, ParseRules, judge_message
from tirl.sandbox.base import ExecResult, Lang, Sandbox
from tirl.types import Message, Role, TerminationReason, ToolCall

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
EVAL_DIR = ".tirl_eval"

_RUNNER = """\
import json, os, sys
_cwd = os.getcwd()
sys.path[:0] = [os.path.join(_cwd, {bundle!r}), _cwd]
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only our plugin; installed ones are not the task's
import pytest
class _Count:
    counts = {{"passed": 0, "failed": 0, "errors": 0, "skipped": 0}}
    def pytest_terminal_summary(self, terminalreporter):
        stats = terminalreporter.stats
        for key, name in (("passed", "passed"), ("failed", "failed"), ("error", "errors"), ("skipped", "skipped")):
            self.counts[name] = len([r for r in stats.get(key, []) if getattr(r, "when", "call") != "teardown"
                                     or key == "error"])
_c = _Count()
_status = pytest.main({args!r}, plugins=[_c])
print("\\n{marker} " + json.dumps(dict(_c.counts, status=int(_status))))
"""

_SUMMARY_RE = re.compile(r"(\d+) (passed|failed|errors?|skipped)")


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


def _split_submit(body: str) -> tuple[str, bool]:
    """``(commands before, True)`` when the block's last non-blank line is ``submit``."""
    lines = body.rstrip().split("\n")
    if lines and lines[-1].strip() == SUBMIT:
        return "\n".join(lines[:-1]), True
    return body, False


class SweLiteEnv:
    """One swe-lite episode (create one per trajectory; share the sandbox)."""

    name = "swe-lite"

    def __init__(
        self,
        *,
        sandbox: Sandbox | None = None,
        sandbox_config: SandboxConfig | None = None,
        max_turns: int = 10,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        max_obs_chars: int = 2000,
        max_action_chars: int | None = None,
        command_timeout_s: float | None = None,
        eval_timeout_s: float = 60.0,
        reward_mode: str = "all",
        cache_dir: str | Path | None = None,
        work_root: str | Path | None = None,
        keep_workspace: bool = False,
        rules: ParseRules = DEFAULT_RULES,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if reward_mode not in ("all", "fraction"):
            raise ValueError(f"reward_mode must be 'all' or 'fraction', got {reward_mode!r}")
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.max_obs_chars = max_obs_chars
        self.max_action_chars = max_action_chars
        self.command_timeout_s = command_timeout_s
        self.eval_timeout_s = eval_timeout_s
        self.reward_mode = reward_mode
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.work_root = Path(work_root) if work_root is not None else None
        self.keep_workspace = keep_workspace
        self.rules = rules
        self.info: dict[str, Any] = {}
        self._lease = SandboxLease(sandbox, sandbox_config)
        self._task: Task | None = None
        self._workspace: Workspace | None = None
        self._hidden: Path | None = None
        self._turns = 0
        self._reason: TerminationReason | None = None
        self._closed = False

    @property
    def workspace(self) -> Path | None:
        """The episode's working copy (None before reset and after close)."""
        return None if self._workspace is None else self._workspace.path

    @property
    def reason(self) -> TerminationReason | None:
        """Why the episode ended (``None`` while it runs)."""
        return self._reason

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        """Provision the workspace (Initializer stage); ``seed`` is unused."""
        if self._closed or self._task is not None:
            raise EpisodeOverError("an env serves one episode: create a new env per episode")
        start = time.perf_counter()
        template = materialise(task, self.cache_dir)
        self._workspace = provision(template, self.work_root)
        self._hidden = template.hidden
        await self._lease.get()
        self._task = task
        self.info = {
            "init_s": round(time.perf_counter() - start, 6),
            "copy_s": round(self._workspace.copy_s, 6),
            "template_cached": template.cached,
            "workspace": str(self._workspace.path),
        }
        messages = [] if self.system_prompt is None else [Message(role=Role.SYSTEM, content=self.system_prompt)]
        messages.append(Message(role=Role.USER, content=task.prompt))
        return messages

    def _end(self, reason: TerminationReason, observation: list[Message], info: dict[str, Any]) -> StepResult:
        self._reason = reason
        return final_result(reason, observation, info)

    async def end(self, reason: TerminationReason, info: dict[str, Any] | None = None) -> StepResult:
        """End the episode for a reason only the runner sees (token cap → ``overlong``, timeout, cancel).

        Later ``step`` calls raise; ``evaluate`` still works and reports the reason.
        """
        if self._reason is not None:
            raise EpisodeOverError(f"the episode already ended ({self._reason.value})")
        return self._end(reason, [], dict(info or {}))

    async def step(self, action: Message) -> StepResult:
        """Judge and apply one assistant message (see the module docstring)."""
        if self._task is None or self._reason is not None or self._closed:
            raise EpisodeOverError("step called before reset or after the episode ended")
        if action.role is not Role.ASSISTANT:
            raise ValueError(f"step takes an assistant message, got role {action.role.value!r}")
        self._turns += 1
        info: dict[str, Any] = {"turn": self._turns}
        content = action.content or ""
        if self.max_action_chars is not None and len(content) > self.max_action_chars:
            info["action"] = "overlong"
            return self._end(TerminationReason.OVERLONG, [], info)
        verdict = judge_message(action, self.rules)
        info["action"] = verdict.kind.value
        if verdict.kind is ActionKind.ANSWER:
            info["submission"] = verdict.answer
            return self._end(TerminationReason.SUBMITTED, [], info)
        if verdict.kind is ActionKind.VOID:
            return self._end(TerminationReason.VOID, [], info)
        if verdict.kind is ActionKind.CODE:
            commands, submitted = self._commands_from_blocks([(block_lang(b), b.body) for b in verdict.code])
        else:
            commands, submitted = self._commands_from_calls(verdict.tool_calls)
        observation: list[Message] = []
        if commands:
            observation = await self._execute(commands, info)
        if "error" in info:
            return self._end(TerminationReason.ERROR, observation, info)
        if submitted:
            return self._end(TerminationReason.SUBMITTED, observation, info)
        if self._turns >= self.max_turns:
            return self._end(TerminationReason.MAX_TURNS, observation, info)
        return StepResult(observation, info=info)

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
            args = call.arguments if isinstance(call.arguments, dict) else json.loads(call.arguments)
            command = args.get("command") if isinstance(args, dict) else None
            if call.name in ("bash", "shell") and isinstance(command, str):
                commands.append(("bash", command))
            else:
                commands.append(("bash", f"echo {json.dumps(f'[unknown tool: {call.name}; use bash or submit]')}"))
        return commands, False

    async def _execute(self, commands: list[tuple[Lang, str]], info: dict[str, Any]) -> list[Message]:
        assert self._workspace is not None
        sandbox = await self._lease.get()
        runs = await run_blocks(sandbox, commands, timeout_s=self.command_timeout_s, workdir=self._workspace.path)
        info.update(runs.info())
        if runs.infra_error is not None:
            info["error"] = f"sandbox error: {runs.infra_error}"
        text = "\n".join(observation_text(r, compact_errors=False, show_status=True) for r in runs.results)
        return [tool_message(wrap_output(clip(text, self.max_obs_chars)))]

    async def evaluate(self) -> EvalResult:
        """Run the hidden tests with pytest in the sandbox (Evaluator stage)."""
        if self._task is None or self._workspace is None:
            raise EpisodeOverError("evaluate called before reset or after close")
        start = time.perf_counter()
        ws = self._workspace.path
        eval_dir = ws / EVAL_DIR
        shutil.rmtree(eval_dir, ignore_errors=True)
        eval_dir.mkdir()
        shutil.copy(pytest_bundle(self.cache_dir), eval_dir / "pytest.zip")
        command = self._task.data.get("test_command")
        sandbox = await self._lease.get()
        nonce = f"TIRL_PYTEST_{secrets.token_hex(8)}"
        if isinstance(command, str):
            if self._hidden is not None:
                dest = ws / self._hidden.name
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(self._hidden, dest, symlinks=True)
            script = (
                f'export PYTHONPATH="{EVAL_DIR}/pytest.zip:.${{PYTHONPATH:+:$PYTHONPATH}}" '
                f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1\n{command}"
            )
            result = await sandbox.run(script, lang="bash", timeout_s=self.eval_timeout_s, workdir=ws)
            counts = parse_pytest_summary(result.stdout)
        else:
            tests = eval_dir / "tests"
            if self._hidden is None:
                raise EnvError(f"task {self._task.id!r} has no hidden tests")
            shutil.copytree(self._hidden, tests)
            (tests / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
            rel = f"{EVAL_DIR}/tests"
            args = [rel, "-q", "--tb=short", "-p", "no:cacheprovider", "--rootdir", rel, "--confcutdir", rel]
            args += ["-c", f"{rel}/pytest.ini"]
            code = _RUNNER.format(bundle=f"{EVAL_DIR}/pytest.zip", args=args, marker=nonce)
            result = await sandbox.run(code, lang="python", timeout_s=self.eval_timeout_s, workdir=ws)
            counts = self._runner_counts(result, nonce)
        if result.error is not None:
            raise EnvError(f"sandbox error while running the hidden tests: {result.error}")
        return self._reward(result, counts, time.perf_counter() - start)

    @staticmethod
    def _runner_counts(result: ExecResult, nonce: str) -> dict[str, int] | None:
        for line in reversed(result.stdout.splitlines()):
            if line.startswith(nonce + " "):
                data = json.loads(line[len(nonce) + 1 :])
                return {k: int(data[k]) for k in ("passed", "failed", "errors", "skipped")}
        return None

    @staticmethod
    def _strip_marker(stdout: str) -> str:
        return "\n".join(line for line in stdout.splitlines() if not line.startswith("TIRL_PYTEST_")) + "\n"

    def _reward(self, result: ExecResult, counts: dict[str, int] | None, eval_s: float) -> EvalResult:
        if counts is None:  # no summary: timed out, crashed, or a non-pytest command
            passed_all = result.ok and not result.timed_out
            counts = {"passed": int(passed_all), "failed": int(not passed_all), "errors": 0, "skipped": 0}
        total = counts["passed"] + counts["failed"] + counts["errors"]
        all_pass = total > 0 and counts["passed"] == total and not result.timed_out
        fraction = counts["passed"] / total if total else 0.0
        reward = (1.0 if all_pass else 0.0) if self.reward_mode == "all" else fraction
        info = {
            **self.info,
            "eval_s": round(eval_s, 6),
            "tests_passed": counts["passed"],
            "tests_failed": counts["failed"],
            "tests_errors": counts["errors"],
            "tests_total": total,
            "eval_timed_out": result.timed_out,
            "eval_exit_code": result.exit_code,
            "reason": None if self._reason is None else self._reason.value,
            "turns": self._turns,
            "eval_output": clip(self._strip_marker(result.stdout) + result.stderr, 1500),
        }
        return EvalResult(reward=reward, correct=all_pass, info=info)

    async def close(self) -> None:
        """Delete the workspace (unless ``keep_workspace``) and close an owned sandbox; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._workspace is not None and not self.keep_workspace:
                self._workspace.remove()
                shutil.rmtree(self._workspace.path.parent, ignore_errors=True)
            self._workspace = None
        finally:
            await self._lease.close()

    @classmethod
    def from_config(cls, config: EnvConfig, **kwargs: Any) -> SweLiteEnv:
        """An env with ``max_turns`` from ``config``."""
        kwargs.setdefault("max_turns", config.max_turns)
        return cls(**kwargs)


def task_source(config: EnvConfig, n: int, seed: int) -> list[Task]:
    """Registry task source: the JSONL file ``config.tasks_file`` (first ``n``) or ``n`` generated tasks."""
    if config.tasks_file:
        return load_swe_tasks(Path(config.tasks_file))[:n]
    return generate_swe_tasks(n, seed=seed)
