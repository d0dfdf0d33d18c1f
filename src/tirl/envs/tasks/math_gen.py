"""tir-math tasks: a deterministic generator (difficulty 1..5), a JSONL loader and scripted solutions.

Every generated task needs exact computation and comes with the Python
program that computes its answer (``task.data["code"]``). The answer is
computed here by the same arithmetic, and a test checks that running the
program prints exactly ``task.answer``.

Difficulty levels (prompts at 1–2 are short and regular on purpose: a tiny
character-level model must learn to copy the numbers into ``print(...)``):

1. ``Compute 347*29.`` · ``Compute 4821+3977.`` · ``Compute 9120-4471.`` ·
   ``What is 12345 mod 97?`` · ``Sum the integers from 13 to 58.``
2. ``Compute 4821*397.`` · ``Compute 37**5.`` · ``What is 918273645 mod 9973?`` ·
   ``How many integers from 1 to 500 are divisible by 7?`` · ``Sum the squares from 5 to 40.``
3. powers mod m, "divisible by p or q" counts, sums of multiples, two-step word problems
4. three-step word problems, fraction arithmetic (answer ``a/b``), prime counts,
   digit sums of powers, lcm of three numbers
5. digit-sum counts, sums of primes in a range, modular inverses, factorials
   mod m, Fibonacci numbers mod m, a multi-stop word problem

The generated code copies the numbers of the prompt verbatim
(``print(sum(range(13,58+1)))``), so a model never has to do arithmetic in
its head to write it.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

from tirl.envs.base import Task
from tirl.envs.tasks.jsonl import read_jsonl, require_str
from tirl.errors import InputError

KIND = "tir-math"
Template = Callable[[random.Random], tuple[str, str, str]]  # rng -> (prompt, code, answer)


def _mul(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.randint(100, 999), rng.randint(10, 99)
    return f"Compute {a}*{b}.", f"print({a}*{b})", str(a * b)


def _add(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.randint(1000, 9999), rng.randint(1000, 9999)
    return f"Compute {a}+{b}.", f"print({a}+{b})", str(a + b)


def _sub(rng: random.Random) -> tuple[str, str, str]:
    a, b = sorted((rng.randint(1000, 9999), rng.randint(1000, 9999)), reverse=True)
    return f"Compute {a}-{b}.", f"print({a}-{b})", str(a - b)


def _mod(rng: random.Random) -> tuple[str, str, str]:
    a, m = rng.randint(1000, 99999), rng.randint(7, 99)
    return f"What is {a} mod {m}?", f"print({a}%{m})", str(a % m)


def _range_sum(rng: random.Random) -> tuple[str, str, str]:
    a = rng.randint(1, 50)
    b = a + rng.randint(10, 90)
    return f"Sum the integers from {a} to {b}.", f"print(sum(range({a},{b}+1)))", str(sum(range(a, b + 1)))


def _mul_big(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.randint(1000, 9999), rng.randint(100, 999)
    return f"Compute {a}*{b}.", f"print({a}*{b})", str(a * b)


def _power(rng: random.Random) -> tuple[str, str, str]:
    a, k = rng.randint(11, 99), rng.randint(3, 6)
    return f"Compute {a}**{k}.", f"print({a}**{k})", str(a**k)


def _mod_big(rng: random.Random) -> tuple[str, str, str]:
    a, m = rng.randint(10**8, 10**9), rng.randint(101, 9999)
    return f"What is {a} mod {m}?", f"print({a}%{m})", str(a % m)


def _count_div(rng: random.Random) -> tuple[str, str, str]:
    n, k = rng.randint(100, 999), rng.randint(3, 13)
    code = f"print(len([i for i in range(1,{n}+1) if i%{k}==0]))"
    return f"How many integers from 1 to {n} are divisible by {k}?", code, str(n // k)


def _square_sum(rng: random.Random) -> tuple[str, str, str]:
    a = rng.randint(1, 20)
    b = a + rng.randint(10, 40)
    code = f"print(sum(i*i for i in range({a},{b}+1)))"
    return f"Sum the squares from {a} to {b}.", code, str(sum(i * i for i in range(a, b + 1)))


def _pow_mod(rng: random.Random) -> tuple[str, str, str]:
    b, e, m = rng.randint(2, 99), rng.randint(50, 999), rng.choice([97, 100, 997, 1000, 10007])
    return f"What is {b}^{e} mod {m}?", f"print(pow({b},{e},{m}))", str(pow(b, e, m))


def _count_or(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(500, 5000)
    p, q = rng.sample([3, 4, 5, 6, 7, 11, 13], 2)
    code = f"print(len([i for i in range(1,{n}+1) if i%{p}==0 or i%{q}==0]))"
    answer = sum(1 for i in range(1, n + 1) if i % p == 0 or i % q == 0)
    return f"How many integers from 1 to {n} are divisible by {p} or {q}?", code, str(answer)


def _sum_multiples(rng: random.Random) -> tuple[str, str, str]:
    k = rng.randint(3, 19)
    a = rng.randint(10, 200)
    b = a + rng.randint(100, 900)
    code = f"print(sum(i for i in range({a},{b}+1) if i%{k}==0))"
    answer = sum(i for i in range(a, b + 1) if i % k == 0)
    return f"Sum the multiples of {k} from {a} to {b}.", code, str(answer)


def _word_boxes(rng: random.Random) -> tuple[str, str, str]:
    a, b, c = rng.randint(12, 48), rng.randint(13, 97), rng.randint(3, 11)
    prompt = f"A box holds {a} pens. How many pens are there in {b} boxes and {c} loose pens?"
    return prompt, f"print({a}*{b}+{c})", str(a * b + c)


def _word_money(rng: random.Random) -> tuple[str, str, str]:
    b, c = rng.randint(3, 19), rng.randint(7, 49)
    a = b * c + rng.randint(1, 500)
    prompt = f"Tom has {a} dollars. He buys {b} books at {c} dollars each. How many dollars are left?"
    return prompt, f"print({a}-{b}*{c})", str(a - b * c)


def _word_farm(rng: random.Random) -> tuple[str, str, str]:
    a, b, c = rng.randint(12, 60), rng.randint(11, 40), rng.randint(20, 90)
    d = rng.randint(100, a * b * c - 1)
    prompt = (
        f"A farm has {a} rows of {b} trees. Each tree gives {c} apples. {d} apples are sold. How many apples are left?"
    )
    return prompt, f"print({a}*{b}*{c}-{d})", str(a * b * c - d)


def _word_shop(rng: random.Random) -> tuple[str, str, str]:
    n, p, k = rng.randint(20, 90), rng.randint(13, 79), rng.randint(2, 9)
    total = n * p
    prompt = (
        f"A shop buys {n} lamps at {p} dollars each and sells them all at {k} times the cost. "
        f"What is the profit in dollars?"
    )
    return prompt, f"print({n}*{p}*{k}-{n}*{p})", str(total * k - total)


def _fraction(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.randint(1, 9), rng.randint(2, 16)
    c, d = rng.randint(1, 9), rng.randint(2, 16)
    value = Fraction(a, b) + Fraction(c, d)
    code = f"from fractions import Fraction as F\nprint(F({a},{b})+F({c},{d}))"
    return f"Compute {a}/{b} + {c}/{d} as a reduced fraction.", code, str(value)


def _prime_count(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(200, 3000)
    code = f"print(len([p for p in range(2,{n}) if all(p%d for d in range(2,int(p**0.5)+1))]))"
    answer = sum(1 for p in range(2, n) if all(p % d for d in range(2, math.isqrt(p) + 1)))
    return f"How many primes are less than {n}?", code, str(answer)


def _digit_sum_power(rng: random.Random) -> tuple[str, str, str]:
    b, e = rng.randint(2, 9), rng.randint(30, 200)
    code = f"print(sum(int(c) for c in str({b}**{e})))"
    return f"What is the sum of the digits of {b}^{e}?", code, str(sum(int(c) for c in str(b**e)))


def _lcm3(rng: random.Random) -> tuple[str, str, str]:
    a, b, c = rng.randint(6, 60), rng.randint(6, 60), rng.randint(6, 60)
    code = f"import math\nprint(math.lcm({a},{b},{c}))"
    return f"What is the lcm of {a}, {b} and {c}?", code, str(math.lcm(a, b, c))


def _digit_sum_count(rng: random.Random) -> tuple[str, str, str]:
    n, s = rng.randint(1000, 20000), rng.randint(10, 25)
    code = f"print(len([i for i in range(1,{n}+1) if sum(map(int,str(i)))=={s}]))"
    answer = sum(1 for i in range(1, n + 1) if sum(map(int, str(i))) == s)
    return f"How many integers from 1 to {n} have digit sum {s}?", code, str(answer)


def _prime_sum(rng: random.Random) -> tuple[str, str, str]:
    a = rng.randint(100, 1000)
    b = a + rng.randint(200, 2000)
    code = f"print(sum(p for p in range({a},{b}+1) if p>1 and all(p%d for d in range(2,int(p**0.5)+1))))"
    answer = sum(p for p in range(a, b + 1) if p > 1 and all(p % d for d in range(2, math.isqrt(p) + 1)))
    return f"What is the sum of the primes from {a} to {b}?", code, str(answer)


def _mod_inverse(rng: random.Random) -> tuple[str, str, str]:
    p = rng.choice([101, 997, 1009, 7919, 10007])
    a = rng.randint(2, p - 1)
    return f"Find the inverse of {a} modulo {p}.", f"print(pow({a},-1,{p}))", str(pow(a, -1, p))


def _factorial_mod(rng: random.Random) -> tuple[str, str, str]:
    n, m = rng.randint(20, 200), rng.choice([10007, 65537, 1000003])
    code = f"import math\nprint(math.factorial({n})%{m})"
    return f"What is {n}! mod {m}?", code, str(math.factorial(n) % m)


def _fib_mod(rng: random.Random) -> tuple[str, str, str]:
    n, m = rng.randint(50, 2000), rng.choice([1000, 9973, 100000])
    code = f"a,b=0,1\nfor _ in range({n}):\n    a,b=b,a+b\nprint(a%{m})"
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return f"What is the {n}th Fibonacci number mod {m}? (F1=F2=1)", code, str(a % m)


def _word_train(rng: random.Random) -> tuple[str, str, str]:
    start, stops = rng.randint(100, 400), rng.randint(5, 30)
    off, on = rng.randint(3, 12), rng.randint(3, 12)
    while start + stops * (on - off) < 0:
        start += 50
    prompt = (
        f"A train leaves with {start} passengers. At each of {stops} stops, {off} get off "
        f"and then {on} get on. How many passengers are on the train at the end?"
    )
    return prompt, f"print({start}+{stops}*({on}-{off}))", str(start + stops * (on - off))


TEMPLATES: dict[int, dict[str, Template]] = {
    1: {"mul": _mul, "add": _add, "sub": _sub, "mod": _mod, "range_sum": _range_sum},
    2: {"mul": _mul_big, "power": _power, "mod": _mod_big, "count_div": _count_div, "square_sum": _square_sum},
    3: {
        "pow_mod": _pow_mod,
        "count_or": _count_or,
        "sum_multiples": _sum_multiples,
        "word_boxes": _word_boxes,
        "word_money": _word_money,
    },
    4: {
        "word_farm": _word_farm,
        "word_shop": _word_shop,
        "fraction": _fraction,
        "prime_count": _prime_count,
        "digit_sum_power": _digit_sum_power,
        "lcm3": _lcm3,
    },
    5: {
        "digit_sum_count": _digit_sum_count,
        "prime_sum": _prime_sum,
        "mod_inverse": _mod_inverse,
        "factorial_mod": _factorial_mod,
        "fib_mod": _fib_mod,
        "word_train": _word_train,
    },
}


def generate_tasks(n: int, *, difficulty: int = 1, seed: int = 0) -> list[Task]:
    """``n`` tasks of one difficulty (1..5); the same arguments always give the same tasks.

    >>> [t.prompt for t in generate_tasks(2, difficulty=1, seed=0)] == [
    ...     t.prompt for t in generate_tasks(2, difficulty=1, seed=0)]
    True
    """
    if difficulty not in TEMPLATES:
        raise ValueError(f"difficulty must be 1..5, got {difficulty!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(f"tir-math/{difficulty}/{seed}")
    names = sorted(TEMPLATES[difficulty])
    tasks = []
    for i in range(n):
        name = names[rng.randrange(len(names))]
        prompt, code, answer = TEMPLATES[difficulty][name](rng)
        tasks.append(
            Task(
                id=f"math-d{difficulty}-s{seed}-{i}",
                prompt=prompt,
                answer=answer,
                kind=KIND,
                data={"difficulty": difficulty, "template": name, "code": code},
            )
        )
    return tasks


def load_math_tasks(path: str | Path) -> list[Task]:
    """Load a user JSONL file with ``question`` and ``answer`` (and optional ``id``) per line.

    ``answer`` may be a string or a number. Errors raise :class:`~tirl.errors.InputError`
    naming the file and the line.
    """
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for lineno, obj in read_jsonl(path):
        question = require_str(obj, "question", path, lineno)
        answer = require_str(obj, "answer", path, lineno, numbers=True)
        task_id = str(obj.get("id", f"{Path(path).stem}-{lineno}"))
        if task_id in seen:
            raise InputError(
                str(path),
                lineno,
                f"duplicate id {task_id!r} (first on line {seen[task_id]})",
                "give each task its own id",
            )
        seen[task_id] = lineno
        tasks.append(Task(id=task_id, prompt=question, answer=answer, kind=KIND, data={"source": str(path)}))
    if not tasks:
        raise InputError(str(path), None, "no tasks in the file", 'add lines like {"question": "...", "answer": "42"}')
    return tasks


def code_turn(code: str) -> str:
    """An assistant turn that runs ``code`` (the fixed fence format of tir-math)."""
    return f"```python\n{code}\n```"


def answer_turn(answer: str) -> str:
    """An assistant turn that gives the final answer."""
    return f"\\boxed{{{answer}}}"


def expert_solution(task: Task) -> list[str]:
    r"""A scripted sequence of assistant contents that solves a *generated* task through the env.

    Normally ``[code turn, answer turn]``. For about one task in three (chosen by
    a hash of the id, so it is deterministic) the first attempt fails and the
    second fixes it: either the value is not printed (the tool answers
    ``[no output]``), or ``print`` is misspelt (``NameError``). The answer turn
    is ``\boxed{<answer>}``; because the code prints exactly the answer, it is the
    real output of the previous turn (the SFT tests check this through the env).

    Tasks loaded from JSONL have no program, so they raise ``ValueError``.
    """
    code = task.data.get("code")
    if not isinstance(code, str) or task.answer is None:
        raise ValueError(f"task {task.id!r} has no scripted program (only generated tir-math tasks do)")
    turns = [code_turn(code), answer_turn(task.answer)]
    variant = int(hashlib.sha256(task.id.encode()).hexdigest(), 16) % 6
    lines = code.split("\n")
    last = lines[-1]
    if variant == 0 and last.startswith("print(") and last.endswith(")"):
        unprinted = "\n".join([*lines[:-1], last[len("print(") : -1]])
        return [code_turn(unprinted), *turns]
    if variant == 1 and last.startswith("print("):
        typo = "\n".join([*lines[:-1], "prnt(" + last[len("print(") :]])
        return [code_turn(typo), *turns]
    return turns
