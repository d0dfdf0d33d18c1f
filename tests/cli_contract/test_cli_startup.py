"""Start-up: `import tirl.cli`, the --help pages and input errors load no torch or transformers.

Each case runs in a fresh interpreter (a subprocess) and reports ``sys.modules``; timing is left to
benchmarks/bench_cli_startup.py (a wall-clock bound would be flaky on a shared machine). Importing torch and
transformers is what made a typo'd env name take 15-50 s to report. Every subcommand's ``--help`` is checked.
Not covered: the commands' real work, which needs torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
HEAVY = ("torch", "transformers")
PROBE = (
    "import json, sys\n"
    "import tirl.cli\n"
    "argv = json.loads(sys.argv[1])\n"
    "rc = None\n"
    "if argv is not None:\n"
    "    try:\n        rc = tirl.cli.main(argv)\n    except SystemExit as e:\n        rc = e.code or 0\n"
    f"print(json.dumps({{'rc': rc, 'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}), file=sys.stderr)\n"
)


def _probe(argv: list[str] | None, cwd: Path) -> tuple[int | None, list[str], str]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120, check=False)  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    result = json.loads(lines[-1])
    return result["rc"], result["heavy"], "\n".join(lines[:-1])


def test_importing_the_command_line_loads_no_torch(tmp_path: Path) -> None:
    assert _probe(None, tmp_path)[:2] == (None, [])


def _help_pages() -> list[list[str]]:
    """``tirl --help`` and ``tirl X --help`` for every subcommand X (the CLI's own table: a new one is included)."""
    from tirl.cli import COMMANDS

    return [["--help"], *([name, "--help"] for name in COMMANDS)]


@pytest.mark.parametrize("argv", _help_pages(), ids=lambda argv: " ".join(argv))
def test_help_pages_load_no_torch(argv: list[str], tmp_path: Path) -> None:
    """Before: `tirl sft --help` imported torch and transformers (the SFT defaults lived beside the torch code)."""
    rc, heavy, _ = _probe(argv, tmp_path)
    assert (rc, heavy) == (0, [])


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["train", "--env", "nosuch"], "unknown environment 'nosuch'"),
        (["eval", "--env", "nosuch"], "unknown environment 'nosuch'"),
        (["train", "--set", "algo.nosuch=1"], "algo.nosuch"),
        (["train", "--set", "trainer.tolerate_failed_steps=-1"], "trainer.tolerate_failed_steps"),
        (["train", "--env", "tir-math", "--set", "env.tools=true"], "env.tools=false"),
    ],
)
def test_input_errors_come_before_torch_loads(argv: list[str], says: str, tmp_path: Path) -> None:
    """Checked at the parent commit: every one of these imported torch and transformers first."""
    rc, heavy, err = _probe(argv, tmp_path)
    assert (rc, heavy) == (2, [])
    (line,) = err.splitlines()
    assert line.startswith("error:") and says in line
    assert not (tmp_path / "runs").exists()  # no run directory for a run that never started


def test_model_init_reports_the_whole_commands_time(tmp_path: Path) -> None:
    """The reported time covers the imports too (before: 'wrote ... in 1.9 s' after 28.6 s of wall time).

    The command cannot time the interpreter's start and exit (seconds under load: 4.8 s of 20.6 s once), so the
    bound is half the wall time; a timer that starts after the imports reports a few percent of it (1.1 of 26 s).
    """
    import re
    import time

    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tirl.cli", "model", "init", "--out", str(tmp_path / "m")],
                          capture_output=True, text=True, env=env, timeout=300, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr
    found = re.search(r"wrote \S+ in ([0-9.]+) s", proc.stdout)
    assert found is not None, proc.stdout
    assert wall / 2 <= float(found.group(1)) <= wall


