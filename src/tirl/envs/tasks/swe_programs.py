"""The small Python packages that swe-lite plants bugs in, with their hidden tests and mutation sites.

Each :class:`Program` is a correct one-module package plus a hidden pytest
file. Each :class:`Mutation` is an exact, unique text replacement in the
module that makes at least one hidden test fail (the test suite checks both
properties for every mutation), and ``example`` is a call whose result
differs between the correct and the buggy code (the issue text quotes it).
"""

from __future__ import annotations

from dataclasses import dataclass

MUTATION_KINDS = ("wrong_operator", "off_by_one", "swapped_args", "wrong_default", "missing_case")


@dataclass(frozen=True, slots=True)
class Mutation:
    """Replace ``original`` by ``mutated`` (once) in the module; ``example`` shows the bug."""

    kind: str
    original: str
    mutated: str
    example: str


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


STATKIT = Program(
    package="statkit",
    source='''"""Small statistics helpers."""


def mean(xs):
    if not xs:
        raise ValueError("mean of empty list")
    return sum(xs) / len(xs)


def median(xs):
    s = sorted(xs)
    n = len(s)
    mid = n // 2
    if n % 2 == 1:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2


def clamp(x, lo=0, hi=1):
    return max(lo, min(x, hi))
''',
    tests="""import pytest

from statkit import clamp, mean, median


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_median_odd():
    assert median([5, 1, 3]) == 3


def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5


def test_clamp():
    assert clamp(5, 0, 3) == 3
    assert clamp(-2, 0, 3) == 0


def test_clamp_default():
    assert clamp(5) == 1
""",
    mutations=(
        Mutation("wrong_operator", "return sum(xs) / len(xs)", "return sum(xs) // len(xs)", "mean([1, 2, 3, 4])"),
        Mutation("off_by_one", "mid = n // 2", "mid = (n - 1) // 2", "median([4, 1, 3, 2])"),
        Mutation("wrong_default", "def clamp(x, lo=0, hi=1):", "def clamp(x, lo=0, hi=10):", "clamp(5)"),
        Mutation(
            "missing_case",
            '    if not xs:\n        raise ValueError("mean of empty list")\n',
            "",
            "mean([])",
        ),
    ),
)

TEXTKIT = Program(
    package="textkit",
    source='''"""Small text helpers."""


def slugify(text, sep="-"):
    words = [w for w in text.lower().split() if w]
    return sep.join(words)


def truncate(text, width, suffix="..."):
    if len(text) <= width:
        return text
    return text[: width - len(suffix)] + suffix


def count_vowels(text):
    return sum(1 for c in text.lower() if c in "aeiou")


def is_palindrome(text):
    cleaned = [c.lower() for c in text if c.isalnum()]
    return cleaned == cleaned[::-1]
''',
    tests="""from textkit import count_vowels, is_palindrome, slugify, truncate


def test_slugify():
    assert slugify("Hello  Big World") == "hello-big-world"


def test_slugify_sep():
    assert slugify("a b", sep="_") == "a_b"


def test_truncate_short():
    assert truncate("hello", 5) == "hello"


def test_truncate_long():
    assert truncate("hello world", 8) == "hello..."
    assert len(truncate("abcdefghij", 6)) == 6


def test_count_vowels():
    assert count_vowels("Education") == 5


def test_palindrome():
    assert is_palindrome("A man, a plan, a canal: Panama")
    assert not is_palindrome("abc")
""",
    mutations=(
        Mutation("wrong_default", 'def slugify(text, sep="-"):', 'def slugify(text, sep="_"):', 'slugify("Big World")'),
        Mutation("off_by_one", "if len(text) <= width:", "if len(text) < width:", 'truncate("hello", 5)'),
        Mutation(
            "wrong_operator",
            "text[: width - len(suffix)] + suffix",
            "text[: width + len(suffix)] + suffix",
            'truncate("hello world", 8)',
        ),
        Mutation("missing_case", "for c in text.lower() if", "for c in text if", 'count_vowels("Education")'),
    ),
)

