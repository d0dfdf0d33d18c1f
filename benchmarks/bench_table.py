"""The benchmarks that ``run_all.py`` runs: their arguments, their headline figures and their plots.

Each :class:`Bench` names a script in this directory, the arguments of a full
run and of a ``--quick`` one, and the :class:`Figure` rows its page table
shows, each read from the script's ``--json`` object (a missing key reads as
None: the page then says the figure was not in that run's output).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from typing import Any

Result = dict[str, Any]  # one benchmark's --json object


# ------------------------------------------------------------------------------------------ the table
def at(obj: Any, *path: str) -> Any:
    """``obj[path[0]][path[1]]...``, or None where a key is missing."""
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def num(obj: Any, *path: str) -> float | None:
    """The number at ``path`` (see :func:`at`), or None."""
    value = at(obj, *path)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def ratio(top: float | None, bottom: float | None) -> float | None:
    """``top / bottom``, or None when either is missing or ``bottom`` is 0."""
    return None if top is None or not bottom else top / bottom


@dataclasses.dataclass(frozen=True)
class Figure:
    """One headline of a benchmark: its name, how to read it from the ``--json`` object, its unit and target."""

    name: str
    read: Callable[[Result], float | None]
    unit: str = ""  # "×", "tok/s", "ms" ...
    target: str = ""  # as the issue states it, e.g. "≥ 1.5×"
    digits: int = 2


@dataclasses.dataclass(frozen=True)
class Bench:
    """One benchmark script: what it compares, its arguments (full and ``--quick``) and its headlines."""

    name: str
    script: str
    what: str
    args: tuple[str, ...]
    quick_args: tuple[str, ...]
    figures: tuple[Figure, ...]
    plot: Callable[[list[Result]], bytes | None] | None = None
    timeout_s: float = 3600.0
    #: Runs of this benchmark whatever ``--repeats`` says, with the reason the page shows (None: ``--repeats``).
    runs: tuple[int, str] | None = None

    def argv(self, quick: bool) -> list[str]:
        """The command line after the interpreter (``--json`` first)."""
        return [f"benchmarks/{self.script}", "--json", *(self.quick_args if quick else self.args)]


def _reads(*path: str) -> Callable[[Result], float | None]:
    """A reader of the number at ``path``."""
    return lambda r: num(r, *path)


def _trl_figures() -> tuple[Figure, ...]:
    out = []
    for key, label in (("no_checkpointing", "both without"), ("checkpointing", "both with")):
        out += [
            Figure(f"like for like, {label} checkpointing: tokens/s tirl ÷ TRL",
                   _reads("like_for_like", key, "tokens_per_s_ratio"), "×", "≥ 1.5×"),
            Figure(f"like for like, {label} checkpointing: training memory tirl ÷ TRL",
                   _reads("like_for_like", key, "train_mem_ratio"), "×", "≤ 1.0×"),
        ]  # fmt: skip
    out += [
        Figure("each side's defaults: tokens/s tirl ÷ TRL", _reads("defaults", "tokens_per_s_ratio"), "×"),
        Figure("each side's defaults: training memory tirl ÷ TRL", _reads("defaults", "train_mem_ratio"), "×"),
    ]
    return tuple(out)


def _pipeline_figures() -> tuple[Figure, ...]:
    def pipe_over(workload: str, other: str) -> Callable[[Result], float | None]:
        return lambda r: ratio(num(r, "workloads", workload, "pipeline"), num(r, "workloads", workload, other))

    out = [
        Figure("heavy-tail: pipeline ÷ gather_all (trajectories/s)", pipe_over("heavy-tail", "gather_all"), "×"),
        Figure("heavy-tail: pipeline ÷ async_batch_equal", pipe_over("heavy-tail", "async_batch_equal"), "×",
               "≥ 1.45×"),
        Figure("heavy-tail: pipeline ÷ sync_batch_equal", pipe_over("heavy-tail", "sync_batch_equal"), "×", "≥ 1.7×"),
    ]  # fmt: skip
    for side in ("pipeline", "gather_all"):
        out += [
            Figure(f"heavy-tail: peak live environments, {side}", _reads("headline", "max_live_envs", side), "", "", 0),
            Figure(f"heavy-tail: peak traced heap, {side}", _reads("headline", "peak_traced_mb", side), "MB"),
        ]
    for w in ("init-heavy", "run-heavy", "eval-heavy", "heavy-tail"):
        out.append(Figure(f"{w}: pipeline ÷ bound", pipe_over(w, "bound"), "", "≥ 0.93", 3))
    return tuple(out)


#: The entries of ``bench_pipeline.py --real`` (pipeline_real.REAL_ENTRIES), in the order the page shows them.
REAL_ENTRIES = ("pipeline", "gather_all", "async_batch_equal", "sync_batch")


#: ``--quick``: 2 tasks x 2, 2 turns of 8 tokens (tests/rollout/test_pipeline_real.py's size).
REAL_QUICK = ("--real", "--real-tasks", "2", "--real-group", "2", "--real-max-turns", "2", "--real-max-new", "8",
              "--real-run-workers", "2", "--real-batch-window", "0.01")  # fmt: skip


def _swe_generation_figures() -> tuple[Figure, ...]:
    """``bench_swe_generation.py``: the off ÷ on ratios over its own alternating rounds, and the sides' seconds."""
    return (
        Figure("rollout seconds: off ÷ on, median of the rounds", _reads("rollout_off_over_on", "median"), "×"),
        Figure("rollout seconds: off ÷ on, lowest round", _reads("rollout_off_over_on", "min"), "×"),
        Figure("rollout seconds: off ÷ on, highest round", _reads("rollout_off_over_on", "max"), "×"),
        Figure("step seconds: off ÷ on, median of the rounds", _reads("step_off_over_on", "median"), "×"),
        Figure("rollout seconds, on side", _reads("rollout_s_on", "median"), "s", "", 1),
        Figure("rollout seconds, off side", _reads("rollout_s_off", "median"), "s", "", 1),
        Figure("same episodes on both sides (1 = yes)", lambda r: float(bool(r.get("same_episodes"))), "", "", 0),
    )


