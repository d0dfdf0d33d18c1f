"""Real skyrl-gym environments (gsm8k, gsm8k_multi_turn) as tirl environments, on CPU, no network."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from skyrl_gym.envs.base_text_env import BaseTextEnv  # noqa: E402

from tirl.cli import main  # noqa: E402
from tirl.config import EnvConfig, FilterConfig  # noqa: E402
from tirl.envs import check_env, env_factory, load_tasks  # noqa: E402
from tirl.envs.base import EnvError  # noqa: E402
from tirl.errors import ConfigError, InputError  # noqa: E402
from tirl.filters import rules_from_config  # noqa: E402
from tirl.integrations.skyrl_gym import SkyRLGymEnv  # noqa: E402
from tirl.parsing import ACTION_RULES  # noqa: E402
from tirl.types import Message, Role, TerminationReason  # noqa: E402

DATA = Path(__file__).parent / "data"
GSM8K = DATA / "gsm8k_tasks.jsonl"
MULTI = DATA / "gsm8k_multi_turn_tasks.jsonl"


def _say(text: str) -> Message:
    return Message(role=Role.ASSISTANT, content=text)


def _tasks(name: str, path: Path, n: int = 8) -> list[Any]:
    return load_tasks(EnvConfig(name=name, tasks_file=str(path)), n)


@pytest.mark.parametrize(("name", "path"), [("skyrl-gym", GSM8K), ("skyrl-gym", MULTI), ("skyrl-gym:gsm8k", MULTI)])
async def test_real_gsm8k_envs_pass_check_env(name: str, path: Path) -> None:
    task = _tasks(name, path)[0]
    factory = env_factory(name, config=EnvConfig(name=name, max_turns=3), rules=ACTION_RULES["gsm8k"])
    report = await check_env(lambda: factory(task), task, solution=[f"3 + 4 = 7.\n#### {task.answer}"])
    assert {"protocol", "reset", "void", "after_end", "evaluate", "close", "solution"} <= set(report.passed)


def test_rows_keep_env_class_and_every_field_but_prompt_as_extras() -> None:
    task = _tasks("skyrl-gym", MULTI)[2]
    assert task.data["env_class"] == "gsm8k_multi_turn" and task.answer == "21"
    assert task.data["extras"]["reward_spec"] == {"method": "rule", "ground_truth": "21"}
    assert task.data["extras"]["extra_info"]["index"] == 2 and "prompt" not in task.data["extras"]
    assert task.messages[0].role is Role.SYSTEM and task.messages[-1].content == task.prompt
    forced = _tasks("skyrl-gym:gsm8k", MULTI)[2]
    assert forced.data["env_class"] == "gsm8k"


async def test_multi_turn_keeps_per_turn_rewards_and_sums_them() -> None:
    task = _tasks("skyrl-gym", MULTI)[0]  # ground truth 7; skyrl's format score is 0.2 / max_turns per turn
    env = SkyRLGymEnv(max_turns=4, rules=ACTION_RULES["gsm8k"])
    first = await env.reset(task)
    assert [m.role for m in first] == [Role.SYSTEM, Role.USER]
    wrong = await env.step(_say("Maybe 6.\n#### 6"))
    assert not (wrong.terminated or wrong.truncated) and wrong.reward == pytest.approx(0.05)
    assert wrong.observation and wrong.observation[0].role is Role.USER  # skyrl's next-turn instruction
    right = await env.step(_say("No: 3 + 4.\n#### 7"))
    assert right.terminated and right.reason is TerminationReason.ANSWERED and right.reward == 1.0
    result = await env.evaluate()
    assert result.info["step_rewards"] == [pytest.approx(0.05), 1.0]
    assert result.reward == pytest.approx(1.05) and result.correct
    await env.close()


async def test_out_of_turns_and_void_are_inferred() -> None:
    task = _tasks("skyrl-gym", MULTI)[0]
    env = SkyRLGymEnv(max_turns=2, rules=ACTION_RULES["gsm8k"])
    await env.reset(task)
    await env.step(_say("#### 1"))
    last = await env.step(_say("#### 2"))  # skyrl says done (out of turns); the turn answered, wrongly
    assert last.terminated and last.reason is TerminationReason.ANSWERED
    assert not (await env.evaluate()).correct
    void = SkyRLGymEnv(max_turns=2, rules=ACTION_RULES["gsm8k"])
    await void.reset(task)
    result = await void.step(_say("Let me think."))  # no #### answer: void under gsm8k's rule, not stepped
    assert result.terminated and result.reason is TerminationReason.VOID
    assert (await void.evaluate()).info["step_rewards"] == []


_REWARDS = {"nan": math.nan, "-inf": -math.inf, "none": None}  # step rewards a task row cannot hold as JSON


class _Probe(BaseTextEnv):
    """A real skyrl-gym env written for the test: a ``<tool>`` action, and a switch for postprocessed_action."""

    threads: list[str] = []  # noqa: RUF012

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.max_turns = int((extras or {}).get("max_turns", 2))
        self.rewrite = bool((extras or {}).get("extra_info", {}).get("rewrite"))
        self.rewards = list((extras or {}).get("extra_info", {}).get("rewards", [0.5, 0.5]))

    def init(self, prompt: Any) -> Any:
        _Probe.threads.append(threading.current_thread().name)
        return prompt, {}

    def step(self, action: str) -> Any:
        _Probe.threads.append(threading.current_thread().name)
        self.turns += 1
        reward = _REWARDS.get(self.rewards[self.turns - 1], self.rewards[self.turns - 1])
        out: dict[str, Any] = {"observations": [{"role": "user", "content": "ok"}], "reward": reward,
                               "done": self.turns >= self.max_turns, "metadata": {}}  # fmt: skip
        if self.rewrite:
            out["postprocessed_action"] = action.strip()
        return out


@pytest.fixture
def probe_env() -> Any:
    skyrl_gym.register(id="tirl_probe", entry_point=_Probe)
    yield
    skyrl_gym.envs.registration.deregister("tirl_probe")


def _probe_task(tmp_path: Path, rewrite: bool, rewards: tuple[Any, ...] = (0.5, 0.5)) -> Any:
    extra = {"rewrite": rewrite, "rewards": list(rewards)}
    row = {"prompt": [{"role": "user", "content": "go"}], "env_class": "tirl_probe",
           "reward_spec": {"ground_truth": "x"}, "extra_info": extra}  # fmt: skip
    path = tmp_path / "probe.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.warns(RuntimeWarning, match="tirl_probe"):  # a class tirl does not know: it runs on the host
        return load_tasks(EnvConfig(name="skyrl-gym", tasks_file=str(path), skyrl_host_code=True), 1)[0]


async def test_sync_calls_run_off_the_event_loop_and_out_of_turns_truncates(tmp_path: Path, probe_env: Any) -> None:
    rules = rules_from_config(FilterConfig(action_rule="fields", action_tags=["tool"]))
    env = SkyRLGymEnv(max_turns=2, rules=rules)
    _Probe.threads.clear()
    await env.reset(_probe_task(tmp_path, rewrite=False))
    assert not (await env.step(_say("<tool>a</tool>"))).truncated
    last = await env.step(_say("<tool>b</tool>"))
    assert last.truncated and last.reason is TerminationReason.MAX_TURNS  # done on a non-answer at the limit
    assert (await env.evaluate()).reward == 1.0
    assert _Probe.threads and threading.main_thread().name not in _Probe.threads


async def test_postprocessed_action_is_refused(tmp_path: Path, probe_env: Any) -> None:
    env = SkyRLGymEnv(max_turns=2, rules=rules_from_config(FilterConfig(action_rule="fields", action_tags=["tool"])))
    await env.reset(_probe_task(tmp_path, rewrite=True))
    with pytest.raises(EnvError, match=r"postprocessed_action.*token-in/token-out"):
        await env.step(_say("<tool>a </tool>"))


async def _probe_episode(tmp_path: Path, *rewards: Any) -> SkyRLGymEnv:
    env = SkyRLGymEnv(max_turns=2, rules=rules_from_config(FilterConfig(action_rule="fields", action_tags=["tool"])))
    await env.reset(_probe_task(tmp_path, rewrite=False, rewards=rewards))
    await env.step(_say("<tool>a</tool>"))
    await env.step(_say("<tool>b</tool>"))
    return env


@pytest.mark.parametrize(("rewards", "shown", "turns"), [(("nan", 0.5), "NaN", "1"), ((1.0, "-inf"), "-Infinity", "2")])
async def test_a_nonfinite_step_reward_scores_the_episode_0_naming_env_class_and_turn(
    tmp_path: Path, probe_env: Any, rewards: tuple[Any, ...], shown: str, turns: str
) -> None:
    """``float(reward or 0.0)`` kept NaN (NaN is truthy) and the sum was NaN; -inf summed to -inf."""
    result = await (await _probe_episode(tmp_path, *rewards)).evaluate()
    assert result.reward == 0.0 and not result.correct  # a 1.0 step made it "correct"
    assert result.info["eval_failure"] == "nonfinite_reward" and result.info["reward_returned"] == shown
    assert result.info["reward_source"] == f"skyrl-gym env 'tirl_probe' step() in turn {turns}"
    assert None in result.info["step_rewards"]  # null in the trajectory line, not NaN
    json.dumps(result.info, allow_nan=False)


async def test_a_step_reward_of_none_is_0_and_one_that_is_not_a_number_is_an_error(
    tmp_path: Path, probe_env: Any
) -> None:
    """A string was read as its number (``float("0.5")``); now the episode ends ``error`` naming the env class."""
    result = await (await _probe_episode(tmp_path, "none", 1.0)).evaluate()
    assert result.info["step_rewards"] == [0.0, 1.0] and result.reward == 1.0 and result.correct
    env = SkyRLGymEnv(max_turns=2, rules=rules_from_config(FilterConfig(action_rule="fields", action_tags=["tool"])))
    await env.reset(_probe_task(tmp_path, rewrite=False, rewards=("0.5", 0.5)))
    with pytest.raises(EnvError, match=r"^skyrl-gym env 'tirl_probe' step\(\) returned the reward '0.5' \(str\)"):
        await env.step(_say("<tool>a</tool>"))


def test_the_env_class_decides_the_action_rule(tmp_path: Path) -> None:
    auto = FilterConfig()
    assert rules_from_config(auto, EnvConfig(name="skyrl-gym", tasks_file=str(MULTI))) is ACTION_RULES["gsm8k"]
    assert rules_from_config(auto, EnvConfig(name="skyrl-gym:text2sql")) is ACTION_RULES["sql"]
    assert rules_from_config(FilterConfig(action_rule="tir"), EnvConfig(name="skyrl-gym:gsm8k")) is ACTION_RULES["tir"]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(GSM8K.read_text().splitlines()[0] + "\n" + json.dumps(
        {"prompt": "q", "env_class": "text2sql", "reward_spec": {"ground_truth": "x"}}) + "\n")  # fmt: skip
    with pytest.raises(ConfigError, match="mixes env classes"):
        rules_from_config(auto, EnvConfig(name="skyrl-gym", tasks_file=str(mixed)))


def test_an_unknown_env_class_names_the_row_and_the_fix(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "q", "env_class": "nope", "reward_spec": {"ground_truth": "1"}}) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: env_class 'nope' is not a registered skyrl-gym env.*gsm8k"):
        _tasks("skyrl-gym", bad)


def test_the_error_blames_the_input_that_is_wrong(tmp_path: Path) -> None:
    """A wrong forced env is the name's fault, not the task file's; a row without env_class says to add it."""
    from tirl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"env.name=skyrl-gym:nosuchenv: 'nosuchenv' is not a registered"):
        _tasks("skyrl-gym:nosuchenv", GSM8K)
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"prompt": "q", "reward_spec": {"ground_truth": "1"}}) + "\n")
    with pytest.raises(InputError, match=r"bare.jsonl:1: the row has no env_class field.*skyrl-gym:NAME"):
        _tasks("skyrl-gym", bare)


TINY = ["--set", "trainer.prompts_per_step=2", "--set", "algo.group_size=2", "--set", "filter.mode=off",
        "--set", "generation.max_new_tokens=8", "--set", "generation.max_total_tokens=200", "--set", "env.eval_size=2",
        "--set", "trainer.threads=1", "--set", "trainer.eval_before_after=false"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("name", "path"), [("skyrl-gym", GSM8K), ("skyrl-gym:gsm8k_multi_turn", MULTI)])
def test_one_training_step_on_a_real_skyrl_gym_env(name: str, path: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["train", "--steps", "1", "--run-dir", str(run_dir), "--no-progress", *TINY,
            "--set", f"env.name={name}", "--set", f"env.tasks_file={path}", "--set", "env.max_turns=2"]  # fmt: skip
    assert main(args) == 0
    trained = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(trained) == 4
    held_out = {"Tom has", "A box ho"}  # the first env.eval_size rows are the evaluation split
    assert all(m["content"][:8] not in held_out for t in trained for m in t["messages"] if m["role"] == "user")
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics and metrics[-1]["step"] == 1 and metrics[-1]["rollout/trajectories"] == 4


def test_cli_errors_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = ["train", "--steps", "1", "--run-dir", str(tmp_path / "r"), "--set", "env.name=skyrl-gym"]
    assert main(run) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "env.tasks_file" in err[0]
