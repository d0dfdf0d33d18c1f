from pathlib import Path

import pytest
import torch
from trainer_fakes import SMALL, Script, ScriptedStrategy, default_script, make_cfg, task_fn

from tirl.models.chat_format import SimpleChatFormat
from tirl.models.tiny import build_tiny_model


@pytest.fixture
def tiny():
    model, tok = build_tiny_model(SMALL, seed=0)
    model.eval()
    return model, tok


@pytest.fixture
def make_trainer(tiny, tmp_path: Path):
    from tirl.trainer.learner import build_learner
    from tirl.trainer.trainer import Trainer

    def build(
        *overrides: str,
        script: Script = default_script,
        shift: float = 0.0,
        run_dir: Path | None = None,
        ref_model: torch.nn.Module | None = None,
    ):
        model, tok = tiny
        strategy = ScriptedStrategy(model, SimpleChatFormat(tok), script=script, logprob_shift=shift)
        cfg = make_cfg(*overrides)
        return Trainer(
            cfg=cfg,
            learner=build_learner(cfg, model, tok, ref_model=ref_model),
            tokenizer=tok,
            strategy=strategy,
            tasks=task_fn,
            run_dir=run_dir or tmp_path / "run",
            progress=False,
        )

    return build
