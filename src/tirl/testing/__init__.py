"""Test tooling shipped for tests, benchmarks and your own environments — not used by the runtime.

* :mod:`tirl.testing.scripted` — :func:`play` a list of assistant turns through
  the rollout strategy (the one episode driver) with a :class:`ScriptedRunner`;
* :mod:`tirl.testing.faults` — deterministic fault injection at each rollout
  stage (:class:`FaultPlan`, :func:`faulty_factory`, :class:`FaultyRunner`) and
  :class:`VirtualTimeLoop`, an event loop on a virtual clock.

Nothing under ``tirl`` outside this package imports it.
"""

from tirl.testing.faults import FaultLog, FaultPlan, FaultyRunner, InjectedFault, VirtualTimeLoop, faulty_factory
from tirl.testing.scripted import ScriptedRunner, ScriptResult, play

__all__ = [
    "FaultLog",
    "FaultPlan",
    "FaultyRunner",
    "InjectedFault",
    "ScriptResult",
    "ScriptedRunner",
    "VirtualTimeLoop",
    "faulty_factory",
    "play",
]
