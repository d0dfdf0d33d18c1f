"""The small Python packages that swe-lite plants bugs in, with their hidden tests and mutation sites.

Each :class:`Program` is a correct one-module package plus a hidden pytest
file. Each :class:`Mutation` is an exact, unique text replacement in the
module that makes at least one hidden test fail (the test suite checks both
properties for every mutation), and ``example`` is a call whose result
differs between the correct and the buggy code (the issue text quotes it).

The programs are data, not tirl's code: their sources, tests and mutation
tables live in the shipped file ``tirl/assets/swe_programs.toml`` (one
``[[program]]`` with its ``[[program.mutations]]`` each), read once when this
module is imported. Not covered: programs of more than one module.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

MUTATION_KINDS = ("wrong_operator", "off_by_one", "swapped_args", "wrong_default", "missing_case")


@dataclass(frozen=True, slots=True)
class Mutation:
    """Replace ``original`` by ``mutated`` (once) in the module; ``example`` shows the bug."""

    kind: str
    original: str
    mutated: str
    example: str

    def __post_init__(self) -> None:
        if self.kind not in MUTATION_KINDS:
            raise ValueError(f"mutation kind {self.kind!r} is not one of {', '.join(MUTATION_KINDS)}")


@dataclass(frozen=True, slots=True)
class Program:
    """A correct package ``package/core.py`` and its hidden tests."""

    package: str
    source: str
    tests: str
    mutations: tuple[Mutation, ...]

    @property
    def module_path(self) -> str:
        """The path of the module with the bug, relative to the repository root."""
        return f"{self.package}/core.py"


def parse_programs(text: str) -> tuple[Program, ...]:
    """The programs of a TOML text laid out as ``swe_programs.toml`` (a missing or extra key raises)."""
    data: dict[str, Any] = tomllib.loads(text)
    return tuple(
        Program(**{**p, "mutations": tuple(Mutation(**m) for m in p.get("mutations", ()))}) for p in data["program"]
    )


PROGRAMS: tuple[Program, ...] = parse_programs(
    resources.files("tirl").joinpath("assets", "swe_programs.toml").read_text(encoding="utf-8")
)
