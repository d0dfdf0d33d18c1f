"""Hypothesis fuzzing of every file the CLI reads: never a traceback, always exit 0 or one ``error:`` line + exit 2.

Inputs are JSON-shaped values (deep, huge integers, floats that are not
finite, lone surrogates), broken into bytes (truncated, invalid UTF-8,
spliced). Each reader runs through ``tirl.cli.main`` in-process: trajectory
JSONL (``filter``, ``audit``), metrics JSONL and wandb CSV (``diagnose
training``), pipeline traces (``diagnose pipeline``), TOML (``--config``),
a run's ``config.json`` given to ``--config``, evidence bundles (``review``, refused before any network), and task files
(the loaders that ``env.tasks_file`` uses, which raise ``InputError`` only).
Example counts are kept small so the whole module runs in seconds;
``TIRL_FUZZ_EXAMPLES=500`` runs a longer search.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cli_run import assert_refused, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tirl.errors import InputError

FAST = settings(
    max_examples=int(os.environ.get("TIRL_FUZZ_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

KEYS = ["id", "messages", "role", "content", "answer", "reward", "step", "t", "init_queue", "run_queue",
        "eval_queue", "question", "repo", "prompt", "test_command", "tool_calls", "reward/mean",
        "filter/valid_trajectories", "train/is_ratio_max"]  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["user", "assistant", "tool", "system", "\\boxed{1e5000}", "```python\nprint(1)\n```"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), inner, max_size=5),
    ),
    max_leaves=12,
)


def _hostile_line(kind: str, value: Any) -> bytes:
    text = json.dumps(value)
    if kind == "deep":
        return b"[" * 5000 + b"]" * 5000
    if kind == "long_int":
        return b'{"step": ' + b"9" * 5000 + b"}"
    if kind == "surrogate":
        return b'{"id": "\\ud800", "messages": []}'
    return text.encode()


lines = st.tuples(st.sampled_from(["plain"] * 6 + ["deep", "long_int", "surrogate"]), json_values).map(
    lambda kv: _hostile_line(*kv)
)


@st.composite
def jsonl_bytes(draw: st.DrawFn) -> bytes:
    data = b"\n".join(draw(st.lists(lines, min_size=0, max_size=6))) + b"\n"
    mutation = draw(st.sampled_from(["none", "none", "truncate", "bad_utf8", "splice"]))
    if mutation == "truncate" and data:
        data = data[: draw(st.integers(0, len(data)))]
    elif mutation == "bad_utf8":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + b"\xff\xfe" + data[at:]
    elif mutation == "splice":
        data += draw(st.binary(max_size=40))
    return data


def _check(outcome: Any) -> None:
    if outcome.code == 0:
        assert "Traceback" not in outcome.err
    else:
        assert_refused(outcome)


@pytest.mark.parametrize("command", ["filter", "audit", "diagnose-training", "diagnose-pipeline"])
@FAST
@given(data=jsonl_bytes())
def test_fuzz_jsonl_readers(capsys, tmp_path_factory, command, data):
    tmp = tmp_path_factory.mktemp("fz")
    path = tmp / "in.jsonl"
    path.write_bytes(data)
    out = tmp / "verdicts.jsonl"
    argv = {
        "filter": ["filter", path, "--verdicts", out, "--json"],
        "audit": ["audit", path, "--json"],
        "diagnose-training": ["diagnose", "training", path, "--json"],
        "diagnose-pipeline": ["diagnose", "pipeline", path, "--json"],
    }[command]
    outcome = run_cli(capsys, *argv)
    _check(outcome)
    if outcome.code != 0:
        assert not out.exists()  # no partial output
    elif command != "filter":
        json.loads(outcome.out, parse_constant=lambda name: pytest.fail(f"{name} in --json output"))


csv_cells = st.one_of(st.text(max_size=8), st.sampled_from(["", "nan", "inf", "1e999", "9" * 5000, "1.5", "-3"]))


@FAST
@given(
    header=st.lists(
        st.sampled_from(["Step", "step", "run - reward/mean", "reward/mean", "x__MIN", "a - b - c"]), max_size=5
    ),
    rows=st.lists(st.lists(csv_cells, max_size=6), max_size=6),
    tail=st.binary(max_size=10),
)
def test_fuzz_wandb_csv(capsys, tmp_path_factory, header, rows, tail):
    path = tmp_path_factory.mktemp("fz") / "log.csv"
    text = "\n".join(",".join(json.dumps(c) if "," in c else c for c in row) for row in [header, *rows])
    path.write_bytes(text.encode("utf-8", "surrogatepass") + tail)
    _check(run_cli(capsys, "diagnose", "training", path, "--json"))


toml_values = st.one_of(
    st.sampled_from(['"drop"', '"mask"', "inf", "nan", "1e999", "9" * 5000, "[" * 3000 + "]" * 3000, "true", '"x"']),
    st.integers().map(str),
    st.floats().map(lambda f: repr(f) if f == f and abs(f) != float("inf") else "inf"),
)


@FAST
@given(
    section=st.sampled_from(["filter", "algo", "generation", "nope", "filter.deep"]),
    key=st.sampled_from(["mode", "exec_langs", "boxed", "lr", "temperature", "x"]),
    value=toml_values,
    noise=st.binary(max_size=12),
)
def test_fuzz_toml_config(capsys, tmp_path_factory, section, key, value, noise):
    tmp = tmp_path_factory.mktemp("fz")
    cfg = tmp / "c.toml"
    cfg.write_bytes(f"[{section}]\n{key} = {value}\n".encode() + noise)
    traj = tmp / "t.jsonl"
    traj.write_text('{"id": "a", "messages": [{"role": "assistant", "content": "\\\\boxed{1}"}]}\n', encoding="utf-8")
    out = tmp / "v.jsonl"
    outcome = run_cli(capsys, "filter", traj, "--verdicts", out, "--config", cfg)
    _check(outcome)
    if outcome.code != 0:
        assert not out.exists()


@FAST
@given(
    section=st.sampled_from(["filter", "algo", "generation", "trainer", "nope"]),
    key=st.sampled_from(["mode", "exec_langs", "lr", "temperature", "steps", "x"]),
    value=st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=4), scalars, max_size=2)),
    cut=st.one_of(st.none(), st.none(), st.integers(0, 400)),
)
def test_fuzz_json_config(capsys, tmp_path_factory, section, key, value, cut):
    """A run's config.json given to --config, one value changed (and sometimes cut short)."""
    from tirl.config import config_to_dict, load_config

    tmp = tmp_path_factory.mktemp("fz")
    saved = config_to_dict(load_config(None))
    saved.setdefault(section, {})[key] = value
    text = json.dumps(saved)
    cfg = tmp / "config.json"
    cfg.write_text(text if cut is None else text[:cut], encoding="utf-8", errors="surrogatepass")
    traj = tmp / "t.jsonl"
    traj.write_text('{"id": "a", "messages": [{"role": "assistant", "content": "\\\\boxed{1}"}]}\n', encoding="utf-8")
    out = tmp / "v.jsonl"
    outcome = run_cli(capsys, "filter", traj, "--verdicts", out, "--config", cfg)
    _check(outcome)
    if outcome.code != 0:
        assert not out.exists()


