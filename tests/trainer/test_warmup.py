"""Linear learning-rate warm-up, counted from the optimiser's own state (so it survives a resume)."""

from __future__ import annotations

import pytest
import torch

from tirl.config import load_config
from tirl.trainer.update import PolicyUpdater


def _updater(warmup: int) -> tuple[PolicyUpdater, torch.nn.Linear]:
    model = torch.nn.Linear(3, 2)
    algo = load_config(None, [f"algo.warmup_steps={warmup}", "algo.lr=0.01"]).algo
    opt = torch.optim.AdamW(model.parameters(), lr=algo.lr)
    return PolicyUpdater(model=model, optimizer=opt, algo=algo, pad_id=0), model


def _step(up: PolicyUpdater, model: torch.nn.Linear) -> float:
    model(torch.ones(1, 3)).sum().backward()
    up._warm_up()
    lr = up.optimizer.param_groups[0]["lr"]
    up.optimizer.step()
    up.optimizer.zero_grad()
    return lr


def test_lr_ramps_linearly_then_holds() -> None:
    up, model = _updater(4)
    lrs = [_step(up, model) for _ in range(6)]
    assert lrs == pytest.approx([0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01])


def test_warmup_resumes_from_optimizer_state() -> None:
    up, model = _updater(4)
    for _ in range(2):
        _step(up, model)
    state = up.optimizer.state_dict()
    up2, model2 = _updater(4)
    model2.load_state_dict(model.state_dict())
    up2.optimizer.load_state_dict(state)
    assert _step(up2, model2) == pytest.approx(0.0075)


def test_zero_disables_warmup() -> None:
    up, model = _updater(0)
    assert _step(up, model) == pytest.approx(0.01)


class _UnusedFirst(torch.nn.Module):
    """A model whose first parameter gets no gradient (a text-only pass through a model with a vision tower)."""

    def __init__(self) -> None:
        super().__init__()
        self.unused = torch.nn.Parameter(torch.zeros(4))
        self.used = torch.nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def test_the_count_does_not_stall_on_a_parameter_without_gradient() -> None:
    """AdamW keeps no state for a parameter that never had a gradient; the count was read off the first
    parameter only, so the learning rate stayed at ``lr / warmup_steps`` for the whole run."""
    model = _UnusedFirst()
    algo = load_config(None, ["algo.warmup_steps=4", "algo.lr=0.01"]).algo
    up = PolicyUpdater(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=algo.lr), algo=algo, pad_id=0)
    lrs = []
    for _ in range(6):
        model(torch.ones(1, 3)).sum().backward()
        up._warm_up()
        lrs.append(up.optimizer.param_groups[0]["lr"])
        up.optimizer.step()
        up.optimizer.zero_grad(set_to_none=True)
    assert model.unused.grad is None and not up.optimizer.state.get(model.unused)
    assert lrs == pytest.approx([0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01])
