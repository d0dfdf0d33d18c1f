r"""Expert scripts for the swe-lite curriculum: find and fix the planted bug through the shell.

The plain script is five assistant turns, each a ```` ```bash ```` block:

1. ``python3 check.py`` — the visible check fails with a traceback that names the call;
2. ``grep -n -A<k> "def <function>(" <pkg>/core.py`` — the function with line numbers;
3. ``sed -i '<line>s/<buggy>/<fixed>/' <pkg>/core.py`` (``<line>a\    return …`` for a missing return);
4. ``python3 check.py`` — ``all checks passed``;
5. ``submit``.

Detours, chosen by a hash of the task's bug (about half the tasks have one):

* ``pytest`` first: ``python3 -m pytest -q`` answers ``No module named pytest`` (the sandbox has none),
  and the next turn runs ``python3 check.py`` instead (6 turns);
* a wrong first guess: for a bug with a decoy, the first edit puts the decoy in, the re-run check still
  fails (with a new value), and the next edit puts the right text in (7 turns);
* ``cat -n`` instead of ``grep`` to locate (5 turns), or ``grep -n`` then ``sed -n 'a,bp'`` (6 turns);
* the fix as a small ``python3`` script that rewrites the line (5 turns).

So a solved expert episode has 5–8 assistant turns. The scripts are data: they
only work when the env runs them; :func:`curriculum_expert_solution` does not
run anything. Not covered: tasks not made by
:mod:`tirl.envs.tasks.swe_curriculum` (``ValueError``).
"""

from __future__ import annotations

import hashlib

from tirl.envs.base import Task
from tirl.envs.tasks.swe_curriculum import Bug, bug_of

_BRE_SPECIAL = set("\\.*[]^$/")


def sed_pattern(text: str) -> str:
    r"""``text`` as a literal in a sed basic regular expression with ``/`` delimiters.

    >>> sed_pattern("xs[:k]")
    'xs\\[:k\\]'
    """
    return "".join("\\" + c if c in _BRE_SPECIAL else c for c in text)


def sed_replacement(text: str) -> str:
    r"""``text`` as a literal sed replacement (``&``, ``\`` and ``/`` escaped)."""
    return "".join("\\" + c if c in "\\&/" else c for c in text)


def bash_turn(command: str) -> str:
    """An assistant turn that runs one shell command."""
    return f"```bash\n{command}\n```"


def _quote(text: str) -> str:
    """``text`` inside single quotes for bash (the templates have no single quotes; still escaped)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _substitute(bug: Bug, module: str, wrong: str, right: str) -> str:
    return f"sed -i {_quote(f'{bug.line}s/{sed_pattern(wrong)}/{sed_replacement(right)}/')} {module}"


def fix_command(bug: Bug, module: str, *, python: bool = False) -> str:
    """The one command that undoes ``bug`` in ``module`` (sed, or a small python3 rewrite of the line)."""
    if python:
        if bug.kind == "missing_return":
            change = f"lines.insert({bug.line}, {bug.old!r})"
        else:
            change = f"lines[{bug.line - 1}] = lines[{bug.line - 1}].replace({bug.new!r}, {bug.old!r})"
        return (
            f"python3 - <<'EOF'\np = {module!r}\nlines = open(p).read().split('\\n')\n{change}\n"
            "open(p, 'w').write('\\n'.join(lines))\nprint('fixed')\nEOF"
        )
    if bug.kind == "missing_return":
        return f"sed -i {_quote(f'{bug.line}a' + chr(92) + bug.old)} {module}"
    return _substitute(bug, module, bug.new, bug.old)


def curriculum_expert_solution(task: Task) -> list[str]:
    """The scripted assistant turns that fix a curriculum task through the swe-lite env (5–8 turns)."""
    bug = bug_of(task)
    module = str(task.data["module"])
    digest = int(hashlib.sha256(task.data["files"][module].encode()).hexdigest(), 16)
    locate_way, detour = digest % 4, (digest // 4) % 4
    check = bash_turn("python3 check.py")
    turns = [check]
    if detour == 0:  # try pytest first; the sandbox has none, so read the error and run the check
        turns.insert(0, bash_turn("python3 -m pytest -q"))
    last = bug.first_line + bug.length - 1
    if locate_way == 0:
        turns.append(bash_turn(f"cat -n {module}"))
    elif locate_way == 1:
        turns.append(bash_turn(f'grep -n "def {bug.function}(" {module}'))
        turns.append(bash_turn(f"sed -n '{bug.first_line},{last}p' {module}"))
    else:
        turns.append(bash_turn(f'grep -n -A{bug.length - 1} "def {bug.function}(" {module}'))
    if detour == 1 and bug.decoy is not None:  # a wrong first guess, seen to fail, then the right fix
        turns.append(bash_turn(_substitute(bug, module, bug.new, bug.decoy)))
        turns.append(check)
        turns.append(bash_turn(_substitute(bug, module, bug.decoy, bug.old)))
    else:
        turns.append(bash_turn(fix_command(bug, module, python=detour == 2)))
    return [*turns, check, bash_turn("submit")]


def wrong_fix_solution(task: Task) -> list[str]:
    """A deliberately wrong script (for tests): the decoy edit (or a comment) leaves the bug in, then submit."""
    bug = bug_of(task)
    module = str(task.data["module"])
    edit = _substitute(bug, module, bug.new, bug.decoy) if bug.decoy else f"echo '# looked at it' >> {module}"
    return [bash_turn(edit), bash_turn("python3 check.py"), bash_turn("submit")]


__all__ = [
    "bash_turn",
    "curriculum_expert_solution",
    "fix_command",
    "sed_pattern",
    "sed_replacement",
    "wrong_fix_solution",
]