def _sandbox_spawn_figures() -> tuple[Figure, ...]:
    """``bench_sandbox_spawn.py``: fallback ÷ helpers per command and on ``tirl eval``, over its own rounds."""
    return (
        Figure("per command: preexec_fn ÷ helpers, median of rounds",
               _reads("per_command_wall_fallback_over_helpers", "median"), "×"),
        Figure("per command, helpers", _reads("per_command_wall_ms", "helpers", "median"), "ms", "", 1),
        Figure("per command, preexec_fn", _reads("per_command_wall_ms", "preexec_fn", "median"), "ms", "", 1),
        Figure("tirl eval wall: preexec_fn ÷ helpers, median of rounds",
               _reads("eval_wall_fallback_over_helpers", "median"), "×"),
        Figure("tirl eval wall: preexec_fn ÷ helpers, lowest round",
               _reads("eval_wall_fallback_over_helpers", "min"), "×"),
        Figure("tirl eval wall: preexec_fn ÷ helpers, highest round",
               _reads("eval_wall_fallback_over_helpers", "max"), "×"),
        Figure("same eval outcomes on both sides (1 = yes)", lambda r: float(bool(r.get("same_outcomes"))), "", "", 0),
    )  # fmt: skip


_ROUNDS_IN_ONE_RUN = (1, "one run holds three rounds that alternate which side goes first; the spread is in its "
                      "lowest/highest rows.")  # fmt: skip


