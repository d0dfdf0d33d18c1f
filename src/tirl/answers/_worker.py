r"""The math-verify worker process: ``python -m tirl.answers._worker`` (started by :mod:`tirl.answers.fallback`).

Protocol: one JSON object per line on stdin, ``{"gold": str, "pred": str}``
(LaTeX without ``$``), and one reply per line on the original stdout,
``{"match": bool}`` or ``{"match": false, "error": str}``. Anything the
libraries print goes to stderr. The process runs math-verify in its main
thread, so its ``signal.alarm`` timeouts work; the parent still kills it when
a reply is late.

Exactness: math-verify compares numbers within ``float_rounding`` digits and
chops differences below ``numeric_precision`` (``\pi`` =
``3.14159265358979``, ``\pi + 10^{-30}\sqrt{2}`` = ``\pi``). This worker
replaces that numeric comparison with an exact one (equal structure after
``doit``), so equality must come from sympy's symbolic simplification; the
parent also turns every decimal literal into a fraction before sending it.

Limits: address space ``MEMORY_BYTES`` (``RLIMIT_AS``); only LaTeX
extraction is used — math-verify's plain-expression extraction calls
sympy's ``parse_expr`` (``eval``) and is never enabled on model output.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any

MEMORY_BYTES = 2 << 30
PARSE_TIMEOUT_S = 2
VERIFY_TIMEOUT_S = 2


def _exact_numeric_eq(a: Any, b: Any, float_rounding: int, numeric_precision: int) -> bool:
    """Replacement for math-verify's tolerant numeric comparison: structural equality only."""
    try:
        return bool(a == b) or bool(a.doit() == b.doit())
    except Exception:
        return False


def _setup() -> Any:
    """Import math-verify, make its numeric comparison exact, return a ``(gold, pred) -> bool`` function."""
    import math_verify.grader as grader
    from math_verify import parse, verify
    from math_verify.parser import LatexExtractionConfig, NormalizationConfig

    grader.sympy_numeric_eq = _exact_numeric_eq  # module global, looked up at call time by sympy_expr_eq
    # units=False: tirl removes units itself; math-verify's unit list would read "3m" as "3 metres"
    norm = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all")
    config = [LatexExtractionConfig(boxed_match_priority=0, normalization_config=norm)]

    def check(gold: str, pred: str) -> bool:
        g = parse(f"${gold}$", config, fallback_mode="no_fallback", parsing_timeout=PARSE_TIMEOUT_S)
        p = parse(f"${pred}$", config, fallback_mode="no_fallback", parsing_timeout=PARSE_TIMEOUT_S)
        if not g or not p:
            return False
        return bool(verify(g, p, strict=True, timeout_seconds=VERIFY_TIMEOUT_S))

    return check


def main() -> None:
    """Serve requests until stdin closes."""
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    except (ValueError, OSError):
        pass  # a lower hard limit is already in force
    reply = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # library prints cannot corrupt the reply stream
    sys.stdout = sys.stderr
    try:
        check = _setup()
        check("(x+1)^2", "x^2+2x+1")  # warm sympy's lazy imports and caches before the first timed request
    except Exception as exc:
        reply.write(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return
    reply.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        try:
            req = json.loads(line)
            out: dict[str, Any] = {"match": check(str(req["gold"]), str(req["pred"]))}
        except Exception as exc:  # a model's answer that breaks the parser is a wrong answer
            out = {"match": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        reply.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
