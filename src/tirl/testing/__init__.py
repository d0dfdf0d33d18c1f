"""Tooling for tests, benchmarks and your own environments — never imported by the runtime.

* :mod:`tirl.testing.scripted` — :func:`play` a list of assistant turns through
  the rollout strategy (the one episode driver) with a :class:`ScriptedRunner`;
  with :func:`tirl.envs.check_env`, what an env author needs to test an env;
* :mod:`tirl.testing.clock` — :class:`VirtualTimeLoop`, an event loop on a
  virtual clock (sleeps and timeouts take no wall time).

The fault injection used by the rollout tests lives with them
(``tests/rollout/faults.py``).
"""

from tirl.testing.clock import VirtualTimeLoop
from tirl.testing.scripted import ScriptedRunner, ScriptResult, play

__all__ = ["ScriptResult", "ScriptedRunner", "VirtualTimeLoop", "play"]
