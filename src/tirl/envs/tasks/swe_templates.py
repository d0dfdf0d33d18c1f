"""Function templates of the swe-lite curriculum: small Python functions with their bug sites.

Each template draws one function (its name from a small pool, its constants
at random) with the places where a bug can be planted — a :class:`Site`: a
one-line text replacement of one of the six :data:`BUG_KINDS`, or the
deletion of a ``return`` line (``missing_return``) — and six argument lists
to call it with. Whether a site really breaks the function is not decided
here: :mod:`tirl.envs.tasks.swe_curriculum` runs the correct and the buggy
code on the arguments and keeps only sites that a visible check and the
hidden tests both catch.

Not covered: functions of more than one statement block per bug, classes,
several modules, bugs that need two edits.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from tirl import ast_lock

BUG_KINDS = (
    "wrong_operator",
    "off_by_one",
    "swapped_args",
    "wrong_constant",
    "inverted_condition",
    "missing_return",
)


@dataclass(frozen=True, slots=True)
class Site:
    """Replace ``old`` (correct) by ``new`` (buggy) on the one line holding ``old``; ``decoy`` is a wrong fix.

    For ``missing_return`` ``old`` is the whole ``return`` line and ``new`` is ``""``: the line is deleted.
    """

    kind: str
    old: str
    new: str
    decoy: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in BUG_KINDS:
            raise ValueError(f"bug kind {self.kind!r} is not one of {', '.join(BUG_KINDS)}")


@dataclass(frozen=True, slots=True)
class Func:
    """One correct function: its source lines, bug sites and argument lists (source text, no parentheses).

    ``cases`` decide which sites make tasks and which call the prompt quotes; ``probes`` are further calls for
    the hidden tests only, where a bug that ``cases`` show on a single call shows on a second one. Without them
    special-casing the call that the prompt quotes (and its answer) scored 1.0 with the bug left in place.
    """

    name: str
    lines: tuple[str, ...]
    sites: tuple[Site, ...]
    cases: tuple[str, ...]
    probes: tuple[str, ...] = ()

    def site_line(self, site: Site) -> int:
        """The 0-based index of the one code line that holds ``site.old`` (raises when not exactly one).

        A spec docstring (:func:`with_spec`) quotes every site's text; it is never the site.
        """
        hits = [i for i, line in enumerate(self.lines) if site.old in line and not line.startswith(SPEC_PREFIX)]
        if site.kind == "missing_return":
            hits = [i for i, line in enumerate(self.lines) if line == site.old]
        if len(hits) != 1:
            raise ValueError(f"{self.name}: site {site.old!r} is on {len(hits)} lines, not one")
        return hits[0]


Template = Callable[[random.Random, str], Func]

#: How a spec docstring starts (the line after ``def``; :func:`with_spec`).
SPEC_PREFIX = '    """Spec: '


def spec_docstring(func: Func) -> str:
    """The docstring line that quotes what each bug site of ``func`` reads when correct.

    >>> f = Func("f", ("def f(x):", "    return x * 3 + 5"), (Site("wrong_constant", "+ 5", "+ 6"),
    ...          Site("wrong_operator", "x * 3", "x + 3")), ("1",))
    >>> spec_docstring(f).strip()[3:-3]
    'Spec: `+ 5`, `x * 3`.'
    """
    quoted = [f"`{site.old}`" for site in func.sites if site.kind != "missing_return"]
    return SPEC_PREFIX + (", ".join(quoted) if quoted else "returns its result") + '."""'


def with_spec(func: Func) -> Func:
    """``func`` with its :func:`spec_docstring` as the line after ``def`` (the spec curriculum, ``env.difficulty=3``).

    A planted bug changes a code line, never the docstring, so the correct text of a wrong constant, operator,
    argument order, bound or condition can be read in the file — what the plain curriculum's constant and
    operator bugs lack (their fix needs a value that nothing in the workspace states).
    """
    return replace(func, lines=(func.lines[0], spec_docstring(func), *func.lines[1:]))


