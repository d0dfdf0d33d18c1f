"""``env.ood_rate`` is a training stressor; evaluation measures the policy on the clean env unless asked.

A run's parts (:func:`tirl.trainer.wiring.build_parts`, what ``tirl train`` and ``tirl eval`` wire, with a tiny
model saved to disk and the real process sandbox) have two env factories: training's carries ``env.ood_rate``,
evaluation's ``env.eval_ood_rate`` (default 0), and every evaluation strategy (greedy, and ``--sampled``'s) is
built on the evaluation one; the tool output of a real tir-math episode on each shows it. Both backends build
clean envs and wrap them with the same :func:`tirl.envs.ood.ood_factory` (the Ray path is not run here: no Ray
cluster is started). Not covered: a whole ``tirl eval`` run (the tiny model writes no code, so it would see no
tool output).
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from tests.envs.test_ood import TASK, TURNS, _play
from tests.tiny_run import save_tiny_model

from tirl.ablation import DOSE_LEVELS
from tirl.config import EnvConfig, load_config
from tirl.envs import make_env
from tirl.envs.ood import OodToolOutput, ood_factory
from tirl.envs.tir_math import TirMathEnv
from tirl.errors import ConfigError
from tirl.rollout.evaluation import EvalReport
from tirl.sandbox.base import Sandbox
from tirl.trainer.sampled_eval import eval_json, sampling_strategy
from tirl.trainer.wiring import build_parts


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


async def _factories(model_dir: Path, *overrides: str) -> list[tuple[list[str], float]]:
    """The tool output of one scripted tir-math episode on training's, greedy evaluation's and sampled
    evaluation's env factory of a wired run."""
    base = [f"model.path={model_dir}", "env.name=tir-math", "sandbox.backend=process", "trainer.threads=1"]
    cfg = load_config(None, [*base, *overrides])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        parts = build_parts(cfg, model_path=None, trace_path=None)
    try:
        async with sampling_strategy(parts, cfg) as sampled:
            strategies = [parts.strategy, parts.eval_strategy, sampled]
            factories = [s.env_factory for s in strategies]  # type: ignore[attr-defined]
            return [await _play(make(TASK), TURNS) for make in factories]
    finally:
        await parts.close()


async def test_evaluation_sees_the_clean_env_unless_asked(model_dir: Path, sandbox: Sandbox) -> None:
    """It saw ``env.ood_rate``: ``tirl eval`` of a config trained with noise, and a run's before/after accuracy,
    measured the policy on garbled tool output."""
    clean = await _play(TirMathEnv(sandbox=sandbox, max_turns=6), TURNS)
    train, greedy, sampled = await _factories(model_dir, "env.ood_rate=1.0")
    assert train[0] != clean[0] and all(a != b for a, b in zip(train[0], clean[0], strict=True))
    assert greedy == sampled == clean
    train, greedy, sampled = await _factories(model_dir, "env.ood_rate=1.0", "env.eval_ood_rate=1.0")  # stress
    assert train == greedy == sampled and greedy[0] != clean[0]
    _, greedy, _ = await _factories(model_dir, "env.eval_ood_rate=1.0")  # a stress evaluation of a clean run
    assert greedy[0] != clean[0]


async def test_ood_factory_wraps_at_the_rate_it_is_given(sandbox: Sandbox) -> None:
    """Both backends: clean envs are built, and each purpose's are wrapped at its rate."""
    config = EnvConfig(name="tir-math", ood_rate=1.0, eval_ood_rate=0.0, seed=3)
    hosts = replace(config, ood_rate=0.0)  # what either backend builds (tirl.trainer.wiring)

    def make(task: object) -> object:
        return make_env("tir-math", config=hosts, sandbox=sandbox)

    assert ood_factory(make, rate=config.eval_ood_rate, seed=3) is make  # the evaluation factory: the clean envs
    assert ood_factory(make, rate=0.0, seed=3) is make
    env = ood_factory(make, rate=1.0, seed=3)(TASK)
    assert isinstance(env, OodToolOutput)
    wrapped = make_env("tir-math", config=config, sandbox=sandbox)  # the registry's own wrap: the same draw
    assert await _play(env, TURNS) == await _play(wrapped, TURNS)


def test_the_key_is_checked_recorded_and_the_ood_dose_levels_ask_for_it() -> None:
    with pytest.raises(ConfigError, match=r"env\.eval_ood_rate"):
        load_config(None, ["env.eval_ood_rate=1.5"])
    assert load_config(None, []).env.eval_ood_rate == 0.0
    report = EvalReport(n=0, correct=0, wall_s=0.0, terminations={}, mean_turns=0.0, mean_tokens=0.0)
    for rates, recorded in ((["env.ood_rate=0.5"], 0.0), (["env.eval_ood_rate=0.25"], 0.25)):
        record = eval_json(load_config(None, rates), report, None, model="m", split="heldout", sampled=False)
        assert record["ood_rate"] == recorded  # the evaluation record says what the evaluation saw
        assert record["max_turns"] == 6  # and the turn limit (tirl compare checks both)
    for level in ("mismatch-ood", "mismatch-ood-long"):
        cfg = load_config(None, list(DOSE_LEVELS[level]))
        assert cfg.env.eval_ood_rate == cfg.env.ood_rate == 0.3, level
