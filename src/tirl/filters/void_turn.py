"""Void-turn filtering of a training batch (SimpleTIR's rule, tirl's placement).

A trajectory with any void assistant turn (see :mod:`tirl.parsing`) is void.
:class:`VoidTurnFilter` runs on the groups of a batch **before** any group
statistic, advantage, importance ratio or KL is computed. What happens to a
void trajectory is one row of :data:`MODES`:

========  =========================  ===========  ==============================
mode      stays in its group         loss weight  counts towards ``usable``
========  =========================  ===========  ==============================
drop      no (absent from mean/std)  —            no
mask      yes (in the mean/std)      0            no
off       yes                        1            yes
penalize  no (as ``drop``)           —            no
roc       yes, if RoC keeps it       1            yes
========  =========================  ===========  ==============================

``drop`` is the seed's rule; ``mask`` is SimpleTIR's public behaviour;
``off`` only counts. ``penalize`` is tirl's remedy for void drift: removed
like ``drop``, and handed back in :attr:`FilterResult.penalized` so the
trainer can push down the void turn's own tokens with a bounded, fixed
negative advantage (:mod:`tirl.algorithms.void_penalty`). Infrastructure failures (``Trajectory.failed``) are
always removed and counted separately: they are not evidence about the
policy. ``roc`` treats a void trajectory like ``off`` and then keeps half of each
(oversampled) group by rStar2-Agent's Resample-on-Correct (:mod:`tirl.filters.roc`).

The hand-off is typed and done in one pass: :meth:`VoidTurnFilter.apply`
sets ``Trajectory.void``, ``void_turns`` and ``loss_weight`` and returns a
:class:`FilterResult` whose ``groups`` and ``usable`` line up with the input
groups. ``usable`` counts the trajectories that can carry a learning signal
under the mode; the trainer compares it with ``filter.min_valid_per_group``
to decide what to resample and never looks at the mode itself.

Not covered here: the resampling (the trainer asks the rollout strategy for
more episodes of the groups that are short) and zero-variance groups (they
get zero advantages; the trainer skips an update whose advantages are all 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from tirl.config import EnvConfig, FilterConfig, TirlConfig
from tirl.errors import ConfigError
from tirl.filters.roc import group_rng, resample_on_correct
from tirl.parsing import ACTION_RULES, DEFAULT_RULES, ParseRules, TrajectoryVerdict, judge_messages
from tirl.types import Group, Role, TerminationReason, Trajectory

FilterMode = Literal["drop", "mask", "off", "penalize", "roc"]


@dataclass(frozen=True, slots=True)
class ModeRule:
    """What a filter mode does with a void trajectory."""

    keep: bool  # stays in its group (and so in the group's reward mean/std)
    loss_weight: float  # its ``Trajectory.loss_weight`` when kept
    usable: bool  # counts towards the group's usable trajectories
    penalize: bool = False  # removed, then trained on its void turn only (FilterResult.penalized)
    resample_on_correct: bool = False  # the group keeps half its rows by RoC (tirl.filters.roc)


MODES: dict[str, ModeRule] = {
    "drop": ModeRule(keep=False, loss_weight=0.0, usable=False),
    "mask": ModeRule(keep=True, loss_weight=0.0, usable=False),
    "off": ModeRule(keep=True, loss_weight=1.0, usable=True),
    "penalize": ModeRule(keep=False, loss_weight=0.0, usable=False, penalize=True),
    "roc": ModeRule(keep=True, loss_weight=1.0, usable=True, resample_on_correct=True),
}


def judge_trajectory(traj: Trajectory, rules: ParseRules = DEFAULT_RULES) -> TrajectoryVerdict:
    """The void verdict of one trajectory, from its assistant messages only.

    An episode the environment already ended with reason ``void`` is void even
    if its messages were cut before the void turn was recorded. Assistant messages that came with the prompt
    (:attr:`~tirl.types.Trajectory.prompt_assistant_messages`: a task chat's demonstrations) are not judged
    (one without an action made every episode of its task void); ``void_turns`` still index every assistant
    message from 0, theirs included.
    """
    given = traj.prompt_assistant_messages
    verdict = judge_messages(traj.messages, rules) if not given else _policy_verdict(traj, given, rules)
    if not verdict.void and traj.termination is TerminationReason.VOID:
        n = len(traj.assistant_messages)
        return TrajectoryVerdict(void=True, void_turns=(max(n - 1, 0),), turns=verdict.turns)
    return verdict


def _policy_verdict(traj: Trajectory, given: int, rules: ParseRules) -> TrajectoryVerdict:
    """The verdict of the assistant messages after the prompt's ``given`` ones, indexed as in the whole list."""
    at = [i for i, m in enumerate(traj.messages) if m.role is Role.ASSISTANT]
    own = judge_messages(traj.messages[at[given - 1] + 1 :], rules)
    return TrajectoryVerdict(void=own.void, void_turns=tuple(k + given for k in own.void_turns), turns=own.turns)


@dataclass(slots=True)
class FilterStats:
    """Per-batch filter statistics (logged under ``filter/``)."""

    trajectories: int = 0
    valid: int = 0
    void: int = 0
    void_ids: list[str] = field(default_factory=list)
    failed: int = 0
    """Trajectory counts: every one judged is valid or void; failed ones are not judged."""
    empty_groups: int = 0
    min_valid_per_group: int = 0
    """Group counts: groups with no usable trajectory, and the smallest ``usable`` count."""

    @property
    def void_ratio(self) -> float:
        """Void trajectories over judged (non-failed) ones; 0 for an empty batch."""
        judged = self.valid + self.void
        return self.void / judged if judged else 0.0

    def add(self, other: FilterStats) -> None:
        """Add the trajectory counts of ``other`` (a resample round); group counts are set by the caller."""
        self.trajectories += other.trajectories
        self.valid += other.valid
        self.void += other.void
        self.failed += other.failed
        self.void_ids.extend(other.void_ids)

    def metrics(self) -> dict[str, float]:
        """The ``filter/*`` metric names of the training log."""
        return {
            "filter/valid_trajectories": float(self.valid),
            "filter/void_trajectories": float(self.void),
            "filter/failed_trajectories": float(self.failed),
            "filter/void_ratio": self.void_ratio,
            "filter/empty_groups": float(self.empty_groups),
            "filter/min_valid_per_group": float(self.min_valid_per_group),
        }


@dataclass(slots=True)
class FilterResult:
    """One entry per input group, in input order, and what was taken out.

    ``groups[i]`` holds the kept trajectories of input group ``i`` (possibly
    none); ``usable[i]`` how many of them carry a learning signal.
    """

    groups: list[Group]
    usable: list[int]
    stats: FilterStats
    removed: list[Trajectory] = field(default_factory=list)
    penalized: list[Trajectory] = field(default_factory=list)  # removed void ones the mode trains down
    withheld: list[list[Trajectory]] = field(default_factory=list)  # per input group: the void ones the mode removed

    def learnable(self, min_usable: int) -> list[Group]:
        """The groups with at least ``min_usable`` usable trajectories, in order."""
        return [g for g, n in zip(self.groups, self.usable, strict=True) if n >= min_usable and g.trajectories]


@dataclass(slots=True)
class VoidTurnFilter:
    """Applies the void-turn rule to a batch of groups; see the module docstring for the modes."""

    mode: FilterMode = "drop"
    rules: ParseRules = DEFAULT_RULES

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"filter mode {self.mode!r} is not one of {', '.join(MODES)}")

    @classmethod
    def from_config(cls, config: FilterConfig, env: EnvConfig | None = None) -> VoidTurnFilter:
        """The filter of the ``[filter]`` config section (``env``: whose own action rule ``auto`` takes)."""
        return cls(mode=config.mode, rules=rules_from_config(config, env))

    def apply(self, groups: list[Group]) -> FilterResult:
        """Judge every trajectory once, set its typed verdict fields, and split kept from removed."""
        rule = MODES[self.mode]
        stats = FilterStats()
        out: list[Group] = []
        usable: list[int] = []
        removed: list[Trajectory] = []
        penalized: list[Trajectory] = []
        withheld: list[list[Trajectory]] = []
        for group in groups:
            kept: list[Trajectory] = []
            withheld.append([])
            n_usable = 0
            for traj in group.trajectories:
                stats.trajectories += 1
                if traj.failed:
                    stats.failed += 1
                    removed.append(traj)
                    continue
                verdict = judge_trajectory(traj, self.rules)
                traj.void = verdict.void
                traj.void_turns = list(verdict.void_turns)
                if not verdict.void:
                    stats.valid += 1
                    n_usable += 1
                    kept.append(traj)
                    continue
                stats.void += 1
                stats.void_ids.append(traj.id)
                if not rule.keep:
                    removed.append(traj)
                    withheld[-1].append(traj)
                    if rule.penalize:
                        penalized.append(traj)
                    continue
                traj.loss_weight = rule.loss_weight
                n_usable += int(rule.usable)
                kept.append(traj)
            if rule.resample_on_correct:
                chosen = resample_on_correct(kept, len(group.trajectories) // 2, group_rng(group.id, kept))
                picked = {id(t) for t in chosen}
                removed.extend(t for t in kept if id(t) not in picked)
                kept, n_usable = chosen, len(chosen)
            out.append(Group(id=group.id, trajectories=kept))
            usable.append(n_usable)
        stats.empty_groups = sum(1 for n in usable if n == 0)
        stats.min_valid_per_group = min(usable) if usable else 0
        return FilterResult(
            groups=out, usable=usable, stats=stats, removed=removed, penalized=penalized, withheld=withheld
        )


def rules_from_config(config: FilterConfig, env: EnvConfig | None = None) -> ParseRules:
    """The action rule of a run, shared by the env, the filter and the audit (``filter.action_rule``).

    ``auto`` (the default): the environment's own rule when it declares one
    (:func:`tirl.envs.registry.env_rules`; skyrl-gym's ``gsm8k`` answers with
    ``####``), else the ``[filter]`` fields; ``fields``: the fields
    (``exec_langs``, ``boxed``, ``answer_tags``, ``action_tags``,
    ``answer_markers``); a name of :data:`tirl.parsing.ACTION_RULES`: that rule.
    """
    name = config.action_rule
    if name == "auto" and env is not None:
        from tirl.envs.registry import env_rules  # the registry imports the envs; loaded only when asked

        declared = env_rules(env)
        if declared is not None:
            return declared
    if name in ("auto", "fields"):
        try:
            return ParseRules(
                exec_langs=frozenset(config.exec_langs),
                boxed=config.boxed,
                answer_tags=config.answer_tags,
                action_tags=frozenset(config.action_tags),
                answer_markers=tuple(config.answer_markers),
            )
        except ValueError as exc:
            raise ConfigError(f"config [filter] action rule is invalid: {exc}") from None
    if name in ACTION_RULES:
        return ACTION_RULES[name]
    raise ConfigError(
        f"config filter.action_rule={config.action_rule!r} is invalid: "
        f"use auto, fields or one of {', '.join(ACTION_RULES)}"
    )


@dataclass(frozen=True, slots=True)
class RuleOptions:
    """Changes to a config's action rule from the command line (``tirl filter``, ``tirl audit``).

    ``exec_langs`` (None: the config's) replaces the executable languages; ``no_boxed`` and
    ``no_answer_tags`` turn that answer form off (they never turn one on that the config has off).
    """

    exec_langs: frozenset[str] | None = None
    no_boxed: bool = False
    no_answer_tags: bool = False

    @staticmethod
    def parse_langs(text: str, option: str = "--exec-langs") -> frozenset[str]:
        """Comma-separated languages; an empty list is a :class:`ConfigError` naming ``option``."""
        langs = frozenset(x.strip() for x in text.split(",") if x.strip())
        if not langs:
            raise ConfigError(f"{option} is empty — give at least one language, e.g. {option} python,bash")
        return langs


def rules_with_options(config: TirlConfig, options: RuleOptions) -> ParseRules:
    """The run's action rule (:func:`rules_from_config`, as in training) with ``options`` applied."""
    rules = rules_from_config(config.filter, config.env)
    return replace(
        rules,
        exec_langs=options.exec_langs if options.exec_langs is not None else rules.exec_langs,
        boxed=rules.boxed and not options.no_boxed,
        answer_tags=rules.answer_tags and not options.no_answer_tags,
    )