def _other(r: random.Random, value: int, lo: int, hi: int) -> int:
    """A value in ``lo..hi`` different from ``value``."""
    return r.choice([v for v in range(lo, hi + 1) if v != value])


def _ints(r: random.Random, n: int, lo: int, hi: int) -> list[int]:
    return [r.randint(lo, hi) for _ in range(n)]


def _lists(r: random.Random, lo: int, hi: int, min_len: int = 3, max_len: int = 6) -> tuple[str, ...]:
    return tuple(str(_ints(r, r.randint(min_len, max_len), lo, hi)) for _ in range(6))


def _f(
    name: str, body: str, sites: list[Site], cases: list[str] | tuple[str, ...], probes: tuple[str, ...] = ()
) -> Func:
    lines = tuple(body.format(n=name).strip("\n").split("\n"))
    return Func(name, lines, tuple(sites), tuple(cases), probes)


def affine(r: random.Random, name: str) -> Func:
    """``y = x * a + b``: wrong operator, wrong constant, missing return."""
    a, b = r.randint(2, 9), r.randint(1, 20)
    b2, b3 = _other(r, b, 1, 20), _other(r, b, 21, 30)
    body = f"def {{n}}(x):\n    y = x * {a} + {b}\n    return y\n"
    sites = [
        Site("wrong_operator", f"x * {a}", f"x + {a}", f"x - {a}"),
        Site("wrong_constant", f"+ {b}", f"+ {b2}", f"+ {b3}"),
        Site("missing_return", "    return y", ""),
    ]
    return _f(name, body, sites, [str(x) for x in r.sample(range(3, 40), 6)])


def clamp(r: random.Random, name: str) -> Func:
    """Clamp ``x`` into ``lo..hi``: inverted condition, off-by-one."""
    body = "def {n}(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n"
    sites = [
        Site("inverted_condition", "x > hi", "x <= hi", "x < hi"),
        Site("off_by_one", "return hi", "return hi - 1", "return hi + 1"),
    ]
    cases = []
    for _ in range(6):
        lo = r.randint(0, 10)
        hi = lo + r.randint(3, 10)
        cases.append(f"{r.randint(lo - 3, hi + 5)}, {lo}, {hi}")
    cases[0] = f"{hi + 2}, {lo}, {hi}"
    return _f(name, body, sites, cases, (f"{hi + 1}, {lo}, {hi}",))  # a second x above hi


def count_above(r: random.Random, name: str) -> Func:
    """Count the items above ``t``: inverted condition, wrong operator, missing return."""
    body = "def {n}(xs, t):\n    count = 0\n    for x in xs:\n        if x > t:\n"
    body += "            count += 1\n    return count\n"
    sites = [
        Site("inverted_condition", "x > t", "x <= t", "x < t"),
        Site("wrong_operator", "count += 1", "count -= 1", "count *= 1"),
        Site("missing_return", "    return count", ""),
    ]
    cases = [f"{xs}, {r.randint(2, 8)}" for xs in _lists(r, 0, 12)]
    return _f(name, body, sites, cases)


def sum_to(r: random.Random, name: str) -> Func:
    """``sum(i * a for i in 1..k)`` in a loop: off-by-one, wrong constant, wrong operator, missing return."""
    a = r.randint(2, 9)
    body = f"def {{n}}(k):\n    total = 0\n    for i in range(1, k + 1):\n        total += i * {a}\n    return total\n"
    sites = [
        Site("off_by_one", "range(1, k + 1)", "range(1, k)", "range(0, k)"),
        Site("wrong_constant", f"i * {a}", f"i * {_other(r, a, 2, 9)}"),
        Site("wrong_operator", "total += i", "total -= i", "total *= i"),
        Site("missing_return", "    return total", ""),
    ]
    return _f(name, body, sites, [str(k) for k in r.sample(range(2, 15), 6)])


def first_k(r: random.Random, name: str) -> Func:
    """The first ``k`` items: off-by-one, inverted condition."""
    body = "def {n}(xs, k):\n    if k <= 0:\n        return []\n    return xs[:k]\n"
    sites = [
        Site("off_by_one", "xs[:k]", "xs[:k + 1]", "xs[:k - 1]"),
        Site("inverted_condition", "k <= 0", "k > 0"),
    ]
    cases = [f"{xs}, {r.randint(1, 3)}" for xs in _lists(r, 0, 50, 4, 7)]
    return _f(name, body, sites, cases)


