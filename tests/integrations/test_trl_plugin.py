"""tirl's void filter inside real TRL (GRPOTrainer) on the built-in tiny model, CPU, one step each."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig

from tirl.diagnostics.adapters import load_metrics
from tirl.envs.tir_math import DEFAULT_SYSTEM_PROMPT
from tirl.integrations.trl import (
    VoidFilteredGRPOTrainer,
    drop_void_rows,
    void_filtered_rewards,
    void_flags,
)
from tirl.models.chat_format import chat_format_for
from tirl.models.loading import builtin_model_path
from tirl.parsing import ACTION_RULES
from tirl.types import Message, Role

FENCE = "```"
CODE = f"{FENCE}python\nprint(6*7)\n{FENCE}"
ANSWER = "so \\boxed{42}"


def test_void_flags_judge_every_assistant_turn_of_a_transcript() -> None:
    multi = [
        {"role": "assistant", "content": CODE},
        {"role": "tool", "name": "python", "content": f"{FENCE}output\n42\n{FENCE}"},
        {"role": "assistant", "content": "hmm, let me think"},
    ]
    call = [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "python", "arguments": {"code": "print(1)"}}}]}]  # fmt: skip
    assert void_flags([ANSWER, "no idea", multi, call]) == [False, True, True, False]
    assert void_flags(["x", "y"], [[{"role": "assistant", "content": ANSWER}], None]) == [False, True]
    assert void_flags(["#### 42"], rules=ACTION_RULES["gsm8k"]) == [False]


def test_drop_void_rows_matches_a_plain_loop() -> None:
    rewards = torch.tensor([[1.0, 0.5], [0.0, 0.2], [1.0, 1.0]])
    void = torch.tensor([False, True, False])
    got = drop_void_rows(rewards, void)
    for i in range(3):
        for j in range(2):
            assert math.isnan(got[i, j]) if void[i] else got[i, j] == rewards[i, j]
    assert not torch.isnan(rewards).any()  # the input is left alone


def test_public_wrapper_returns_none_for_void() -> None:
    def reward(completions: list[Any], **_: Any) -> list[float]:
        return [1.0] * len(completions)

    (wrapped,) = void_filtered_rewards([reward])
    assert wrapped(completions=[ANSWER, "nothing"], prompts=["q", "q"]) == [1.0, None]
    assert wrapped.__name__ == "reward"


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Any:
    """The 866k-parameter model on one intra-op thread: two threads made each sampled turn ~20x slower on a busy
    2-core machine (6.0 s against 0.29 s for 40 tokens; tirl's HF generator picks one thread for small models)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tiny() -> tuple[Any, Any]:
    path = builtin_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return AutoModelForCausalLM.from_pretrained(path), tok


def _config(tmp_path: Path) -> GRPOConfig:
    return GRPOConfig(
        output_dir=str(tmp_path / "trl"), use_cpu=True, per_device_train_batch_size=6, num_generations=3,
        max_steps=1, max_completion_length=96, logging_steps=1, report_to=[], save_strategy="no",
        learning_rate=1e-5, beta=0.0, seed=0,
    )  # fmt: skip


def _capture(trainer: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    inner = trainer._generate_and_score_completions

    def spy(inputs: Any) -> Any:
        out = inner(inputs)
        seen.append({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in out.items()})
        return out

    trainer._generate_and_score_completions = spy
    return seen


SCRIPT = [  # (transcript turns, reward): two groups of three, one void completion in each
    ([CODE, ANSWER], 1.0),
    ([CODE, "wait"], 0.0),
    ([ANSWER], 0.0),
    (["hmm"], 0.3),
    ([ANSWER], 0.0),
    ([CODE, CODE, ANSWER], 0.5),
]


def _scripted_rollout(tok: Any) -> Any:
    """Multi-turn completions from a script (forced tokens, not the policy's samples): the statistics are exact."""

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                               "transcript": [], "reward": []}  # fmt: skip
        for i, prompt in enumerate(prompts):
            turns, reward = SCRIPT[i % len(SCRIPT)]
            ids = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
            completion: list[int] = []
            mask: list[int] = []
            transcript: list[dict[str, str]] = []
            for k, text in enumerate(turns):
                if k:  # a tool observation between the turns: environment tokens, mask 0
                    obs = tok.encode("\nobservation: 42\n", add_special_tokens=False)
                    completion += obs
                    mask += [0] * len(obs)
                    transcript.append({"role": "tool", "content": "42"})
                turn = [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]
                completion += turn
                mask += [1] * len(turn)
                transcript.append({"role": "assistant", "content": text})
            out["prompt_ids"].append(list(ids))
            out["completion_ids"].append(completion)
            out["logprobs"].append([0.0] * len(completion))
            out["env_mask"].append(mask)
            out["transcript"].append(transcript)
            out["reward"].append(reward)
        return out

    return rollout


def _scripted_reward(reward: list[float], **_: Any) -> list[float]:
    return list(reward)


def _dataset() -> Dataset:
    system = {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}  # the prompt the tiny model was tuned on
    return Dataset.from_list([{"prompt": [system, {"role": "user", "content": f"What is 6*{i}?"}]} for i in (7, 8)])


@pytest.mark.slow
def test_void_completions_leave_the_group_statistics_and_the_loss(tmp_path: Path) -> None:
    model, tok = _tiny()
    trainer = VoidFilteredGRPOTrainer(
        model=model, processing_class=tok, reward_funcs=[_scripted_reward], args=_config(tmp_path),
        train_dataset=_dataset(), rollout_func=_scripted_rollout(tok),
    )  # fmt: skip
    seen = _capture(trainer)
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    (batch,) = seen
    rewards = [reward for _, reward in SCRIPT]
    void = void_flags([""] * 6, [[{"role": "assistant", "content": t} for t in turns] for turns, _ in SCRIPT])
    assert void == [False, True, False, True, False, False]
    for g in range(2):  # reference loop: mean and std over the group's valid completions only
        rows = [3 * g, 3 * g + 1, 3 * g + 2]
        valid = [rewards[i] for i in rows if not void[i]]
        mean = sum(valid) / len(valid)
        std = math.sqrt(sum((r - mean) ** 2 for r in valid) / (len(valid) - 1)) if len(valid) > 1 else float("nan")
        for i in rows:
            got = float(batch["advantages"][i])
            if void[i]:
                assert got == 0.0 and int(batch["completion_mask"][i].sum()) == 0
            else:
                want = (rewards[i] - mean) / (std + 1e-4) if not math.isnan(std) else 0.0
                assert got == pytest.approx(want, abs=1e-5) and int(batch["completion_mask"][i].sum()) > 0
    model_tokens = sum(int((batch["completion_mask"][i] * batch["tool_mask"][i]).sum()) for i in range(6))
    assert int(batch["num_items_in_batch"]) == model_tokens  # the void tokens left the normaliser too
    logged = trainer.state.log_history[0]
    assert logged["void/trajectories"] == 2 and logged["void/ratio"] == pytest.approx(1 / 3)
    assert logged["reward"] == pytest.approx((1.0 + 0.0 + 0.0 + 0.5) / 4)  # void rows are out of the logged mean
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    # TRL's own trainer_state.json (written by transformers' TrainerState.save_to_json) is what tirl diagnose reads
    trainer.state.save_to_json(str(tmp_path / "trainer_state.json"))
    log = load_metrics(tmp_path / "trainer_state.json")
    assert log.format == "trl" and log.steps == [1]
    assert (log.get("void"), log.get("valid"), log.get("void_ratio")) == ([2.0], [4.0], [pytest.approx(1 / 3)])


def _sampled_rollout(tok: Any, transcripts: list[Any]) -> Any:
    """Two turns sampled by the policy itself, with a tool observation between them (transcripts kept)."""

    def sample(model: Any, ids: list[int]) -> tuple[list[int], list[float]]:
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids]), max_new_tokens=40, do_sample=True, temperature=1.5,  # 1.5: some turns go void
                output_scores=True, return_dict_in_generate=True, pad_token_id=tok.pad_token_id,
            )  # fmt: skip
        new = out.sequences[0, len(ids) :].tolist()
        logps = [torch.log_softmax(s[0], -1)[t].item() for s, t in zip(out.scores, new, strict=False)]
        return new, logps

    chat = chat_format_for(tok)  # tirl's token-in/token-out rendering of the tool turn

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "transcript": []}
        for prompt in prompts:
            ids = list(tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False))
            t1, l1 = sample(trainer.model, ids)
            obs = chat.observation_ids([Message(role=Role.TOOL, content=f"{FENCE}output\n42\n{FENCE}")], t1)
            t2, l2 = sample(trainer.model, ids + t1 + obs)
            out["prompt_ids"].append(ids)
            out["completion_ids"].append(t1 + obs + t2)
            out["logprobs"].append(l1 + [0.0] * len(obs) + l2)
            out["env_mask"].append([1] * len(t1) + [0] * len(obs) + [1] * len(t2))
            first, second = (tok.decode(t, skip_special_tokens=True) for t in (t1, t2))
            out["transcript"].append([{"role": "assistant", "content": first}, {"role": "tool", "content": "42"},
                                      {"role": "assistant", "content": second}])  # fmt: skip
        transcripts.extend(out["transcript"])
        return out

    return rollout


