"""The three-stage rollout pipeline: Initializer → Agent Runner → Evaluator.

Each stage has its own pool of asyncio workers (``RolloutConfig.init_workers``,
``run_workers``, ``eval_workers``):

- **Initializer**: ``env_factory(task)`` then ``env.reset(task, seed=...)``
  under ``init_timeout_s``, retried ``retries`` times with a fresh env (the
  failed one is closed first).
- **Agent Runner**: the :class:`~tirl.rollout.base.EpisodeRunner` (generation
  and tool calls interleaved; the generator batches requests from all
  runners) under ``run_timeout_s``. Not retried: a half-run episode has
  already written tokens and mutated its env, so a retry would need a new
  env *and* a new trajectory; the group resampler upstream is the place for
  that.
- **Evaluator**: ``env.evaluate()`` under ``eval_timeout_s``, retried
  ``retries`` times on the same env (evaluation is expected to be
  idempotent), then ``env.close()``.

The stages are joined by ``init_queue`` (every episode of the request, no
env yet), ``run_queue`` (``run_queue_size``) and ``eval_queue``
(``eval_queue_size``). The last two are bounded: a full queue blocks the
upstream worker (backpressure) and caps the number of live environments at
``init_workers + run_queue_size + run_workers + eval_queue_size +
eval_workers``.

Faults are accounted, never lost: every episode ends with a termination
reason — ``init_failed`` (reset failed or timed out on every attempt),
``error`` (the runner raised), ``timeout`` (the runner ran past
``run_timeout_s``), ``eval_failed`` (evaluate failed or timed out on every
attempt) — with ``Trajectory.error`` saying what happened, and the batch
always has ``len(tasks) * group_size`` trajectories. A run cut by
``run_timeout_s`` while at least half of its time went to ``env.step`` (the
episode's own commands: :func:`tool_seconds`) is no failure but the
episode's: it ends ``tool_timeout``, truncated, and is evaluated as it stands
(a turn of many blocks that each run to the sandbox's timeout let a policy
leave a failing trajectory out of the update).

:class:`Stages` (the stage bodies and their accounting) and
:func:`pipeline` (this schedule) are used by the one strategy class,
:class:`tirl.rollout.strategies.Rollout`, whose other schedules (the
``sync_batch`` and ``async_batch`` baselines) call the same stage bodies and
differ only in *when* they call them.

Not covered: distributing stages over machines (see ``tirl.distributed``),
retrying the Agent Runner, and priority scheduling (episodes enter the
Initializer in request order).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tirl.config import RolloutConfig
from tirl.envs.base import NONFINITE_REWARD, Env, EvalResult, Task, checked_result
from tirl.errors import describe
from tirl.rollout.base import EnvFactory, EpisodeRunner, RolloutBatch, RolloutRequest
from tirl.rollout.batch_stats import RETRIED_STAGES, RolloutStats
from tirl.rollout.trace import STAGES, StageBoard, TraceSummary
from tirl.types import Group, Message, StageTiming, TerminationReason, Trajectory

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 30.0


def tool_seconds(traj: Trajectory, elapsed_s: float) -> float:
    """Seconds of a run cut after ``elapsed_s`` that went to ``env.step`` (the episode's own commands).

    The sum of the turn records' ``env_s``, plus, when the last record has none (the runner records it when
    the step returns, :class:`~tirl.rollout.agent_loop.AgentLoop`), the run's time not accounted to a turn:
    the step in flight when the run was cut. A runner that keeps no turn records gives 0.
    """
    tools = sum(t.env_s for t in traj.turns)
    if traj.turns and traj.turns[-1].env_s == 0.0:
        tools += max(0.0, elapsed_s - sum(t.gen_s + t.env_s for t in traj.turns))
    return tools


def trajectory_id(step: int, task_index: int, k: int) -> str:
    """The id of the ``k``-th sample of task ``task_index`` at ``step``: ``s{step}-t{task_index}-g{k}``."""
    return f"s{step}-t{task_index}-g{k}"


def episode_seed(step: int, task_index: int, k: int) -> int:
    """The deterministic ``seed`` passed to ``env.reset`` (the same on every retry)."""
    return (step * 1_000_003 + task_index * 10_007 + k) % (2**31)


@dataclass(slots=True, eq=False)
class Episode:
    """One trajectory in flight: its task, its env (once initialised) and its record."""

    index: int
    task_index: int
    k: int
    task: Task
    seed: int
    traj: Trajectory
    env: EnvHandle | None = None
    initial: list[Message] = field(default_factory=list)
    done: bool = False


def make_episodes(request: RolloutRequest) -> list[Episode]:
    """``group_size`` episodes per task, in task order, with ids, group, answer and policy version set.

    Ids and seeds use the step-level task index and sample number of the
    request (:meth:`RolloutRequest.task_index`, :meth:`RolloutRequest.sample_index`),
    so they are unique within a step across resample rounds.
    """
    episodes: list[Episode] = []
    for i, task in enumerate(request.tasks):
        ti = request.task_index(i)
        for k in range(request.group_size):
            n = request.sample_index(k)
            traj = Trajectory(
                id=trajectory_id(request.step, ti, n),
                messages=[],
                group=task.id,
                answer=task.answer,
                stages={s: StageTiming() for s in STAGES},
                policy_version=request.policy_version,
            )
            episodes.append(Episode(len(episodes), i, k, task, episode_seed(request.step, ti, n), traj))
    return episodes


class EnvHandle:
    """A live env with an exactly-once ``close`` that completes even if its caller is cancelled."""

    def __init__(self, env: Env, on_closed: Callable[[EnvHandle, str | None], None], timeout_s: float) -> None:
        self.env = env
        self._on_closed = on_closed
        self._timeout_s = timeout_s
        self._closing: asyncio.Future[None] | None = None

    @property
    def closing(self) -> bool:
        """``close`` has been called."""
        return self._closing is not None

    async def close(self) -> None:
        """Close the env once; later calls wait for the same close."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        error: str | None = None
        try:
            async with asyncio.timeout(self._timeout_s):
                await self.env.close()
        except TimeoutError:
            error = f"env.close() timed out after {self._timeout_s}s"
        except Exception as exc:
            error = f"env.close() raised {type(exc).__name__}: {exc}"
        finally:
            self._on_closed(self, error)