#: ``--quick`` for ``bench_swe_generation.py``: one round of 2 episodes of 3 turns
_SWE_QUICK = ("--repeats", "1", "--prompts", "1", "--set", "algo.group_size=2", "--set", "env.max_turns=3")
_SWE_CONTINUOUS = ("--on", "generation.continuous_batching=true", "--off", "generation.continuous_batching=false")
_SWE_GENERATION_RUNS = (
    1,
    "one run holds three rounds that alternate which side goes first (on then off, off then on, on then off); "
    "the ratio's spread is in its lowest/highest rows. Both sides are full `tirl train` subprocesses.",
)


def _pipeline_real_figures() -> tuple[Figure, ...]:
    def over(other: str) -> Callable[[Result], float | None]:
        return lambda r: ratio(num(r, "real", "pipeline", "traj_per_s"), num(r, "real", other, "traj_per_s"))

    out = [Figure(f"pipeline ÷ {other} (trajectories/s)", over(other), "×") for other in REAL_ENTRIES[1:]]
    for side in REAL_ENTRIES:
        out += [
            Figure(f"{side}: trajectories/s", _reads("real", side, "traj_per_s"), "traj/s"),
            Figure(f"{side}: generator busy fraction", _reads("real", side, "gpu_util"), "", "", 3),
            Figure(f"{side}: peak live environments", _reads("real", side, "max_live_envs"), "", "", 0),
            Figure(f"{side}: peak RSS above the entry's start", _reads("real", side, "rss_peak_mb"), "MB", "", 0),
        ]
    return tuple(out)


def _pipeline_plot(results: list[Result]) -> bytes | None:
    """Heavy-tail: trajectories per second against peak live environments, one point per entry and run."""
    rows = [at(r, "memory", "heavy-tail") for r in results]
    if not all(isinstance(row, dict) and row for row in rows):
        return None
    fig, ax = _figure()
    for i, name in enumerate(rows[0]):
        xs = [row[name]["max_live_envs"] for row in rows]
        ys = [row[name]["traj_per_s"] for row in rows]
        ax.scatter(xs, ys, color=f"C{i}", label=name, s=28, alpha=0.8)
    ax.set_xlabel("peak live environments")
    ax.set_ylabel("trajectories per second (model time)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="lower right")
    return _png(fig)


def _figure() -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(5.5, 3.4), dpi=110)


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _async_plot(results: list[Result]) -> bytes | None:
    """Steps per hour against the staleness bound K, disaggregated and on a shared device, one line per run."""
    if not all(isinstance(at(r, "by_k"), dict) and at(r, "by_k") for r in results):
        return None
    fig, ax = _figure()
    where = (((), "C0", "disaggregated"), (("shared_device",), "C1", "shared device"))
    for i, r in enumerate(results):
        for path, color, label in where:
            curve = at(r, *path, "by_k")
            if not isinstance(curve, dict):
                continue
            ks = sorted(curve, key=int)
            ys = [3600 * r["sync"]["steps_per_s"], *(3600 * curve[k] for k in ks)]
            ax.plot([0, *map(int, ks)], ys, "o-", color=color, alpha=0.6, label=label if i == 0 else None)
    ax.axhline(3600 * results[0]["sync_batch"]["steps_per_s"], color="C3", ls=":", label="sync_batch (K = 0)")
    ax.axhline(3600 * results[0]["bound"]["steps_per_s"], color="C0", ls="--", label="bound, disaggregated")
    shared = num(results[0], "shared_device", "bound", "steps_per_s")
    if shared is not None:
        ax.axhline(3600 * shared, color="C1", ls="--", label="bound, shared device")
    ax.set_xticks(range(0, 1 + max(int(k) for r in results for k in r["by_k"])))
    ax.set_xlabel("max staleness K (steps; K = 0 is sync)")
    ax.set_ylabel("training steps per hour")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="lower right")
    return _png(fig)