def test_tirl_filter_imports_no_sandbox_and_no_asyncio(tmp_path: Path) -> None:
    """`tirl filter` judges text: the sandbox and asyncio (~110 ms of its start-up, 10% of the CPU it spends on
    100,000 turns in benchmarks/bench_filter.py) came in through ``tirl.envs``' ToolEnv import; now lazy."""
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "t", "messages": [{"role": "assistant", "content": "\\boxed{1}"}]}) + "\n")
    script = (
        "import json, sys\nimport tirl.cli\n"
        f"rc = tirl.cli.main(['filter', {str(src)!r}, '--verdicts', {str(tmp_path / 'v.jsonl')!r}, '--workers', '1'])\n"
        "seen = [m for m in ('asyncio', 'tirl.sandbox', 'torch') if m in sys.modules]\n"
        "print(json.dumps([rc, seen]), file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120, check=False)  # fmt: skip
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == [0, []], proc.stderr
    assert (tmp_path / "v.jsonl").read_text().count("\n") == 1


def test_a_ctrl_c_while_the_process_exits_prints_no_traceback(tmp_path) -> None:
    """After tirl's last line the process runs its exit callbacks (torch's, temporary directories); a late second
    Ctrl-C landed in one and printed "Exception ignored in atexit callback ... KeyboardInterrupt" (seen on a
    `tirl train --nproc 2` stopped by two Ctrl-C 0.2 s apart). The SIGINT here arrives inside such a callback."""
    import subprocess
    import sys

    code = (
        "import atexit, os, signal, sys, time\n"
        "def late_ctrl_c():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.2)\n"
        "atexit.register(late_ctrl_c)\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"  # as a terminal's foreground job has it
        "from tirl.cli import main\n"
        "sys.argv = ['tirl', 'config', 'show']\n"
        "sys.exit(main())\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert got.returncode == 0, got.stderr
    assert "Traceback" not in got.stderr and "KeyboardInterrupt" not in got.stderr, got.stderr
    assert "[env]" in got.stdout


def test_a_ctrl_c_while_torch_loads_is_one_line(tmp_path) -> None:
    """Ctrl-C 1.8-3.8 s into `tirl train` landed in torch's import; the line that says what the run kept then
    imported tirl.trainer.checkpoint, whose `import torch` met the half-imported torch and printed two chained
    tracebacks ("partially initialized module 'torch' has no attribute 'autograd'", "duplicate registrations
    for aten.linspace"). Here torch cannot be imported at all (None in sys.modules), and the run is stopped by a
    KeyboardInterrupt where the heavy imports begin; a checkpoint is left, so the line must list the steps."""
    import subprocess
    import sys

    run = tmp_path / "run"
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"  # `import torch` now raises ImportError, as a half-imported torch does
        "import tirl.commands.train as train\n"
        "def stopped(args, cfg, run_dir, created, stop):\n"
        "    (run_dir / 'checkpoints' / 'step-2').mkdir(parents=True)\n"
        "    raise KeyboardInterrupt\n"
        "train._run_locked = stopped\n"
        "from tirl.cli import main\n"
        f"sys.argv = ['tirl', 'train', '--run-dir', {str(run)!r}, '--steps', '1']\n"
        "sys.exit(main())\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert got.returncode == 130, got.stderr
    assert "Traceback" not in got.stderr, got.stderr
    assert got.stderr.strip().splitlines()[-1] == (
        f"interrupted: {run} keeps checkpoint step-2 — continue it with `tirl train --resume {run}`"
    )


def test_a_ctrl_c_while_a_command_module_loads_is_one_line(monkeypatch, capsys) -> None:
    """Ctrl-C in the first 0.2 s of `tirl train` (its module's imports) printed a KeyboardInterrupt traceback."""
    import importlib

    from tirl import cli

    real = importlib.import_module

    def interrupted(name: str, *args: object) -> object:
        if name.startswith("tirl.commands."):
            raise KeyboardInterrupt
        return real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(cli.importlib, "import_module", interrupted)
    assert cli.main(["train"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_a_ctrl_c_that_a_library_turns_into_another_error_is_one_line(tmp_path) -> None:
    """Ctrl-C 0.3 s into `tirl serve` landed in numpy's extension import (under torch's), which raised
    "ImportError: cannot load module more than once per process" instead: a traceback, for a Ctrl-C."""
    import subprocess
    import sys

    code = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"  # as a terminal's foreground job has it
        "import tirl.commands.audit as audit\n"
        "def run(args):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(5)\n"
        "    except KeyboardInterrupt:\n"
        "        raise ImportError('cannot load module more than once per process') from None\n"
        "audit.run = run\n"
        "from tirl.cli import main\n"
        f"sys.argv = ['tirl', 'audit', {str(tmp_path)!r}]\n"
        "sys.exit(main())\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert (got.returncode, got.stderr) == (130, "interrupted\n")


def test_python_dash_m_tirl_runs_the_command_line() -> None:
    """`python -m tirl ...` said "No module named tirl.__main__; 'tirl' is a package and cannot be directly
    executed" (only `python -m tirl.cli` worked): the way to run tirl from a venv without its script on PATH."""
    import subprocess
    import sys

    got = subprocess.run([sys.executable, "-m", "tirl", "--version"], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and got.stdout.startswith("tirl "), got.stderr
    bad = subprocess.run([sys.executable, "-m", "tirl", "nosuch"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: tirl: unknown command"), bad.stderr