_WORDS = ("cat", "dog", "red", "sun", "map", "ink", "owl", "fig", "jam", "tea", "box", "cup")


def pad(r: random.Random, name: str) -> Func:
    """``rjust``/``ljust`` with a fill character: swapped arguments, wrong constant."""
    c, c2 = r.sample(["0", "-", "_", "#", "+", "="], 2)
    method = r.choice(["rjust", "ljust"])
    body = f'def {{n}}(s, width):\n    return s.{method}(width, "{c}")\n'
    sites = [
        Site("swapped_args", f'{method}(width, "{c}")', f'{method}("{c}", width)'),
        Site("wrong_constant", f'"{c}")', f'"{c2}")'),
    ]
    cases = [f'"{r.choice(_WORDS)}", {r.randint(5, 8)}' for _ in range(6)]
    return _f(name, body, sites, cases)


def mod_pow(r: random.Random, name: str) -> Func:
    """``pow(base, e, m)``: swapped arguments, wrong constant."""
    m = r.choice([97, 101, 103, 107, 109, 113, 127])
    body = f"def {{n}}(base, e):\n    return pow(base, e, {m})\n"
    sites = [
        Site("swapped_args", "pow(base, e,", "pow(e, base,"),
        Site("wrong_constant", f"{m})", f"{m + r.choice([-7, -3, 3, 7])})"),
    ]
    cases = []
    for _ in range(6):
        base, e = r.sample(range(2, 20), 2)
        cases.append(f"{base}, {e}")
    return _f(name, body, sites, cases)


def div_mix(r: random.Random, name: str) -> Func:
    """``q * k + rest`` of ``divmod(a, b)``: swapped arguments, wrong operator, wrong constant."""
    k = r.randint(2, 9)
    body = f"def {{n}}(a, b):\n    q, rest = divmod(a, b)\n    return q * {k} + rest\n"
    sites = [
        Site("swapped_args", "divmod(a, b)", "divmod(b, a)"),
        Site("wrong_operator", "+ rest", "- rest", "* rest"),
        Site("wrong_constant", f"q * {k}", f"q * {_other(r, k, 2, 9)}"),
    ]
    cases = [f"{r.randint(20, 99)}, {r.randint(3, 9)}" for _ in range(6)]
    return _f(name, body, sites, cases)


def swap_word(r: random.Random, name: str) -> Func:
    """Replace one word by another: swapped arguments."""
    w1, w2 = r.sample(_WORDS, 2)
    body = f'def {{n}}(text):\n    return text.replace("{w1}", "{w2}")\n'
    sites = [Site("swapped_args", f'("{w1}", "{w2}")', f'("{w2}", "{w1}")')]
    cases = [f'"{" ".join([*r.sample(_WORDS, 3), w1])}"' for _ in range(6)]
    return _f(name, body, sites, cases)


def divisible(r: random.Random, name: str) -> Func:
    """Whether the sum is divisible by ``k``: inverted condition, wrong constant."""
    k = r.randint(3, 7)
    body = f"def {{n}}(xs):\n    s = sum(xs)\n    if s % {k} == 0:\n        return True\n    return False\n"
    sites = [
        Site("inverted_condition", "== 0", "!= 0"),
        Site("wrong_constant", f"% {k}", f"% {_other(r, k, 3, 7)}"),
    ]
    cases: list[str] = []
    for xs in _lists(r, 1, 20):
        lst = ast_lock.literal_eval(xs)
        if len(cases) % 2 == 0:
            lst[-1] += (-sum(lst)) % k  # every other case is divisible
        cases.append(str(lst))
    k2 = int(sites[1].new.split()[-1])
    return _f(name, body, sites, cases, (str([k if k % k2 else k2]),))  # divisible by one of k and the wrong k