def _staleness_plot(results: list[Result]) -> bytes | None:
    """Held-out accuracy after training against the staleness bound K: each seed's run, the mean per run."""
    if not all(isinstance(at(r, "by_k"), dict) and at(r, "by_k") for r in results):
        return None
    fig, ax = _figure()
    for i, r in enumerate(results):
        ks = sorted(r["by_k"], key=int)
        for k in ks:
            seeds = r["by_k"][k]["accuracy_after"]
            ax.scatter([int(k)] * len(seeds), list(seeds.values()), color="C0", s=14, alpha=0.5,
                       label="one seed" if i == 0 and k == ks[0] else None)  # fmt: skip
        ax.plot([int(k) for k in ks], [r["by_k"][k]["accuracy_after_mean"] for k in ks], "o-", color="C1",
                alpha=0.7, label="mean over the seeds" if i == 0 else None)  # fmt: skip
    before = [v for r in results for v in at(r, "by_k", "0", "accuracy_before").values()]
    if before:
        ax.axhline(sum(before) / len(before), color="C3", ls=":", label="before training (mean)")
    ax.set_xticks(sorted({int(k) for r in results for k in r["by_k"]}))
    ax.set_xlabel("max staleness K (rollout.max_staleness; 0 = on-policy)")
    ax.set_ylabel("held-out accuracy after training")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="lower left")
    return _png(fig)


def _seed_extreme(k: str, pick: Callable[[list[float]], float]) -> Callable[[Result], float | None]:
    """The smallest or largest per-seed paired difference of K = ``k`` (None when there is none)."""

    def read(r: Result) -> float | None:
        diffs = at(r, "by_k", k, "diff_vs_k0")
        values = [float(v) for v in diffs.values() if isinstance(v, int | float)] if isinstance(diffs, dict) else []
        return pick(values) if values else None

    return read


def _staleness_figures() -> tuple[Figure, ...]:
    out = [Figure("K = 0: held-out accuracy after training (mean over seeds)",
                  _reads("by_k", "0", "accuracy_after_mean"), "", "", 3)]  # fmt: skip

    def auc_drop(k: str) -> Callable[[Result], float | None]:
        return lambda r: ratio(num(r, "by_k", k, "reward_auc_mean"), num(r, "by_k", "0", "reward_auc_mean"))

    for k in ("1", "2", "4"):
        out.append(Figure(f"K = {k}: training-reward area ÷ K = 0's (learning speed)", auc_drop(k), "×", "", 3))
        out += [
            Figure(f"K = {k}: accuracy − K = 0's (mean paired difference)", _reads("by_k", k, "diff_vs_k0_mean"),
                   "", "", 3),
            Figure(f"K = {k}: smallest paired difference over the seeds", _seed_extreme(k, min), "", "", 3),
            Figure(f"K = {k}: largest paired difference over the seeds", _seed_extreme(k, max), "", "", 3),
            Figure(f"K = {k}: steps per second ÷ K = 0's (this machine, generator and update on one CPU; "
                   "only runs made by this invocation, none read from --out)", _reads("by_k", k, "speed_vs_k0"), "×"),
        ]  # fmt: skip
    return tuple(out)