def _cancel_is_ours() -> bool:
    """True when the current task itself is being cancelled (not a stray CancelledError from below)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Stages:
    """The bodies of the three stages for one ``collect``, with their accounting.

    Strategies call :meth:`initialize`, :meth:`run`, :meth:`evaluate` and
    :meth:`finish` for each episode and decide only when and how many at once.
    ``counts`` collects attempts, retries, timeouts and close errors.
    """

    def __init__(
        self,
        cfg: RolloutConfig,
        env_factory: EnvFactory,
        runner: EpisodeRunner,
        board: StageBoard,
        *,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
    ) -> None:
        self.cfg = cfg
        self.env_factory = env_factory
        self.runner = runner
        self.board = board
        self.close_timeout_s = close_timeout_s
        self._clock = asyncio.get_running_loop().time  # time.monotonic, or a test's virtual clock
        self.t0 = self._clock()
        self.counts: Counter[str] = Counter()
        self.live: set[EnvHandle] = set()
        self.finished = 0
        self._warned: set[object] = set()  # the reward sources already warned of (one line each per collect)

    def now(self) -> float:
        """Seconds since this ``collect`` started."""
        return round(self._clock() - self.t0, 6)

    def queue(self, ep: Episode, stage: str) -> None:
        """``ep`` now waits for ``stage``."""
        ep.traj.stages[stage].queued = self.now()
        self.board.queue(stage)

    async def handoff(self, ep: Episode, src: str, dst: str, q: asyncio.Queue[Episode]) -> None:
        """Put ``ep`` into the bounded queue of ``dst``, counting the wait as backpressure on ``src``."""
        ep.traj.stages[dst].queued = self.now()
        if q.full():
            self.board.block(src)
            try:
                await q.put(ep)
            finally:
                self.board.unblock(src)
        else:
            q.put_nowait(ep)
        self.board.queue(dst)

    def _begin(self, ep: Episode, stage: str) -> StageTiming:
        timing = ep.traj.stages[stage]
        timing.started = self.now()
        self.board.start(stage)
        return timing

    def _end(self, timing: StageTiming, stage: str) -> None:
        timing.finished = self.now()
        self.board.finish(stage)

    def _fail(self, ep: Episode, reason: TerminationReason, error: str) -> None:
        if ep.traj.termination is not None and not ep.traj.termination.is_failure:
            ep.traj.info["run_termination"] = ep.traj.termination.value
        ep.traj.termination = reason
        ep.traj.error = error

    def _open(self, env: Env) -> EnvHandle:
        handle = EnvHandle(env, self._closed, self.close_timeout_s)
        self.live.add(handle)
        self.board.env_opened()
        return handle

    def _closed(self, handle: EnvHandle, error: str | None) -> None:
        self.live.discard(handle)
        self.board.env_closed()
        self.counts["closes"] += 1
        if error is not None:
            self.counts["close_errors"] += 1
            log.warning("%s", error)

    def _attempts(self, timing: StageTiming, stage: str) -> Iterator[int]:
        """``1 + rollout.retries`` attempts of ``stage``, each counted as it starts."""
        for attempt in range(self.cfg.retries + 1):
            timing.attempts += 1
            self.counts[f"{stage}_attempts"] += 1
            yield attempt

    def _attempt_error(self, exc: BaseException, stage: str, what: str, verb: str) -> str:
        """The text of one failed attempt of ``stage``; our own cancellation is re-raised, never recorded."""
        if isinstance(exc, TimeoutError):
            self.counts[f"{stage}_timeouts"] += 1
            limit = getattr(self.cfg, f"{stage}_timeout_s")
            return f"{what} timed out after {limit}s (rollout.{stage}_timeout_s)"
        if isinstance(exc, asyncio.CancelledError):
            if _cancel_is_ours():
                raise exc
            return f"{what} raised a stray CancelledError"
        return f"{what} {verb} {describe(exc)}"

    async def initialize(self, ep: Episode) -> bool:
        """Create and reset an env (with timeout and retries); False = the episode ended ``init_failed``."""
        timing = self._begin(ep, "init")
        try:
            error = ""
            for _ in self._attempts(timing, "init"):
                handle: EnvHandle | None = None
                try:
                    async with asyncio.timeout(self.cfg.init_timeout_s):
                        try:
                            env = self.env_factory(ep.task)
                        except Exception as exc:
                            error = f"env factory failed: {describe(exc)}"
                            continue
                        handle = self._open(env)
                        ep.initial = list(await handle.env.reset(ep.task, seed=ep.seed))
                    ep.env = handle
                    return True
                except (Exception, asyncio.CancelledError) as exc:
                    error = self._attempt_error(exc, "init", "env reset", "failed:")
                if handle is not None:
                    await handle.close()
            self._fail(ep, TerminationReason.INIT_FAILED, f"{error} [{timing.attempts} attempt(s)]")
            return False
        finally:
            self._end(timing, "init")

    async def run(self, ep: Episode) -> bool:
        """Run the episode (with timeout); False = it ended ``error``/``timeout`` and skips evaluation.

        A timeout with at least half the run in ``env.step`` ends ``tool_timeout`` (evaluated; the module docstring).
        """
        assert ep.env is not None, "run() before a successful initialize()"
        timing = self._begin(ep, "run")
        timing.attempts += 1
        self.counts["run_attempts"] += 1
        start = time.perf_counter()  # the clock of the turn records' gen_s/env_s
        try:
            async with asyncio.timeout(self.cfg.run_timeout_s):
                await self.runner(ep.env.env, ep.task, ep.initial, ep.traj)
        except (Exception, asyncio.CancelledError) as exc:
            reason = TerminationReason.TIMEOUT if isinstance(exc, TimeoutError) else TerminationReason.ERROR
            error = self._attempt_error(exc, "run", "agent runner", "raised")  # counts it; re-raises our own cancel
            elapsed = time.perf_counter() - start
            tools = tool_seconds(ep.traj, elapsed)
            if reason is TerminationReason.TIMEOUT and 2 * tools >= elapsed:  # the episode's commands took the time
                ep.traj.termination = TerminationReason.TOOL_TIMEOUT
                ep.traj.info["run_timeout"] = {"limit_s": self.cfg.run_timeout_s, "tool_s": round(tools, 3)}
            else:
                self._fail(ep, reason, error)
        else:
            if ep.traj.termination is None:
                self._fail(ep, TerminationReason.ERROR, "agent runner returned without setting traj.termination")
        finally:
            self._end(timing, "run")
        return not ep.traj.failed

    async def evaluate(self, ep: Episode) -> None:
        """Compute the reward (with timeout and retries); on failure the episode ends ``eval_failed``.

        The result is stored through :func:`~tirl.envs.base.checked_result`: a reward that is not a number
        ends the episode ``eval_failed`` at once (retrying the same code gives the same type); a non-finite one
        scores the episode 0 (``eval_failure`` ``nonfinite_reward``) and is logged once per source.
        """
        assert ep.env is not None, "evaluate() before a successful initialize()"
        timing = self._begin(ep, "eval")
        try:
            error = ""
            for _ in self._attempts(timing, "eval"):
                try:
                    async with asyncio.timeout(self.cfg.eval_timeout_s):
                        result = await ep.env.env.evaluate()
                except (Exception, asyncio.CancelledError) as exc:
                    error = self._attempt_error(exc, "eval", "evaluation", "failed:")
                    continue
                error = self._store(ep, result)
                if not error:
                    return
                break
            self._fail(ep, TerminationReason.EVAL_FAILED, f"{error} [{timing.attempts} attempt(s)]")
        finally:
            self._end(timing, "eval")

    def _store(self, ep: Episode, result: EvalResult) -> str:
        """Put ``result`` into the trajectory; the failure text when it cannot be stored, else ``""``."""
        assert ep.env is not None
        env = ep.env.env
        source = f"env {getattr(env, 'name', '?')!r} ({type(env).__module__}.{type(env).__qualname__}.evaluate)"
        try:
            checked = checked_result(result, source)
        except Exception as exc:
            return f"evaluation failed: {describe(exc)}"
        ep.traj.reward, ep.traj.correct = checked.reward, checked.correct
        if checked.info:
            ep.traj.info["eval"] = checked.info
        where = checked.info.get("reward_source")
        if checked.info.get("eval_failure") == NONFINITE_REWARD and where not in self._warned:
            self._warned.add(where)
            log.warning(
                "%s returned the reward %s: the episode scores 0 (counted in rollout/eval_failure/%s)",
                where, checked.info.get("reward_returned"), NONFINITE_REWARD,
            )  # fmt: skip
        return ""

    async def finish(self, ep: Episode) -> None:
        """The episode is over: close its env (once) and count it."""
        if ep.env is not None:
            await ep.env.close()
        ep.done = True
        self.finished += 1

    async def shutdown(self) -> None:
        """Close every env still open (after cancellation or a crash); each is closed exactly once."""
        while self.live:
            await asyncio.gather(*(h.close() for h in list(self.live)), return_exceptions=True)

    def assemble(self, request: RolloutRequest, episodes: list[Episode], summary: TraceSummary) -> RolloutBatch:
        """Group the trajectories by task (request order) and add what the stages measured (:class:`RolloutStats`)."""
        groups = [Group(id=task.id, trajectories=[]) for task in request.tasks]
        for ep in episodes:
            groups[ep.task_index].trajectories.append(ep.traj)
        wall = self._clock() - self.t0
        stats = RolloutStats(
            episodes=len(episodes),
            wall_s=wall,
            max_live_envs=self.board.max_live_envs,
            close_errors=self.counts["close_errors"],
            snapshots=summary.snapshots,
            traced_s=summary.wall_s,
            generator_busy_s=summary.gpu_busy_s,
        )
        for stage, st in stats.stages.items():
            st.attempts = self.counts[f"{stage}_attempts"]
            st.timeouts = self.counts[f"{stage}_timeouts"]
            st.queue_depth_sum = summary.queue_sums[stage]
            for ep in episodes:
                timing = ep.traj.stages[stage]
                if timing.started is None or timing.finished is None:  # the episode never entered this stage
                    continue
                st.episodes += 1
                st.busy_s += timing.finished - timing.started
                st.wait_s += timing.started - (timing.queued if timing.queued is not None else timing.started)
            st.retries = st.attempts - st.episodes if stage in RETRIED_STAGES else 0
        return RolloutBatch(groups=groups, wall_s=wall, stats=stats)


async def pipeline(stages: Stages, episodes: list[Episode]) -> None:
    """Stream the episodes through three worker pools joined by bounded queues (see the module docstring).

    A long episode holds one runner worker, never the others; set-up and
    evaluation of other episodes overlap with generation; no barrier before
    the end of the request.
    """
    if not episodes:
        return
    cfg = stages.cfg
    init_queue: asyncio.Queue[Episode] = asyncio.Queue()
    for ep in episodes:
        init_queue.put_nowait(ep)
    run_queue: asyncio.Queue[Episode] = asyncio.Queue(maxsize=cfg.run_queue_size)
    eval_queue: asyncio.Queue[Episode] = asyncio.Queue(maxsize=cfg.eval_queue_size)
    # in the trace, so a diagnosis judges each depth against what its queue can hold
    stages.board.capacity = {"init": len(episodes), "run": cfg.run_queue_size, "eval": cfg.eval_queue_size}
    stages.board.workers = {"init": cfg.init_workers, "run": cfg.run_workers, "eval": cfg.eval_workers}
    all_done = asyncio.Event()

    async def finish(ep: Episode) -> None:
        await stages.finish(ep)
        if stages.finished == len(episodes):
            all_done.set()

    async def pass_on(ok: bool, ep: Episode, src: str, dst: str, q: asyncio.Queue[Episode]) -> None:
        if ok:
            await stages.handoff(ep, src, dst, q)
        else:  # the stage failed for good: the episode skips the rest
            await finish(ep)

    async def initializer() -> None:
        while not init_queue.empty():
            ep = init_queue.get_nowait()
            await pass_on(await stages.initialize(ep), ep, "init", "run", run_queue)

    async def agent_runner() -> None:
        while True:
            ep = await run_queue.get()
            await pass_on(await stages.run(ep), ep, "run", "eval", eval_queue)

    async def evaluator() -> None:
        while True:
            ep = await eval_queue.get()
            await stages.evaluate(ep)
            await finish(ep)

    async with asyncio.TaskGroup() as tg:
        workers = [tg.create_task(initializer(), name=f"init-{i}") for i in range(cfg.init_workers)]
        workers += [tg.create_task(agent_runner(), name=f"run-{i}") for i in range(cfg.run_workers)]
        workers += [tg.create_task(evaluator(), name=f"eval-{i}") for i in range(cfg.eval_workers)]
        await all_done.wait()
        for w in workers:
            w.cancel()
