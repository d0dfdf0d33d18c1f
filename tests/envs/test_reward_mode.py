"""``env.reward_mode``: swe-lite's training reward from the config (all hidden tests pass, or their share).

Covered: the reward of a verdict's counts against a plain reference for both modes; the key reaching
swe-lite through ``make_env`` (a real episode through the real sandbox and judge: the unfixed bug earns the
share of tests it passes, and ``correct`` stays all-pass, which is what every evaluation counts); the
skyrl-gym adapter passing it to its swe-lite rows; the refusal for envs with their own reward (the
registry, the task file of a SkyRL non-swe row, and ``tirl train`` as one error line); ``tirl audit``
not calling a fraction that its test counts give a mismatch; evaluation's envs built all-pass whatever the
training key says (the factories of a wired run, :func:`tirl.trainer.wiring.build_parts`, with a tiny model on
disk: a real unfixed episode on each; and a Ray env host told so per env — its actor body, no cluster started).
"""

from __future__ import annotations

import itertools
import json
import os
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from tirl.cli import main
from tirl.config import EnvConfig, load_config
from tirl.diagnostics.verdicts import verdict_ceiling
from tirl.envs.registry import check_reward_mode, make_env
from tirl.envs.swe_lite import SweLiteEnv, generate_swe_tasks
from tirl.errors import ConfigError
from tirl.sandbox.base import ExecResult, Sandbox
from tirl.testing import play

TASK = generate_swe_tasks(1, seed=0, kinds=("wrong_operator",))[0]


def reference(passed: int, failed: int, errors: int, skipped: int, timed_out: bool, mode: str) -> tuple[float, bool]:
    """The reward and correctness a verdict gives, written out: a skip is no pass, a time-out no success."""
    total = passed + failed + errors + skipped
    correct = total > 0 and passed == total and not timed_out
    if mode == "all":
        return (1.0 if correct else 0.0), correct
    return (passed / total if total else 0.0), correct


@pytest.mark.parametrize("mode", ["all", "fraction"])
def test_the_reward_of_a_verdict_matches_a_plain_reference(mode: str) -> None:
    env = SweLiteEnv(reward_mode=mode)
    ok = ExecResult("", "", 0)
    for passed, failed, errors, skipped, timed_out in itertools.product(range(3), range(2), range(2), range(2), (0, 1)):
        counts = {"passed": passed, "failed": failed, "errors": errors, "skipped": skipped}
        got = env._reward(ok, counts, 0.0, timed_out=bool(timed_out))
        want = reference(passed, failed, errors, skipped, bool(timed_out), mode)
        assert (got.reward, got.correct) == pytest.approx(want), counts
        assert got.info["tests_total"] == passed + failed + errors + skipped
        assert got.info["reward_mode"] == mode
        assert verdict_ceiling(got.info) == pytest.approx(got.reward)  # tirl audit's rule is the env's own


def test_make_env_gives_swe_lite_the_configured_mode_and_refuses_it_for_other_envs() -> None:
    fraction = EnvConfig(name="swe-lite", reward_mode="fraction")
    env = make_env("swe-lite", config=fraction)
    assert isinstance(env, SweLiteEnv) and env.reward_mode == "fraction"
    plain = make_env("swe-lite", config=EnvConfig(name="swe-lite"))
    assert isinstance(plain, SweLiteEnv) and plain.reward_mode == "all"
    adapter = make_env("skyrl-gym:swe-lite", config=replace(fraction, name="skyrl-gym:swe-lite"))
    assert getattr(adapter, "reward_mode", None) == "fraction"
    for name in ("tir-chain", "tir-math"):
        check_reward_mode(name, EnvConfig(name=name))  # the default is every env's
        with pytest.raises(ConfigError, match=r"env\.reward_mode=.fraction. applies to swe-lite"):
            check_reward_mode(name, EnvConfig(name=name, reward_mode="fraction"))
        with pytest.raises(ConfigError, match="has its own reward"):
            make_env(name, config=EnvConfig(name=name, reward_mode="fraction"))