BENCHMARKS: tuple[Bench, ...] = (
    Bench(
        "trainer_vs_trl",
        "bench_trainer_vs_trl.py",
        "tirl's trainer against TRL's GRPOTrainer on the same model, task, prompts and steps, each in its own "
        "process: like for like (both with or both without gradient checkpointing, the same padded tokens in "
        "flight: TRL's micro-batch through gradient accumulation, tirl's budget set to what that micro-batch "
        "holds; the same threads), then each side's defaults.",
        ("--repeats", "1"),
        ("--steps", "2", "--prompts", "2", "--group", "4", "--max-new", "16"),
        _trl_figures(),
    ),
    Bench(
        "filter",
        "bench_filter.py",
        "`judge_message` alone (best of 7, CPU time), then `tirl filter` end to end on 25,000 four-turn "
        "trajectories against a one-process reference loop, each side a subprocess.",
        ("--cli-repeats", "1"),
        ("--turns", "2000", "--repeats", "1", "--trajectories", "500", "--cli-repeats", "1"),
        (
            Figure("`judge_message`: turns per CPU second", lambda r: num(r, "turns_per_s"), "turns/s", "≥ 200,000", 0),
            Figure(
                "`tirl filter --workers 1`: turns per CPU second",
                _reads("turns_per_cpu_s_one_worker", "median"),
                "turns/s",
                "≥ 100,000",
                0,
            ),
            Figure(
                "reference loop (one process): turns per CPU second",
                _reads("reference_turns_per_cpu_s", "median"),
                "turns/s",
                "",
                0,
            ),
            Figure(
                "`tirl filter` (default workers): turns per wall second",
                _reads("parallel", "turns_per_s", "median"),
                "turns/s",
                "",
                0,
            ),
        ),
    ),
    Bench(
        "sandbox",
        "bench_sandbox.py",
        "The warm bubblewrap pool against the same fork-server design without isolation (the cost of "
        "isolation) and against a cold `python -c` (the start-up saving): p50 latency one at a time, executions "
        "per second at 4 × cores in flight.",
        ("--runs", "1"),
        ("--n", "20", "--runs", "1", "--skip-bwrap"),
        (
            Figure("warm pool p50", _reads("summary", "warm_pool", "p50_ms", "median"), "ms"),
            Figure("warm unisolated fork server p50", _reads("summary", "warm_unisolated", "p50_ms", "median"), "ms"),
            Figure("`python -c` p50", _reads("summary", "unisolated", "p50_ms", "median"), "ms"),
            Figure(
                "cost of isolation: warm pool p50 ÷ warm unisolated p50",
                _reads("summary", "isolation_cost_p50", "median"),
                "×",
                "",
                3,
            ),
            Figure(
                "cost of isolation: warm pool executions/s ÷ warm unisolated",
                _reads("summary", "isolation_cost_per_s", "median"),
                "×",
                "",
                3,
            ),
            Figure(
                "start-up saving: warm pool p50 ÷ `python -c` p50",
                _reads("summary", "warm_pool_p50_vs_unisolated", "median"),
                "×",
                "≤ 0.125×",
                3,
            ),
            Figure(
                "warm pool: isolated executions per second",
                _reads("summary", "warm_pool", "per_s", "median"),
                "exec/s",
                "≥ 1000/s",
                0,
            ),
        ),
    ),
    Bench(
        "pipeline",
        "bench_pipeline.py",
        "The three-stage pipeline against batch baselines on four simulated workloads (real scheduling code, "
        "modelled generator and sandbox, real-time clock; `--quick`: the exact virtual clock, heavy-tail only, "
        "a tenth of its trajectories).",
        (),
        ("--virtual", "--workloads", "heavy-tail", "--n-scale", "0.1"),
        _pipeline_figures(),
        plot=_pipeline_plot,
    ),
    Bench(
        "pipeline_real",
        "bench_pipeline.py",
        "The same strategies on the real SWE job (`--real`): swe-lite's preset (10 turns of 384 tokens), its "
        "curriculum tasks, real workspaces and the real pytest judge in the sandbox, the env's built-in policy "
        "(`tiny-swe`, the swe-lite warm start, sampled at the job's temperature 0.7) in this process (one CPU for the "
        "generator, the env's Python and the sandbox), 16 tasks x 4 samples, every strategy at the same "
        "live-environment budget; untimed warm-up first. Its episodes run most of their 10 turns.",
        ("--real",),
        REAL_QUICK,
        _pipeline_real_figures(),
    ),
    Bench(
        "swe_prefix_cache",
        "bench_swe_generation.py",
        "The in-process generator's prefix cache on the SWE job: `tirl train --env swe-lite` (tiny-swe, real "
        "workspaces and pytest, the pipeline) with tirl's defaults against `generation.prefix_cache_mb=0`, one "
        "step of 4 prompts x 8 episodes each, sides alternating first; both sides sample the same episodes "
        "(`--quick`: 2 episodes of 3 turns).",
        ("--off", "generation.prefix_cache_mb=0", "--repeats", "3"),
        ("--off", "generation.prefix_cache_mb=0", *_SWE_QUICK),
        _swe_generation_figures(),
        runs=_SWE_GENERATION_RUNS,
    ),
    Bench(
        "swe_continuous",
        "bench_swe_generation.py",
        "Continuous batching on the SWE job: the same runs with `generation.continuous_batching=true` (off by "
        "default) against `false` (a request that arrives while a batch runs waits for the next batch).",
        (*_SWE_CONTINUOUS, "--repeats", "3"),
        (*_SWE_CONTINUOUS, *_SWE_QUICK),
        _swe_generation_figures(),
        runs=_SWE_GENERATION_RUNS,
    ),
    Bench(
        "sandbox_spawn",
        "bench_sandbox_spawn.py",
        "Starting a sandboxed command from a big parent: the helper chain (sh, setpriv, prlimit; CPython can "
        "vfork) against the preexec_fn fallback (CPython forks the parent) — bubblewrap commands from a parent "
        "holding 1,400 MB, and `tirl eval --env swe-lite` on 32 validation tasks each way, sides alternating "
        "first (`--quick`: 3 commands from 200 MB, 2 tasks).",
        ("--repeats", "3"),
        ("--repeats", "1", "--n", "3", "--parent-mb", "200", "--eval-tasks", "2"),
        _sandbox_spawn_figures(),
        runs=_ROUNDS_IN_ONE_RUN,
    ),
    Bench(
        "async",
        "bench_async.py",
        "Synchronous against bounded-staleness asynchronous RL on the heavy-tail workload (virtual clock: exact "
        "and load-independent; training modelled as 0.5 × a sync step's rollout time, not on the generator).",
        (),
        ("--tasks", "4", "--steps", "4"),
        (
            Figure(
                "shared device: async ÷ sync (steps/s)",
                lambda r: ratio(num(r, "shared_device", "async", "steps_per_s"), num(r, "sync", "steps_per_s")),
                "×",
            ),
            Figure(
                "shared device: async ÷ its bound",
                lambda r: ratio(
                    num(r, "shared_device", "async", "steps_per_s"), num(r, "shared_device", "bound", "steps_per_s")
                ),
                "",
                "",
                3,
            ),
            Figure("modelled weight sync per update", _reads("weight_sync", "sync_s"), "s"),
            Figure(
                "disaggregated: async ÷ sync (steps/s)",
                lambda r: ratio(num(r, "async", "steps_per_s"), num(r, "sync", "steps_per_s")),
                "×",
                "≥ 1.4×",
            ),
            Figure(
                "disaggregated: async ÷ sync_batch",
                lambda r: ratio(num(r, "async", "steps_per_s"), num(r, "sync_batch", "steps_per_s")),
                "×",
                "≥ 2.5×",
            ),
            Figure(
                "disaggregated: async ÷ bound",
                lambda r: ratio(num(r, "async", "steps_per_s"), num(r, "bound", "steps_per_s")),
                "",
                "≥ 0.9",
            ),
            Figure("best staleness bound K", lambda r: num(r, "async", "max_staleness"), "", "", 0),
        ),
        plot=_async_plot,
    ),
    Bench(
        "staleness",
        "bench_staleness.py",
        "The learning cost of bounded staleness: `tirl train` with its defaults (the main job) at "
        "`rollout.max_staleness` K = 0, 1, 2, 4, three paired seeds each (seed s sets trainer.seed and env.seed), "
        "each a real `tirl train` subprocess; held-out accuracy after training and the paired difference against "
        "K = 0 (`--quick`: 1 seed, K = 0 and 1, 1 step of 2 x 2 episodes, 2 held-out tasks).",
        ("--seeds", "3"),
        (
            "--seeds",
            "1",
            "--ks",
            "0,1",
            "--steps",
            "1",
            "--eval-size",
            "2",
            "--set",
            "trainer.prompts_per_step=2",
            "--set",
            "algo.group_size=2",
        ),
        _staleness_figures(),
        plot=_staleness_plot,
        timeout_s=14400.0,  # 12 main jobs one after the other: ~45 min idle, up to 4 h on a loaded machine
        runs=(
            1,
            "one run holds the three paired seeds, which are its repeats: the range column of a one-run figure is "
            "empty, and the per-seed spread is in the `smallest`/`largest` rows. A K = 0 run of a seed reruns "
            "bit-identically; under K > 0 the batches depend on timing (see the script's docstring). Accuracy "
            "does not depend on the machine's load, so this run is gated like the others but its learning figures "
            "hold at any load; only its steps-per-second rows need a quiet machine.",
        ),
    ),
    Bench(
        "sampling",
        "bench_sampling.py",
        "tirl's in-process sampler (`HFGenerator`) against transformers' `model.generate` on the main job's "
        "model, prompts, batch and lengths (same threads), and against the FLOP bound (FLOPs per token ÷ the "
        "measured FLOP/s of the decode step's matmuls); `fixed`: every row generates `--max-new` tokens.",
        (),
        (
            "--repeats",
            "1",
            "--turn1",
            "8",
            "--later",
            "4",
            "--max-new",
            "16",
            "--episodes",
            "4",
            "--workers",
            "2",
            "--turns",
            "2",
        ),
        (
            Figure(
                "turn1 (64 rows), fixed: tirl ÷ `generate` (tokens/s)",
                _reads("scenarios", "turn1", "fixed", "tirl_over_generate", "median"),
                "×",
            ),
            Figure(
                "turn1, EOS ends rows: tirl ÷ `generate`",
                _reads("scenarios", "turn1", "eos", "tirl_over_generate", "median"),
                "×",
            ),
            Figure(
                "later (16 rows, 1-4 tool turns), fixed: tirl ÷ `generate`",
                _reads("scenarios", "later", "fixed", "tirl_over_generate", "median"),
                "×",
            ),
            Figure(
                "turn1, fixed: tirl tokens/s",
                _reads("scenarios", "turn1", "fixed", "tirl_tokens_per_s", "median"),
                "tok/s",
                "",
                0,
            ),
            Figure(
                "turn1: tirl ÷ FLOP bound",
                _reads("scenarios", "turn1", "bound", "tirl_fixed_over_bound", "median"),
                "",
                "",
                3,
            ),
            Figure(
                "later: tirl ÷ FLOP bound",
                _reads("scenarios", "later", "bound", "tirl_fixed_over_bound", "median"),
                "",
                "",
                3,
            ),
            Figure(
                "episodes: share of the generator's CPU in prefill",
                _reads("episodes", "cpu_share", "prefill"),
                "",
                "",
                2,
            ),
        ),
    ),
    Bench(
        "generation",
        "bench_generation.py",
        "In-process generation against the same model behind `tirl serve` (HTTP), at concurrency 32.",
        ("--rounds", "3"),
        ("--requests", "8", "--concurrency", "4", "--max-new-tokens", "8", "--rounds", "1"),
        (
            Figure("in-process", lambda r: num(r, "in_process", "tokens_per_s"), "tok/s", "", 0),
            Figure("`tirl serve`", lambda r: num(r, "http", "tokens_per_s"), "tok/s", "", 0),
            Figure(
                "HTTP overhead (1 − http ÷ in-process)",
                lambda r: _overhead(num(r, "http", "tokens_per_s"), num(r, "in_process", "tokens_per_s")),
                "",
                "≤ 0.15",
                3,
            ),
        ),
    ),
)
NAMES = tuple(b.name for b in BENCHMARKS)


def _overhead(http: float | None, local: float | None) -> float | None:
    r = ratio(http, local)
    return None if r is None else 1.0 - r