def last(r: random.Random, name: str) -> Func:
    """The last item or None: off-by-one, inverted condition."""
    body = "def {n}(xs):\n    if not xs:\n        return None\n    return xs[len(xs) - 1]\n"
    sites = [
        Site("off_by_one", "len(xs) - 1", "len(xs) - 2", "len(xs)"),
        Site("inverted_condition", "if not xs:", "if xs:"),
    ]
    cases = [*_lists(r, 0, 90, 2, 5)[:5], "[]"]
    return _f(name, body, sites, cases)


def span(r: random.Random, name: str) -> Func:
    """``list(range(a, b, s))``: swapped arguments, off-by-one, wrong constant."""
    s = r.randint(1, 3)
    body = f"def {{n}}(a, b):\n    return list(range(a, b, {s}))\n"
    sites = [
        Site("swapped_args", "range(a, b,", "range(b, a,"),
        Site("off_by_one", "range(a, b,", "range(a, b + 1,", "range(a, b - 1,"),
        Site("wrong_constant", f"{s}))", f"{_other(r, s, 1, 4)}))"),
    ]
    cases = []
    for _ in range(6):
        a = r.randint(0, 10)
        cases.append(f"{a}, {a + r.randint(4, 9)}")
    return _f(name, body, sites, cases, (f"{a}, {a + 3 * s}", f"{a + 1}, {a + 1 + 2 * s}"))  # b - a: k steps


def average(r: random.Random, name: str) -> Func:
    """The mean, or a constant for an empty list: inverted condition, wrong operator, wrong constant."""
    z = r.choice([0, -1])
    body = f"def {{n}}(xs):\n    if len(xs) == 0:\n        return {z}\n    return sum(xs) / len(xs)\n"
    sites = [
        Site("inverted_condition", "len(xs) == 0", "len(xs) != 0"),
        Site("wrong_operator", "sum(xs) / len", "sum(xs) * len", "sum(xs) // len"),
        Site("wrong_constant", f"return {z}", f"return {z + 2}"),
    ]
    cases = [*_lists(r, 1, 20, 2, 5)[:5], "[]"]
    cases[0] = "[3, 4]"
    return _f(name, body, sites, cases, ("()",))  # a second empty sequence


def discount(r: random.Random, name: str) -> Func:
    """A price less a capped percentage: inverted condition, wrong constant, wrong operator."""
    cap = r.choice([30, 40, 50, 60])
    body = f"def {{n}}(price, pct):\n    if pct > {cap}:\n        pct = {cap}\n    return price - price * pct // 100\n"
    sites = [
        Site("inverted_condition", f"pct > {cap}", f"pct < {cap}"),
        Site("wrong_constant", f"= {cap}", f"= {cap + 10}"),
        Site("wrong_operator", "price - price", "price + price"),
    ]
    cases = [f"{r.randint(10, 90) * 10}, {p}" for p in (cap + 20, 10, cap + 5, 20, 90, 5)]
    return _f(name, body, sites, cases)


def between(r: random.Random, name: str) -> Func:
    """Whether ``lo <= x < hi``: off-by-one, inverted condition."""
    body = "def {n}(x, lo, hi):\n    return lo <= x and x < hi\n"
    sites = [
        Site("off_by_one", "x < hi", "x <= hi", "x < hi - 1"),
        Site("inverted_condition", "lo <= x", "lo > x"),
    ]
    cases = []
    for i in range(6):
        lo = r.randint(0, 20)
        hi = lo + r.randint(3, 9)
        x = (hi, lo + 1, lo, hi - 1, hi + 2, lo - 1)[i]
        cases.append(f"{x}, {lo}, {hi}")
    return _f(name, body, sites, cases, (f"{hi}, {lo + 1}, {hi}",))  # a second x == hi