SPANKIT = Program(
    package="spankit",
    source='''"""Interval and chunking helpers."""


def overlap(a_start, a_end, b_start, b_end):
    return max(0, min(a_end, b_end) - max(a_start, b_start))


def merge(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def chunk(xs, size):
    return [xs[i : i + size] for i in range(0, len(xs), size)]
''',
    tests="""from spankit import chunk, merge, overlap


def test_overlap():
    assert overlap(0, 10, 5, 20) == 5
    assert overlap(0, 3, 5, 9) == 0


def test_merge_touching():
    assert merge([(1, 2), (2, 3)]) == [(1, 3)]


def test_merge_contained():
    assert merge([(1, 10), (2, 3), (12, 14)]) == [(1, 10), (12, 14)]


def test_chunk():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert chunk([1, 2, 3], 1) == [[1], [2], [3]]
""",
    mutations=(
        Mutation(
            "swapped_args",
            "min(a_end, b_end) - max(a_start, b_start)",
            "max(a_start, b_start) - min(a_end, b_end)",
            "overlap(0, 10, 5, 20)",
        ),
        Mutation(
            "wrong_operator",
            "if out and start <= out[-1][1]:",
            "if out and start < out[-1][1]:",
            "merge([(1, 2), (2, 3)])",
        ),
        Mutation("off_by_one", "range(0, len(xs), size)", "range(0, len(xs) - 1, size)", "chunk([1, 2, 3], 1)"),
        Mutation(
            "missing_case",
            "(out[-1][0], max(out[-1][1], end))",
            "(out[-1][0], end)",
            "merge([(1, 10), (2, 3)])",
        ),
    ),
)

BANKKIT = Program(
    package="bankkit",
    source='''"""A toy bank account."""


class Account:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount
        return self.balance

    def withdraw(self, amount):
        if amount > self.balance:
            raise ValueError("insufficient funds")
        self.balance -= amount
        return self.balance


def transfer(src, dst, amount):
    src.withdraw(amount)
    dst.deposit(amount)
    return src.balance, dst.balance
''',
    tests="""import pytest

from bankkit import Account, transfer


def test_default_balance():
    assert Account("ann").balance == 0


def test_deposit():
    assert Account("ann", 5).deposit(10) == 15


def test_deposit_negative():
    with pytest.raises(ValueError):
        Account("ann").deposit(-1)


def test_withdraw():
    assert Account("ann", 10).withdraw(3) == 7


def test_withdraw_all():
    assert Account("ann", 10).withdraw(10) == 0


def test_transfer():
    a, b = Account("a", 50), Account("b", 5)
    assert transfer(a, b, 20) == (30, 25)
""",
    mutations=(
        Mutation(
            "wrong_operator", "self.balance -= amount", "self.balance += amount", 'Account("ann", 10).withdraw(3)'
        ),
        Mutation(
            "off_by_one", "if amount > self.balance:", "if amount >= self.balance:", 'Account("ann", 10).withdraw(10)'
        ),
        Mutation(
            "swapped_args",
            "    src.withdraw(amount)\n    dst.deposit(amount)\n",
            "    dst.withdraw(amount)\n    src.deposit(amount)\n",
            'transfer(Account("a", 50), Account("b", 5), 20)',
        ),
        Mutation(
            "wrong_default",
            "def __init__(self, owner, balance=0):",
            "def __init__(self, owner, balance=100):",
            'Account("ann").balance',
        ),
        Mutation(
            "missing_case",
            '        if amount <= 0:\n            raise ValueError("deposit must be positive")\n',
            "",
            'Account("ann").deposit(-1)',
        ),
    ),
)

NUMKIT = Program(
    package="numkit",
    source='''"""Number helpers."""


def gcd(a, b):
    while b:
        a, b = b, a % b
    return abs(a)


def is_prime(n):
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True


def power(base, exp=2):
    return base ** exp
''',
    tests="""from numkit import gcd, is_prime, power


def test_gcd():
    assert gcd(12, 8) == 4
    assert gcd(7, 0) == 7


def test_primes():
    assert [n for n in range(20) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19]


def test_square():
    assert is_prime(25) is False


def test_power_default():
    assert power(5) == 25


def test_power():
    assert power(2, 10) == 1024
""",
    mutations=(
        Mutation("wrong_operator", "a, b = b, a % b", "a, b = b, a // b", "gcd(12, 8)"),
        Mutation("off_by_one", "while i * i <= n:", "while i * i < n:", "is_prime(25)"),
        Mutation("missing_case", "    if n < 2:\n        return False\n", "", "is_prime(1)"),
        Mutation("wrong_default", "def power(base, exp=2):", "def power(base, exp=3):", "power(5)"),
        Mutation("swapped_args", "return base ** exp", "return exp ** base", "power(2, 10)"),
    ),
)

