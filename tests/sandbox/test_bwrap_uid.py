"""The uid a bubblewrap sandbox runs as does not follow the ``random`` module's state (tirl.sandbox.bwrap)."""

from __future__ import annotations

import os
import random

from tirl.sandbox.bwrap import sandbox_uid


def test_seeding_the_global_random_does_not_repeat_sandbox_uids() -> None:
    """Training seeds and restores ``random`` (a resumed run replays its checkpoint's state); uids drawn from it
    repeated across runs and test workers, and sandboxes sharing a uid can signal each other's processes (a test
    worker's teardown once found the other worker's sandbox process under its own uid)."""
    if os.geteuid() != 0:
        assert sandbox_uid() is None  # not root: the sandbox keeps our uid, nothing is drawn
        return
    pairs = []
    for _ in range(5):
        random.seed(1234)
        first = sandbox_uid()
        random.seed(1234)
        pairs.append((first, sandbox_uid()))
    assert any(a != b for a, b in pairs), pairs  # all five equal: the uid follows the seeded state
    assert all(a is not None and 200_000 <= a < 300_000 for pair in pairs for a in pair)
