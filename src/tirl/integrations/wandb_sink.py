"""A Weights & Biases sink for the per-step metrics, beside ``metrics.jsonl`` and TensorBoard (optional).

``trainer.wandb = "offline"`` writes a wandb run under ``<run_dir>/wandb/``
without any network (``wandb sync`` uploads it later); ``"online"`` logs to
the wandb server with the user's own credentials (``WANDB_API_KEY`` or
``wandb login``); ``"off"`` (default) does nothing and does not import
wandb. The project is ``trainer.wandb_project``; the run is named after the
run directory and carries the whole config. Each step's row of
``metrics.jsonl`` is logged with ``step=N`` (null values left out, as in
TensorBoard); a resumed run starts a new wandb run whose steps continue.

Not covered: trajectories, the report or checkpoints as wandb artifacts;
resuming the same wandb run id; wandb's system metrics are wandb's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from tirl.config import TirlConfig, config_to_dict
from tirl.errors import SetupError

__all__ = ["WandbSink", "metric_sinks"]


class WandbSink:
    """Logs each step's scalars to one wandb run (see the module docstring)."""

    def __init__(
        self, run_dir: str | Path, *, mode: Literal["offline", "online"], project: str, config: dict[str, Any]
    ) -> None:
        if mode not in ("offline", "online"):
            raise ValueError(f"wandb mode {mode!r} is not offline or online")
        try:
            import wandb
        except ImportError as exc:
            raise SetupError(f"trainer.wandb={mode} needs wandb ({exc}) — pip install 'tirl[wandb]'") from None
        run_dir = Path(run_dir)
        self._run = wandb.init(
            project=project,
            name=run_dir.name,
            dir=str(run_dir),
            mode=mode,
            config=config,
            settings=wandb.Settings(silent=True, console="off"),
            reinit="create_new",
        )

    @property
    def run_path(self) -> Path:
        """The wandb run's own directory (``<run_dir>/wandb/<offline-run-...>/``)."""
        return Path(self._run.dir).parent

    def log(self, step: int, row: dict[str, Any]) -> None:
        """Log the non-null scalars of one metrics row at ``step``."""
        scalars = {k: v for k, v in row.items() if k != "step" and v is not None}
        self._run.log(scalars, step=step)

    def close(self) -> None:
        """Finish the run (writes what is buffered)."""
        self._run.finish()


def metric_sinks(cfg: TirlConfig, run_dir: str | Path) -> list[WandbSink]:
    """The sinks ``cfg.trainer.wandb`` asks for (none when ``off``; wandb is then never imported)."""
    tc = cfg.trainer
    if tc.wandb == "off":
        return []
    mode: Literal["offline", "online"] = "online" if tc.wandb == "online" else "offline"
    return [WandbSink(run_dir, mode=mode, project=tc.wandb_project, config=config_to_dict(cfg))]
