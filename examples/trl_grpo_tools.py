r"""TRL's GRPO with tirl's void filter, on a multi-turn python-tool task whose code runs in tirl's sandbox.

    python examples/trl_grpo_tools.py --toy                 # the built-in tiny model, 1 step, CPU (make test runs it)
    python examples/trl_grpo_tools.py --model DIR --steps 200 --out runs/trl   # your model (a GPU for real sizes)

What it shows: ``VoidFilteredGRPOTrainer`` (tirl.integrations.trl) is TRL's ``GRPOTrainer`` whose void
completions — an assistant turn with neither executable code nor a final answer — leave the group's reward
mean/std and the loss; the ``rollout_func`` below plays several turns per completion (the policy writes a
```python block, tirl's sandbox runs it, the output goes back as tool tokens with ``env_mask`` 0, so they are
never trained on); the reward is 1 for a correct ``\boxed{}`` answer. TRL writes ``trainer_state.json``, which
``tirl diagnose training OUT/trainer_state.json`` reads (void keys included).

Not shown: vLLM generation (set ``use_vllm=True`` in GRPOConfig for that; the rollout here samples with
``model.generate`` so that it runs anywhere), batching of the sampling, tool calls in the OpenAI format.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig

from tirl.answers import answers_match
from tirl.config import EnvConfig, SandboxConfig
from tirl.envs import load_tasks
from tirl.envs.observation import format_observation, tool_message
from tirl.envs.tir_math import DEFAULT_SYSTEM_PROMPT
from tirl.integrations.trl import VoidFilteredGRPOTrainer
from tirl.models.chat_format import chat_format_for
from tirl.models.loading import builtin_model_path
from tirl.parsing import extract_final_answer, judge_text
from tirl.sandbox import create_sandbox


def tool_rollout(tok: Any, max_turns: int, max_new_tokens: int) -> Any:
    """A TRL ``rollout_func``: up to ``max_turns`` turns per prompt, code run in the sandbox between them."""
    chat = chat_format_for(tok)  # tirl's token-in/token-out rendering of a tool turn for this tokenizer
    sandbox = create_sandbox(SandboxConfig(warm_pool=False), warn=False)

    def sample(model: Any, ids: list[int]) -> tuple[list[int], list[float]]:
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids], device=model.device), max_new_tokens=max_new_tokens, do_sample=True,
                output_scores=True, return_dict_in_generate=True, pad_token_id=tok.pad_token_id,
            )  # fmt: skip
        new = out.sequences[0, len(ids) :].tolist()
        logps = [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(out.scores, new, strict=False)]
        return new, logps

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "transcript": []}
        for prompt in prompts:
            ids = list(tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False))
            completion: list[int] = []
            logprobs: list[float] = []
            mask: list[int] = []
            transcript: list[dict[str, str]] = []
            for turn in range(max_turns):
                new, logps = sample(trainer.model, ids + completion)
                completion += new
                logprobs += logps
                mask += [1] * len(new)
                text = chat.assistant_text(new)
                transcript.append({"role": "assistant", "content": text})
                verdict = judge_text(text)
                if not verdict.code or turn == max_turns - 1:
                    break  # an answer, a void turn (the filter judges it) or the last turn
                result = asyncio.run(sandbox.run(verdict.code[0].body))
                observation = format_observation(result)
                obs = chat.observation_ids([tool_message(observation)], new)
                completion += obs
                logprobs += [0.0] * len(obs)
                mask += [0] * len(obs)  # tool output: environment tokens, never trained on
                transcript.append({"role": "tool", "content": observation})
            for key, value in (("prompt_ids", ids), ("completion_ids", completion), ("logprobs", logprobs),
                               ("env_mask", mask), ("transcript", transcript)):  # fmt: skip
                out[key].append(value)
        return out

    return rollout


def correct(transcript: list[list[dict[str, str]]], answer: list[str], **_: Any) -> list[float]:
    """1.0 when the last assistant turn's final answer matches the task's answer."""
    finals = [extract_final_answer(t[-1]["content"]) if t else None for t in transcript]
    return [1.0 if answers_match(f, a) else 0.0 for f, a in zip(finals, answer, strict=True)]


def main(argv: list[str] | None = None) -> VoidFilteredGRPOTrainer:
    """Train and return the trainer (its ``state.log_history`` holds the void metrics)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="a local model directory (default: tirl's built-in tiny model)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default="runs/trl-grpo-tools")
    ap.add_argument("--toy", action="store_true", help="one step, 2 prompts x 2 completions, short turns (CPU)")
    args = ap.parse_args(argv)
    path = args.model or builtin_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    tok.pad_token = tok.pad_token or tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path)
    tasks = load_tasks(EnvConfig(name="tir-math"), 4 if args.toy else 512, seed=1)
    system = {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    rows = [{"prompt": [system, {"role": "user", "content": t.prompt}], "answer": t.answer} for t in tasks]
    config = GRPOConfig(
        output_dir=args.out, use_cpu=not torch.cuda.is_available(), max_steps=1 if args.toy else args.steps,
        per_device_train_batch_size=4, num_generations=2 if args.toy else 4,
        max_completion_length=96 if args.toy else 512,
        logging_steps=1, report_to=[], save_strategy="no", learning_rate=1e-5, beta=0.0, seed=0,
    )  # fmt: skip
    trainer = VoidFilteredGRPOTrainer(
        model=model, processing_class=tok, reward_funcs=[correct], args=config, train_dataset=Dataset.from_list(rows),
        rollout_func=tool_rollout(tok, max_turns=2 if args.toy else 4, max_new_tokens=40 if args.toy else 256),
    )  # fmt: skip
    trainer.train()
    trainer.state.save_to_json(f"{args.out}/trainer_state.json")
    print(f"wrote {args.out}/trainer_state.json; read it with: tirl diagnose training {args.out}/trainer_state.json")
    return trainer


if __name__ == "__main__":
    main()