def countdown(r: random.Random, name: str) -> Func:
    """``k, k - s, ...`` while positive: off-by-one, wrong constant, missing return."""
    s = r.randint(1, 3)
    body = f"def {{n}}(k):\n    out = []\n    while k > 0:\n        out.append(k)\n        k -= {s}\n    return out\n"
    sites = [
        Site("off_by_one", "k > 0", "k > 1", "k >= 0"),
        Site("wrong_constant", f"k -= {s}", f"k -= {_other(r, s, 1, 4)}"),
        Site("missing_return", "    return out", ""),
    ]
    cases = [str(k) for k in r.sample(range(4, 16), 5)] + [str(s + 1)]
    return _f(name, body, sites, cases, (str(2 * s + 1),))  # a second start that reaches 1


def index_of(r: random.Random, name: str) -> Func:
    """The index of ``target`` or -1: off-by-one, inverted condition, wrong constant."""
    body = (
        "def {n}(xs, target):\n    for i in range(len(xs)):\n        if xs[i] == target:\n"
        "            return i\n    return -1\n"
    )
    sites = [
        Site("off_by_one", "range(len(xs))", "range(len(xs) - 1)", "range(1, len(xs))"),
        Site("inverted_condition", "xs[i] == target", "xs[i] != target"),
        Site("wrong_constant", "return -1", "return 0", "return None"),
    ]
    cases = []
    for i in range(6):
        xs = r.sample(range(1, 60), r.randint(3, 6))
        target = xs[-1] if i % 3 == 0 else (xs[0] if i % 3 == 1 else 99)
        cases.append(f"{xs}, {target}")
    return _f(name, body, sites, cases)


def rounded(r: random.Random, name: str) -> Func:
    """``round(x * a, d)``: swapped arguments, wrong constant."""
    a, d = r.randint(2, 9), r.randint(1, 3)
    body = f"def {{n}}(x):\n    return round(x * {a}, {d})\n"
    sites = [
        Site("swapped_args", f"round(x * {a}, {d})", f"round({d}, x * {a})"),
        Site("wrong_constant", f"{d})", f"{_other(r, d, 0, 3)})"),
    ]
    cases = [f"{r.randint(100, 9999) / 1000}" for _ in range(6)]
    return _f(name, body, sites, cases)


def head_word(r: random.Random, name: str) -> Func:
    """The text before the first separator: off-by-one, swapped arguments, missing return."""
    sep = r.choice([",", ";", ":", "|"])
    body = f'def {{n}}(text):\n    parts = text.split("{sep}", 1)\n    return parts[0]\n'
    sites = [
        Site("off_by_one", "parts[0]", "parts[1]", "parts[-1]"),
        Site("swapped_args", f'split("{sep}", 1)', f'split(1, "{sep}")'),
        Site("missing_return", "    return parts[0]", ""),
    ]
    cases = [f'"{sep.join(r.sample(_WORDS, r.randint(2, 4)))}"' for _ in range(6)]
    return _f(name, body, sites, cases)


#: Every template with the pool of function names it draws from.
TEMPLATES: tuple[tuple[Template, tuple[str, ...]], ...] = (
    (affine, ("scale", "adjust", "convert", "weigh", "score")),
    (clamp, ("clamp", "bound", "limit", "fit")),
    (count_above, ("count_above", "count_over", "num_high", "tally")),
    (sum_to, ("sum_to", "series", "accumulate", "total_up")),
    (first_k, ("first_k", "take", "head", "prefix")),
    (pad, ("pad", "justify", "widen", "fill")),
    (mod_pow, ("mod_pow", "power_mod", "cycle", "hash_pow")),
    (div_mix, ("div_mix", "fold", "pack", "squash")),
    (swap_word, ("swap_word", "rename", "substitute", "reword")),
    (divisible, ("divisible", "is_round", "balanced", "even_sum")),
    (last, ("last", "tail", "final", "newest")),
    (span, ("span", "steps", "ladder", "stride")),
    (average, ("average", "mean", "avg", "midpoint")),
    (discount, ("discount", "sale_price", "markdown", "reduce")),
    (between, ("between", "in_range", "inside", "within")),
    (countdown, ("countdown", "descend", "drain", "unwind")),
    (index_of, ("index_of", "find", "locate", "position")),
    (rounded, ("rounded", "approx", "trim_float", "snap")),
    (head_word, ("head_word", "first_field", "leading", "prefix_of")),
)
