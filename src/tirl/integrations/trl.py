"""tirl's void-turn filter inside TRL's ``GRPOTrainer`` (tested with TRL 1.16, multi-turn rollouts).

Two ways in, from the most to the least complete:

:class:`VoidFilteredGRPOTrainer` (a ``GRPOTrainer`` subclass)
    Each completion is judged by tirl's rule (:func:`tirl.parsing.judge_messages`,
    every assistant turn; a multi-turn transcript — TRL's tool-calling loop or
    the ``transcript_key`` field a ``rollout_func`` returns — is judged turn by
    turn). Under ``void_mode="drop"`` (tirl's default) a void completion:

    * leaves the group statistics: its row of ``rewards_per_func`` is set to
      NaN after *every* reward source has run (reward functions, reward models
      and an environment's ``get_reward``), which is TRL's own "unscorable"
      path — ``nanmean``/``nanstd`` leave it out of the group mean and std, its
      advantage is 0 and it is left out of the logged reward statistics;
    * leaves the loss: its ``completion_mask`` row is zeroed and its tokens are
      taken out of ``num_items_in_batch`` (the token-level normaliser), so it
      adds no policy-gradient, KL or entropy term and does not dilute the mean.

    ``void_mode="mask"`` (SimpleTIR's public behaviour) keeps the reward in the
    group statistics and only zeroes the loss mask. ``void/trajectories`` and
    ``void/ratio`` are logged with TRL's other metrics.

    Extension point and why: TRL exposes no public hook between scoring and
    the advantage computation that sees every reward source. The subclass
    overrides the two narrowest points that do (private; tested on TRL 1.16 only),
    ``_calculate_rewards`` (returns the gathered ``[B, F]`` rewards) and
    ``_generate_and_score_completions`` (returns the batch dict with
    ``completion_mask`` and ``num_items_in_batch``); it checks both signatures
    when it is built and fails with a clear error if a TRL release changes
    them, instead of silently filtering nothing.

:func:`void_filtered_rewards` (TRL's public contract only)
    Wraps reward *functions* so they return ``None`` for a void completion; if
    every reward source does so, TRL treats the completion as unscorable (out of
    the group statistics, advantage 0). Not covered this way: reward models and
    ``get_reward`` of environments (they still score the row), and the loss
    normaliser still counts the completion's tokens.

Not covered: resampling a group that the filter leaves empty (TRL gives it
zero advantages; tirl's trainer resamples), ``penalize``, and the IS-ratio
statistics TRL logs before the loss mask applies.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from trl import GRPOTrainer

from tirl.parsing import DEFAULT_RULES, ParseRules, judge_messages
from tirl.types import Message, Role

__all__ = [
    "VoidFilteredGRPOTrainer",
    "completion_messages",
    "drop_void_rows",
    "void_filtered_rewards",
    "void_flags",
]

VoidMode = Literal["drop", "mask"]


def completion_messages(completion: Any) -> list[Message]:
    """A TRL completion (text, or a list of chat messages with ``tool_calls``) as tirl messages."""
    if isinstance(completion, str):
        return [Message(role=Role.ASSISTANT, content=completion)]
    out: list[Message] = []
    for item in completion or ():
        try:
            out.append(Message.from_dict(item))
        except ValueError:  # multimodal parts or a role tirl does not know: keep the text, judge it as written
            role = item.get("role") if isinstance(item, dict) else None
            content = item.get("content") if isinstance(item, dict) else item
            out.append(Message(role=Role.ASSISTANT if role == "assistant" else Role.USER, content=str(content)))
    return out


def void_flags(
    completions: Sequence[Any],
    transcripts: Sequence[Any] | None = None,
    rules: ParseRules = DEFAULT_RULES,
) -> list[bool]:
    """Whether each completion is void: any assistant turn with no action (``transcripts[i]`` wins when given)."""
    flags = []
    for i, completion in enumerate(completions):
        source = transcripts[i] if transcripts is not None and transcripts[i] is not None else completion
        flags.append(judge_messages(completion_messages(source), rules).void)
    return flags


def drop_void_rows(rewards_per_func: torch.Tensor, void: torch.Tensor) -> torch.Tensor:
    """``rewards_per_func`` with the rows of void completions set to NaN (TRL's unscorable rows).

    rewards_per_func: [B, F]; void: [B] bool. Returns a new tensor.
    """
    if rewards_per_func.shape[0] != void.shape[0]:
        raise ValueError(f"{void.shape[0]} void flags for {rewards_per_func.shape[0]} reward rows")
    out = rewards_per_func.clone()
    out[void.to(out.device)] = torch.nan
    return out


def void_filtered_rewards(
    reward_funcs: Sequence[Callable[..., list[float | None]]],
    rules: ParseRules = DEFAULT_RULES,
    *,
    transcript_key: str = "transcript",
) -> list[Callable[..., list[float | None]]]:
    """Reward functions that return ``None`` for void completions (TRL's public contract; see the module doc)."""

    def wrap(func: Callable[..., list[float | None]]) -> Callable[..., list[float | None]]:
        def scored(*, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
            rewards = func(completions=completions, **kwargs)
            void = void_flags(completions, kwargs.get(transcript_key), rules)
            return [None if v else r for r, v in zip(rewards, void, strict=True)]

        scored.__name__ = getattr(func, "__name__", "reward")
        return scored

    return [wrap(f) for f in reward_funcs]


def _check_trl_hooks() -> None:
    """Fail clearly when the installed TRL no longer has the two methods this plug-in extends."""
    expected = {
        "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],
        "_generate_and_score_completions": ["self", "inputs"],
    }
    for name, params in expected.items():
        method = getattr(GRPOTrainer, name, None)
        found = list(inspect.signature(method).parameters) if method is not None else None
        if found != params:
            raise RuntimeError(
                f"tirl's TRL plug-in extends GRPOTrainer.{name}{tuple(params[1:])}, but this TRL has {found} — "
                "use TRL 1.16 (tested) or tirl.integrations.trl.void_filtered_rewards (public API only)"
            )


class VoidFilteredGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
    """``GRPOTrainer`` whose void completions leave the group statistics and the loss (see the module docstring).

    >>> trainer = VoidFilteredGRPOTrainer(model=..., reward_funcs=[...], args=..., train_dataset=...,
    ...                                   void_rules=ACTION_RULES["gsm8k"])  # doctest: +SKIP
    """

    def __init__(
        self,
        *args: Any,
        void_rules: ParseRules = DEFAULT_RULES,
        void_mode: VoidMode = "drop",
        transcript_key: str = "transcript",
        **kwargs: Any,
    ) -> None:
        _check_trl_hooks()
        if void_mode not in ("drop", "mask"):
            raise ValueError(f"void_mode {void_mode!r} is not drop or mask")
        self.void_rules = void_rules
        self.void_mode = void_mode
        self.transcript_key = transcript_key
        self._void_local: torch.Tensor | None = None  # [B_local] bool, set while a batch is scored
        super().__init__(*args, **kwargs)

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        transcripts = [row.get(self.transcript_key) for row in inputs] if inputs else None
        flags = void_flags(completions, transcripts, self.void_rules)
        device = self.accelerator.device
        self._void_local = torch.tensor(flags, dtype=torch.bool, device=device)
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        void_all = self.accelerator.gather(self._void_local)  # the rows of every process, as the rewards are
        mode = "train" if getattr(self.model, "training", False) else "eval"  # as TRL decides it
        self._metrics[mode]["void/trajectories"].append(float(void_all.sum().item()))
        self._metrics[mode]["void/ratio"].append(float(void_all.float().mean().item()) if len(void_all) else 0.0)
        if self.void_mode == "drop":
            return drop_void_rows(rewards_per_func, void_all)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> Any:
        output = super()._generate_and_score_completions(inputs)
        void = self._void_local
        self._void_local = None
        if void is None or not bool(void.any()):
            return output
        mask = output["completion_mask"]  # [B, T]
        loss_mask = mask if output.get("tool_mask") is None else mask * output["tool_mask"]
        removed = self.accelerator.gather(loss_mask[void].sum()).sum()
        output["completion_mask"] = mask * (~void).unsqueeze(1).to(mask.dtype)
        output["num_items_in_batch"] = output["num_items_in_batch"] - removed
        return output