async def test_a_real_unfixed_episode_earns_its_share_of_tests_and_stays_incorrect(
    sandbox: Sandbox, swe_cache: Path, work_root: Path
) -> None:
    rewards = {}
    for mode in ("all", "fraction"):
        cfg = EnvConfig(name="swe-lite", reward_mode=mode)  # type: ignore[arg-type]
        env = make_env("swe-lite", config=cfg, sandbox=sandbox, cache_dir=swe_cache, work_root=work_root)
        result = await play(env, TASK, ["```bash\nsubmit\n```"])
        assert not result.correct  # the bug is still there: evaluation counts this episode as unsolved
        passed, total = result.info["tests_passed"], result.info["tests_total"]
        assert 0 < passed < total
        rewards[mode] = (result.reward, passed / total)
    assert rewards["all"][0] == 0.0
    assert rewards["fraction"][0] == pytest.approx(rewards["fraction"][1])


def test_a_skyrl_task_file_with_a_row_of_another_env_class_is_refused_under_fraction(tmp_path: Path) -> None:
    from tirl.errors import InputError
    from tirl.integrations.skyrl_gym import task_source

    rows = tmp_path / "rows.jsonl"
    row = {"prompt": [{"role": "user", "content": "2+2?"}], "env_class": "gsm8k",
           "reward_spec": {"method": "rule", "ground_truth": "4"}}  # fmt: skip
    rows.write_text(json.dumps(row) + "\n")
    cfg = EnvConfig(name="skyrl-gym", tasks_file=str(rows))
    assert len(task_source(cfg, 5, 0)) == 1
    with pytest.raises(InputError, match="env_class 'gsm8k' has its own reward"):
        task_source(replace(cfg, reward_mode="fraction"), 5, 0)


def test_tirl_train_refuses_fraction_on_tir_chain_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--set", "env.reward_mode=fraction", "--steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: env.reward_mode='fraction'")


def test_a_fraction_its_counts_give_is_no_mismatch() -> None:
    record = {"tests_passed": 3, "tests_total": 5, "eval_timed_out": False, "eval_failure": None}
    assert verdict_ceiling(record) == pytest.approx(0.6)
    assert verdict_ceiling({**record, "tests_passed": 5}) == 1.0


SUBMIT = ["```bash\nsubmit\n```"]  # the unfixed code, judged: some hidden tests pass, not all


async def test_every_evaluation_env_of_a_fraction_run_is_all_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training's envs earn the share of tests; greedy and sampled evaluation's earn 0 for the same unfixed
    episode (they were built from the training config, so a fraction run's evaluation envs paid the share too)."""
    from tests.tiny_run import save_tiny_model

    from tirl.trainer.sampled_eval import sampling_strategy
    from tirl.trainer.wiring import build_parts

    monkeypatch.setenv("TIRL_CACHE_DIR", str(tmp_path / "cache"))
    backend = os.environ.get("TIRL_ENVS_TEST_BACKEND", "auto")
    overrides = [f"model.path={save_tiny_model(tmp_path / 'tiny')}", "env.name=swe-lite", "env.reward_mode=fraction",
                 f"sandbox.backend={backend}", "sandbox.warm_pool=false", "trainer.threads=1"]  # fmt: skip
    cfg = load_config(None, overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        parts = build_parts(cfg, model_path=None, trace_path=None)
    try:
        async with sampling_strategy(parts, cfg) as sampled:
            factories = [s.env_factory for s in (parts.strategy, parts.eval_strategy, sampled)]  # type: ignore[attr-defined]
            train, greedy, sampled_eval = [await play(lambda make=make: make(TASK), TASK, SUBMIT) for make in factories]
    finally:
        await parts.close()
    passed, total = train.info["tests_passed"], train.info["tests_total"]
    assert 0 < passed < total and train.reward == pytest.approx(passed / total)
    for result in (greedy, sampled_eval):
        assert (result.reward, result.correct) == (0.0, False)
        assert (result.info["tests_passed"], result.info["tests_total"]) == (passed, total)
    assert not train.correct  # accuracy counts correct: all-pass under both


async def test_a_ray_host_builds_the_envs_it_is_told_to_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ray path: the hosts hold training's config; evaluation's envs are reset with ``reward_mode="all"``."""
    from tirl.distributed.ray_backend import EnvHost, EnvRecipe
    from tirl.trainer.wiring import EVALUATION_ENV

    monkeypatch.setenv("TIRL_CACHE_DIR", str(tmp_path / "cache"))
    host = EnvHost(EnvRecipe("swe-lite", EnvConfig(name="swe-lite", reward_mode="fraction")))
    try:
        await host.reset("train", TASK, None)
        await host.reset("eval", TASK, None, dict(EVALUATION_ENV))
        modes = {key: getattr(env, "reward_mode", None) for key, env in host.envs.items()}
    finally:
        await host.shutdown()
    assert modes == {"train": "fraction", "eval": "all"}
