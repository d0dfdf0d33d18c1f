"""Per-environment action rules: tagged actions, answer markers, named rules, one definition everywhere."""

from __future__ import annotations

import pytest

from tirl.config import EnvConfig, FilterConfig, load_config
from tirl.diagnostics.audit import audit_trajectories
from tirl.errors import ConfigError
from tirl.filters import VoidTurnFilter, rules_from_config
from tirl.parsing import ACTION_RULES, DEFAULT_RULES, ActionKind, ParseRules, TagAction, judge_text
from tirl.types import Group, Message, Role, Trajectory

FENCE = "```"
GSM8K, SQL, SEARCH = ACTION_RULES["gsm8k"], ACTION_RULES["sql"], ACTION_RULES["search"]


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("3 + 4 = 7\n#### 7", "7"),
        ("#### 1,000 dollars", "1,000 dollars"),
        ("first #### 3\nthen #### 4", "4"),  # the last answer wins
        ("####   42  ", "42"),
    ],
)
def test_an_answer_marker_answers_with_the_rest_of_the_line(text: str, answer: str) -> None:
    verdict = judge_text(text, GSM8K)
    assert verdict.kind is ActionKind.ANSWER and verdict.answer == answer


@pytest.mark.parametrize(
    "text",
    ["####", "#### \nnext line", f"{FENCE}python\nprint('#### 7')\n{FENCE}", "the answer is 7", "\\boxed{7}"],
)
def test_gsm8k_turns_without_a_marker_answer_are_void(text: str) -> None:
    assert judge_text(text, GSM8K).is_void


def test_markers_are_off_by_default() -> None:
    assert judge_text("#### 7").is_void


def test_tagged_actions_act_outside_code_only_with_content() -> None:
    verdict = judge_text("I will query.\n<sql>SELECT 1</sql>", SQL)
    assert verdict.kind is ActionKind.TAG and verdict.tags == (TagAction("sql", "SELECT 1"),)
    assert judge_text("<SQL>select 2</SQL>", SQL).tags == (TagAction("sql", "select 2"),)
    assert judge_text("<sql>   </sql>", SQL).is_void
    assert judge_text(f"{FENCE}text\n<sql>SELECT 1</sql>\n{FENCE}", SQL).is_void
    assert judge_text("<sql>SELECT 1</search>", SQL).is_void
    assert judge_text("<sql>SELECT 1</sql>").is_void  # not an action under the default (tir) rule
    assert judge_text(f"{FENCE}python\nprint(1)\n{FENCE}", SQL).is_void  # no code runs in the sql env


def test_renamed_answer_tags_and_precedence() -> None:
    assert judge_text("<solution>SELECT 2</solution>", SQL).answer == "SELECT 2"
    assert judge_text("<answer>x</answer>", SQL).is_void  # sql answers with <solution>, not <answer>
    both = judge_text("<search>paris</search> so <answer>Paris</answer>", SEARCH)
    assert both.kind is ActionKind.ANSWER and both.answer == "Paris" and both.tags == ()


def test_bad_rule_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="tag names"):
        ParseRules(action_tags=frozenset({"<sql>"}))
    with pytest.raises(ValueError, match="non-blank"):
        ParseRules(answer_markers=(" ",))
    with pytest.raises(ConfigError, match=r"filter\.action_rule=.nope."):
        load_config(None, ["filter.action_rule=nope"])
    with pytest.raises(ConfigError, match=r"\[filter\] action rule is invalid"):
        rules_from_config(FilterConfig(action_rule="fields", action_tags=["a b"]))


def test_rule_choice_auto_fields_and_names() -> None:
    assert rules_from_config(FilterConfig(), EnvConfig()) == DEFAULT_RULES  # tir-math declares none: the fields
    fields = rules_from_config(FilterConfig(action_rule="fields", action_tags=["search"], answer_markers=["####"]))
    assert fields.action_tags == frozenset({"search"}) and fields.answer_markers == ("####",)
    assert rules_from_config(FilterConfig(action_rule="sql")) is SQL
    assert rules_from_config(FilterConfig(), EnvConfig(name="skyrl-gym:gsm8k")) is GSM8K


def _traj(tid: str, *turns: str, answer: str = "7") -> Trajectory:
    msgs = [Message(role=Role.USER, content="q")]
    for t in turns:
        msgs += [Message(role=Role.ASSISTANT, content=t), Message(role=Role.USER, content="again")]
    return Trajectory(id=tid, messages=msgs, answer=answer, reward=0.0)


def test_the_filter_and_the_audit_share_the_envs_rule() -> None:
    env = EnvConfig(name="skyrl-gym:gsm8k_multi_turn")
    filt = VoidTurnFilter.from_config(FilterConfig(mode="drop"), env)
    trajs = [_traj("ok", "#### 6", "#### 7"), _traj("void", "#### 6", "hmm, 7"), _traj("tir", "\\boxed{7}")]
    result = filt.apply([Group(id="g", trajectories=trajs)])
    assert [t.id for t in result.groups[0].trajectories] == ["ok"] and result.stats.void_ids == ["void", "tir"]
    audited = audit_trajectories([*trajs, _traj("late", "#### 7", "hmm")], filt.rules).to_dict()
    assert audited["void"] == 3 and audited["void_correct"]["examples"] == ["late"]  # #### 7 read as its answer
    default = audit_trajectories([_traj("late", "#### 7", "hmm")]).to_dict()
    assert default["void_correct"]["correct"] == 0  # under the tir rule "#### 7" is no answer at all


def test_tirl_filter_and_audit_use_the_configured_rule(tmp_path, capsys) -> None:
    import json

    from tirl.cli import main

    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps(_traj("a", "#### 7").to_dict()) + "\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[env]\nname = "skyrl-gym:gsm8k"\n')
    verdicts = tmp_path / "v.jsonl"
    assert main(["filter", str(src), "--verdicts", str(verdicts), "--config", str(cfg)]) == 0
    assert json.loads(verdicts.read_text())["void"] is False  # auto: the env's gsm8k rule
    assert main(["filter", str(src), "--verdicts", str(verdicts)]) == 0
    assert json.loads(verdicts.read_text())["void"] is True  # no config: the tir rule
    capsys.readouterr()
    assert main(["audit", str(src), "--config", str(cfg), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["void"] == 0


def test_envs_on_ray_hosts_get_the_same_rule() -> None:
    from tirl.distributed.ray_backend import EnvHost, EnvRecipe

    recipe = EnvRecipe("skyrl-gym:gsm8k", EnvConfig(name="skyrl-gym:gsm8k"), None, kwargs={"rules": GSM8K})
    assert EnvHost(recipe)._make().rules is GSM8K  # what build_parts hands a Ray host (trainer.backend=ray)