def _length_reward(completions: list[Any], **_: Any) -> list[float]:
    return [float(len(str(c)) % 7) for c in completions]


@pytest.mark.slow
def test_a_sampled_multi_turn_step_keeps_every_void_completion_out(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, tok = _tiny()
    transcripts: list[Any] = []
    trainer = VoidFilteredGRPOTrainer(
        model=model, processing_class=tok, reward_funcs=[_length_reward], args=_config(tmp_path),
        train_dataset=_dataset(), rollout_func=_sampled_rollout(tok, transcripts),
    )  # fmt: skip
    seen = _capture(trainer)
    trainer.train()
    (batch,) = seen
    void = void_flags([""] * 6, transcripts)  # the policy's own turns, judged by tirl's rule
    assert 0 < sum(void) < 6  # both kinds are in the batch (seeded: torch.manual_seed(0) above)
    assert int(trainer.state.log_history[0]["void/trajectories"]) == sum(void)
    for i in range(6):  # exactly the void completions left the loss, with zero advantage
        assert (int(batch["completion_mask"][i].sum()) == 0) == void[i]
        assert not void[i] or float(batch["advantages"][i]) == 0.0


def test_a_trl_without_the_two_hooks_is_refused_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    from trl import GRPOTrainer

    def changed(self: Any, inputs: Any, prompts: Any) -> Any:  # a hypothetical future signature
        return None

    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", changed)
    with pytest.raises(RuntimeError, match=r"GRPOTrainer\._calculate_rewards.*TRL 1\.16"):
        VoidFilteredGRPOTrainer(model=None)