@FAST
@given(data=st.binary(max_size=200))
def test_fuzz_review_bundle_is_read_or_refused_before_the_network(capsys, tmp_path_factory, data):
    bundle = tmp_path_factory.mktemp("fz") / "b.md"
    bundle.write_bytes(data)
    # no key in the environment: a readable bundle stops at the key check, an unreadable one before it
    outcome = run_cli(capsys, "review", bundle, "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                      "--env-key", "TIRL_FUZZ_NO_SUCH_KEY")  # fmt: skip
    assert_refused(outcome)


def _loaders() -> list[Any]:
    from tirl.envs.tasks.math_gen import load_math_tasks
    from tirl.envs.tasks.swe_gen import load_swe_tasks

    found = [load_math_tasks, load_swe_tasks]
    try:
        from tirl.envs.tasks.files import read_task_rows
    except ImportError:
        return found
    return [*found, read_task_rows]


@pytest.mark.parametrize("loader", _loaders(), ids=lambda f: f.__name__)
@FAST
@given(data=jsonl_bytes())
def test_fuzz_task_files(tmp_path_factory, loader, data):
    path = tmp_path_factory.mktemp("fz") / "tasks.jsonl"
    path.write_bytes(data)
    try:
        loader(path)
    except InputError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)


def test_fuzz_module_is_wired(tmp_path: Path) -> None:
    """The byte mutations above do produce the hostile cases (a strategy that never did would test nothing)."""
    sample = b"\n".join(_hostile_line(k, {}) for k in ("deep", "long_int", "surrogate"))
    assert b"[" * 5000 in sample and b"9" * 5000 in sample and b"\\ud800" in sample


arg_text = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
    st.sampled_from(["inf", "nan", "-1", "0", "1e999", "9" * 5000, "", "--json", "/dev/full", "/dev/null", "."]),
)


@FAST
@given(
    command=st.sampled_from([["filter"], ["audit"], ["diagnose", "training"], ["diagnose", "pipeline"], ["report"]]),
    options=st.lists(
        st.tuples(
            st.sampled_from(
                ["--verdicts", "--kept", "--exec-langs", "--config", "--format", "--bundle", "--out", "--run"]
            ),
            arg_text,
        ),
        max_size=3,
    ),
)
def test_fuzz_arguments_of_the_file_commands(capsys, tmp_path_factory, command, options):
    """Arbitrary option values for the commands that only read and write files: exit 0, or one error: line."""
    tmp = tmp_path_factory.mktemp("fz")
    run = tmp / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "reward/mean": 0.5, "filter/valid_trajectories": 8}) + "\n" for s in range(1, 4)
        ),
        encoding="utf-8",
    )
    traj = tmp / "t.jsonl"
    traj.write_text('{"id": "a", "messages": [{"role": "assistant", "content": "\\\\boxed{1}"}]}\n', encoding="utf-8")
    target = {"filter": traj, "audit": traj, "report": run}.get(command[0], run)
    argv: list[Any] = [*command, target]
    for flag, value in options:
        argv += [flag, value if not value.startswith("-") else f"./{value}"]
    if command[0] == "filter" and "--verdicts" not in argv:
        argv += ["--verdicts", tmp / "v.jsonl"]
    cwd = os.getcwd()
    os.chdir(tmp)  # relative output paths land in the example's directory
    try:
        outcome = run_cli(capsys, *argv)
    finally:
        os.chdir(cwd)
    _check(outcome)
    assert os.path.exists("/dev/full") is False or Path("/dev/full").is_char_device()