LISTKIT = Program(
    package="listkit",
    source='''"""List helpers."""


def flatten(items):
    out = []
    for item in items:
        if isinstance(item, list):
            out.extend(flatten(item))
        else:
            out.append(item)
    return out


def dedupe(items):
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def top_k(counts, k=3):
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [key for key, _ in ranked[:k]]


def window_sums(xs, size):
    return [sum(xs[i : i + size]) for i in range(len(xs) - size + 1)]
''',
    tests="""from listkit import dedupe, flatten, top_k, window_sums


def test_flatten():
    assert flatten([1, [2, [3, [4]]], 5]) == [1, 2, 3, 4, 5]


def test_dedupe():
    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]


def test_top_k():
    counts = {"a": 5, "b": 9, "c": 1, "d": 7}
    assert top_k(counts) == ["b", "d", "a"]
    assert top_k(counts, 1) == ["b"]


def test_window_sums():
    assert window_sums([1, 2, 3, 4], 2) == [3, 5, 7]
    assert window_sums([1, 2], 2) == [3]
""",
    mutations=(
        Mutation("missing_case", "out.extend(flatten(item))", "out.extend(item)", "flatten([1, [2, [3]]])"),
        Mutation(
            "wrong_default",
            "def top_k(counts, k=3):",
            "def top_k(counts, k=2):",
            'top_k({"a": 5, "b": 9, "c": 1, "d": 7})',
        ),
        Mutation("off_by_one", "range(len(xs) - size + 1)", "range(len(xs) - size)", "window_sums([1, 2, 3, 4], 2)"),
        Mutation("wrong_operator", "(-kv[1], kv[0])", "(kv[1], kv[0])", 'top_k({"a": 5, "b": 9}, 1)'),
    ),
)

UNITKIT = Program(
    package="unitkit",
    source='''"""Unit conversions and grading."""


def c_to_f(c):
    return c * 9 / 5 + 32


def f_to_c(f):
    return (f - 32) * 5 / 9


def bmi(weight_kg, height_m):
    return round(weight_kg / height_m**2, 1)


def grade(score):
    if score >= 90:
        return "A"
    if score >= 80:
        return "B"
    if score >= 70:
        return "C"
    return "F"
''',
    tests="""from unitkit import bmi, c_to_f, f_to_c, grade


def test_c_to_f():
    assert c_to_f(100) == 212


def test_f_to_c():
    assert f_to_c(212) == 100


def test_bmi():
    assert bmi(80, 2.0) == 20.0
    assert bmi(weight_kg=72, height_m=1.8) == 22.2


def test_grade_edges():
    assert grade(90) == "A"
    assert grade(85) == "B"
    assert grade(70) == "C"
    assert grade(10) == "F"
""",
    mutations=(
        Mutation("wrong_operator", "return c * 9 / 5 + 32", "return c * 9 / 5 - 32", "c_to_f(100)"),
        Mutation("swapped_args", "def bmi(weight_kg, height_m):", "def bmi(height_m, weight_kg):", "bmi(80, 2.0)"),
        Mutation("off_by_one", "if score >= 90:", "if score > 90:", "grade(90)"),
        Mutation("missing_case", '    if score >= 70:\n        return "C"\n', "", "grade(70)"),
    ),
)

STACKKIT = Program(
    package="stackkit",
    source='''"""A stack."""


class Stack:
    def __init__(self, items=None):
        self.items = list(items) if items else []

    def push(self, x):
        self.items.append(x)

    def pop(self):
        if not self.items:
            raise IndexError("pop from empty stack")
        return self.items.pop()

    def peek(self):
        return self.items[-1] if self.items else None

    def __len__(self):
        return len(self.items)
''',
    tests="""import pytest

from stackkit import Stack


def test_lifo():
    s = Stack([1, 2])
    s.push(3)
    assert s.pop() == 3
    assert s.pop() == 2


def test_peek():
    assert Stack([1, 2, 3]).peek() == 3
    assert Stack().peek() is None


def test_empty_pop():
    with pytest.raises(IndexError, match="empty stack"):
        Stack().pop()


def test_len():
    assert len(Stack([1, 2])) == 2
""",
    mutations=(
        Mutation(
            "off_by_one",
            "return self.items[-1] if self.items else None",
            "return self.items[-2] if self.items else None",
            "Stack([1, 2, 3]).peek()",
        ),
        Mutation("wrong_operator", "return self.items.pop()", "return self.items.pop(0)", "Stack([1, 2]).pop()"),
        Mutation(
            "missing_case",
            '        if not self.items:\n            raise IndexError("pop from empty stack")\n',
            "",
            "Stack().pop()",
        ),
    ),
)

PROGRAMS: tuple[Program, ...] = (STATKIT, TEXTKIT, SPANKIT, BANKKIT, NUMKIT, LISTKIT, UNITKIT, STACKKIT)
