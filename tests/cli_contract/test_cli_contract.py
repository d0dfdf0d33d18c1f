"""The CLI contract on hostile input: one ``error:`` line naming the input, exit 2, never a traceback.

One property per test. Inputs come from the red-team list of issue 11:
non-UTF-8 bytes, nesting depth 1e5, integers over 4300 digits, bad ports,
non-finite numbers, and ``diagnose --json`` that must stay strict JSON.
"""

from __future__ import annotations

import json

import pytest
from cli_run import DEEP, LONG_INT, NOT_UTF8, TRAJ, assert_refused, metrics_row, run_cli, trace_row, write_jsonl


def _strict(text: str) -> object:
    def refuse(name: str) -> object:
        raise AssertionError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------ non-UTF-8 input, per reader
@pytest.mark.parametrize("command", ["filter", "audit", "diagnose-training", "diagnose-pipeline", "diagnose-csv"])
def test_non_utf8_input_is_one_error_line(capsys, tmp_path, command):
    good = json.dumps(TRAJ if command in ("filter", "audit") else metrics_row(1)).encode() + b"\n"
    path = tmp_path / ("log.csv" if command == "diagnose-csv" else "in.jsonl")
    path.write_bytes(good + NOT_UTF8 if command != "diagnose-csv" else b"step,reward/mean\n1,0.5\n2,\xff\n")
    argv = {
        "filter": ["filter", path, "--verdicts", tmp_path / "v.jsonl"],
        "audit": ["audit", path],
        "diagnose-training": ["diagnose", "training", path],
        "diagnose-pipeline": ["diagnose", "pipeline", path],
        "diagnose-csv": ["diagnose", "training", path],
    }[command]
    assert_refused(run_cli(capsys, *argv), "UTF-8", str(path))
    assert not (tmp_path / "v.jsonl").exists()


def test_report_on_non_utf8_files_never_tracebacks(capsys, tmp_path):
    """The report degrades per section: an unreadable file is named in the HTML, the rest is still reported."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("metrics.jsonl", "pipeline_trace.jsonl", "trajectories.jsonl", "summary.json"):
        (run / name).write_bytes(NOT_UTF8)
    out = run_cli(capsys, "report", run)
    assert out.code == 0 and "Traceback" not in out.err, out.err
    html = (run / "report.html").read_text(encoding="utf-8")
    assert html.count("UTF-8") >= 3


def test_non_utf8_bundle_for_review(capsys, tmp_path):
    bundle = tmp_path / "bundle.md"
    bundle.write_bytes(b"# evidence\n\xff\xfe\n")
    out = run_cli(capsys, "review", bundle, "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    assert_refused(out, str(bundle), "UTF-8")


def test_non_utf8_toml_config(capsys, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(b'[filter]\nmode = "drop"\n# \xff\xfe\n')
    traj = write_jsonl(tmp_path / "t.jsonl", [TRAJ])
    assert_refused(run_cli(capsys, "filter", traj, "--verdicts", tmp_path / "v", "--config", cfg), "UTF-8", str(cfg))


@pytest.mark.parametrize("text", ["a = " + "[" * 100_000 + "]" * 100_000, "a = " + LONG_INT])
def test_hostile_toml_config(capsys, tmp_path, text):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text + "\n", encoding="utf-8")
    traj = write_jsonl(tmp_path / "t.jsonl", [TRAJ])
    assert_refused(run_cli(capsys, "filter", traj, "--verdicts", tmp_path / "v", "--config", cfg), str(cfg))


# ------------------------------------------------------------------ depth and long integers in JSONL
@pytest.mark.parametrize("line", [DEEP, '{"id": "x", "messages": [], "reward": ' + LONG_INT + "}"])
@pytest.mark.parametrize("command", ["filter", "audit", "diagnose-training", "diagnose-pipeline"])
def test_deep_or_long_number_line_is_refused_with_its_line(capsys, tmp_path, line, command):
    first = json.dumps(TRAJ if command in ("filter", "audit") else metrics_row(1))
    path = tmp_path / "in.jsonl"
    path.write_text(first + "\n" + line + "\n", encoding="utf-8")
    argv = {
        "filter": ["filter", path, "--verdicts", tmp_path / "v.jsonl"],
        "audit": ["audit", path],
        "diagnose-training": ["diagnose", "training", path],
        "diagnose-pipeline": ["diagnose", "pipeline", path],
    }[command]
    assert_refused(run_cli(capsys, *argv), f"{path}:2")


@pytest.mark.parametrize("info", ["5", "[1]", '"x"'])
@pytest.mark.parametrize("command", ["filter", "audit", "report"])
def test_an_info_that_is_not_an_object_names_its_line(capsys, tmp_path, info, command):
    """``"info": 5`` crashed audit and report (AttributeError in audit_verdicts) and filter accepted it."""
    run = tmp_path / "run"
    run.mkdir()
    path = run / "trajectories.jsonl"
    path.write_text(json.dumps(TRAJ) + "\n" + json.dumps(TRAJ)[:-1] + f', "info": {info}}}\n', encoding="utf-8")
    argv = {"filter": ["filter", path, "--verdicts", tmp_path / "v.jsonl"], "audit": ["audit", path]}
    out = run_cli(capsys, *argv.get(command, ["report", run]))
    if command != "report":
        assert_refused(out, f"{path}:2: 'info' must be an object or null")
        assert not (tmp_path / "v.jsonl").exists()
        return
    assert out.code == 0 and "Traceback" not in out.err, out.err  # the rest of the run is still reported
    lines = out.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warning: {path}:2: 'info' must be an object or null, got "), lines
    assert lines[0].endswith("(left out of the report; the rest is written)")
    assert "could not read" in (run / "report.html").read_text(encoding="utf-8")


# ------------------------------------------------------------------ arguments
def test_serve_port_out_of_range(capsys):
    assert_refused(run_cli(capsys, "serve", "--port", "99999"), "--port", "99999")


@pytest.mark.parametrize("command", ["serve", "sft"])
@pytest.mark.parametrize("value", ["100000", "0", "-3"])
def test_threads_flag_has_the_trainer_threads_bound(capsys, tmp_path, command, value):
    """``--threads`` is ``trainer.threads`` by another name: 100000 crashed torch; 0 was silently made 1 by sft."""
    argv = ["--model", str(tmp_path / "none")] if command == "serve" else ["--out", str(tmp_path / "out")]
    out = run_cli(capsys, command, "--threads", value, *argv)
    assert_refused(out, "--threads", value, "4 x the CPU cores")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("value", "advice"),
    [("1.5", "from 0 to 1"), ("-0.1", "from 0 to 1"), ("nan", "not a finite number"), ("inf", "not a finite number")],
)
def test_sft_copy_short_share_is_a_share(capsys, tmp_path, value, advice):
    out = run_cli(capsys, "sft", "--env", "swe-lite", "--copy-short-share", value, "--out", str(tmp_path / "out"))
    assert_refused(out, "--copy-short-share", value, advice)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flags", "advice"),
    [
        (["--env", "tir-math", "--copy-steps", "5"], "--copy-short-share with --env tir-math: it shapes swe-lite's"),
        (["--env", "swe-lite", "--copy-steps", "0"], "--copy-short-share with --copy-steps 0: no copy curriculum runs"),
    ],
)
def test_sft_copy_short_share_where_nothing_reads_it_is_refused(capsys, tmp_path, flags, advice):
    """It was accepted and did nothing (no copy curriculum ran, or tir-math's has no short episodes)."""
    out = run_cli(capsys, "sft", *flags, "--copy-short-share", "1", "--out", str(tmp_path / "out"))
    assert_refused(out, "--copy-short-share", advice)
    assert not (tmp_path / "out").exists()


def test_sft_copy_short_share_reaches_the_config_where_it_acts_and_defaults_otherwise():
    import argparse

    from tirl.commands.sft import _config, add_arguments
    from tirl.sft_config import SFTConfig

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    given = _config(parser.parse_args(["--out", "o", "--env", "swe-lite", "--copy-short-share", "0.25"]))
    assert given.copy_short_share == 0.25
    default = _config(parser.parse_args(["--out", "o", "--env", "swe-lite"]))
    assert default.copy_short_share == SFTConfig.copy_short_share == 0.5


@pytest.mark.parametrize(
    ("flags", "advice"),
    [
        (["--lr", "-1"], "--lr -1.0 is invalid: use a positive learning rate"),  # was torch's ValueError traceback
        (["--lr", "0"], "--lr 0.0 is invalid"),  # trained nothing, silently
        (["--copy-steps", "-1"], "--copy-steps -1 is invalid"),  # was made 0, silently
        (["--stop-at-accuracy", "5"], "--stop-at-accuracy 5.0 is invalid"),  # could never stop, silently
        (["--arch", "llama", "--init", "src/tirl/assets/tiny-tir"], "--arch llama with --init"),  # --arch was ignored
        # the fresh model's shape and tokenizer, with --init or (BPE) --arch tiny: each was ignored without a word
        (["--init", "src/tirl/assets/tiny-tir", "--layers", "8", "--hidden", "64"], "--layers, --hidden with --init"),
        (["--init", "src/tirl/assets/tiny-tir", "--heads", "2"], "--heads with --init: the model and its tokenizer"),
        (["--init", "src/tirl/assets/tiny-tir", "--split-digits"], "--split-digits with --init"),
        (["--vocab", "4096"], "--vocab is for a BPE tokenizer, and --arch tiny has the character one: add --arch"),
        (["--corpus", "tasks", "--split-digits"], "--corpus, --split-digits are for a BPE tokenizer"),
        # a fresh model's bounds (a transformers traceback, torch's allocation traceback, or the machine's memory)
        (["--hidden", "30", "--heads", "4"], "--hidden 30 is not divisible by --heads 4"),
        (["--layers", "100000", "--hidden", "100000"], "--layers 100000 is out of range: use 1 to 128"),
        (["--layers", "128", "--hidden", "16384"], "billion parameters need"),
        (["--seed", "-1"], "--seed -1 is invalid"),  # trained with it
        (["--train-tasks", "99999999999"], "--train-tasks 99999999999 is invalid"),  # generated without end
        (["--heads", "0"], "--heads 0 is invalid: a fresh tiny model needs 1 or more"),
        (["--hidden", "-8"], "--hidden -8 is invalid: a fresh tiny model needs 1 or more"),
        # the flag given wrong is named (the line listed all five)
        (["--steps", "0"], "--steps 0 is invalid: use 1 or more"),
        (["--eval-every", "-2"], "--eval-every -2 is invalid: use 1 or more"),
        # tir-chain's tasks have no levels: it trained on the same chains as without it, and said nothing
        (["--env", "tir-chain", "--difficulty", "4"], "--difficulty 4 with --env tir-chain: its tasks have no levels"),
    ],
)
def test_sft_flags_out_of_range_are_refused_before_any_work(capsys, tmp_path, flags, advice):
    out = run_cli(capsys, "sft", *flags, "--out", str(tmp_path / "out"))
    assert_refused(out, advice)
    assert not (tmp_path / "out").exists()


def test_model_init_larger_than_memory_is_refused(capsys, tmp_path):
    """``--layers 128 --hidden 16384`` (400 billion parameters) took the machine's memory building the model."""
    out = run_cli(capsys, "model", "init", "--layers", "128", "--hidden", "16384", "--out", str(tmp_path / "m"))
    assert_refused(out, "--layers 128 --hidden 16384: about 412", "GiB of memory are free — choose a smaller model")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("heads", ["-4", "129"])
def test_model_init_heads_out_of_range_is_refused(capsys, tmp_path, heads):
    """``--heads -4`` was silently the derived count (2); over --hidden cannot divide it."""
    out = run_cli(capsys, "model", "init", "--hidden", "128", "--heads", heads, "--out", str(tmp_path / "m"))
    assert_refused(out, f"--heads {heads} is out of range")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "1e999"])
def test_review_timeout_not_finite(capsys, tmp_path, value):
    bundle = tmp_path / "b.md"
    bundle.write_text("# b\n", encoding="utf-8")
    out = run_cli(capsys, "review", bundle, "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--timeout", value)
    assert_refused(out, "--timeout")


def test_sandbox_timeout_inf(capsys, tmp_path):
    code = tmp_path / "x.py"
    code.write_text("print(1)\n", encoding="utf-8")
    assert_refused(run_cli(capsys, "sandbox", "exec", code, "--timeout", "inf"), "--timeout")


NON_FINITE = ["algo.lr=inf", "algo.lr=nan", "algo.clip_high=1e999", "trainer.steps=" + LONG_INT]


@pytest.mark.parametrize("override", NON_FINITE)
def test_train_refuses_non_finite_set_at_parse_time(capsys, tmp_path, override):
    run_dir = tmp_path / "run"
    out = run_cli(capsys, "train", "--set", override, "--run-dir", run_dir, "--no-progress")
    assert_refused(out, override.split("=")[0])
    assert len(out.err) < 400  # a 5000-digit value is not echoed in full
    assert not run_dir.exists()


def test_unknown_option_is_one_line(capsys, tmp_path):
    assert_refused(run_cli(capsys, "filter", tmp_path / "x", "--verdicts", tmp_path / "v", "--bogus"), "--bogus")


# ------------------------------------------------------------------ strict JSON output
def test_diagnose_pipeline_huge_values_never_traceback(capsys, tmp_path):
    rows = [trace_row(0.0), {**trace_row(1.0), "init_queue": 1e308}, {**trace_row(2.0), "init_queue": 1e308}]
    path = write_jsonl(tmp_path / "trace.jsonl", rows + [trace_row(float(t)) for t in range(3, 12)])
    out = run_cli(capsys, "diagnose", "pipeline", path, "--json")
    if out.code == 0:
        assert isinstance(_strict(out.out), dict)
    else:
        assert_refused(out, "too large")


def test_diagnose_pipeline_json_never_prints_infinity(capsys, tmp_path):
    path = write_jsonl(tmp_path / "trace.jsonl", [trace_row(float(t)) for t in range(12)])
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"t": 12, "init_queue": Infinity, "run_queue": 1, "eval_queue": 0}\n')
    out = run_cli(capsys, "diagnose", "pipeline", path, "--json")
    assert out.code == 0, out.err
    assert "Infinity" not in out.out and "NaN" not in out.out
    assert isinstance(_strict(out.out), dict)


def test_diagnose_training_json_is_strict(capsys, tmp_path):
    rows = [metrics_row(s) for s in range(1, 12)]
    rows[5]["train/is_ratio_max"] = float("inf")
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")  # json.dumps writes Infinity
    out = run_cli(capsys, "diagnose", "training", path, "--json")
    assert out.code == 0, out.err
    assert isinstance(_strict(out.out), dict)


# ------------------------------------------------------------------ answers the model wrote (issue 11, item 3)
@pytest.mark.parametrize("answer", ["1e5000", "1e10000000"])
def test_audit_and_report_survive_huge_numeric_answers(capsys, tmp_path, answer):
    """Fails until tirl.answers caps numeric parsing (H4's part); the CLI must then exit 0."""
    traj = {**TRAJ, "answer": answer}
    traj["messages"] = [*TRAJ["messages"][:-1], {"role": "assistant", "content": f"\\boxed{{{answer}}}"}]
    void = {**traj, "id": "v", "messages": [{"role": "assistant", "content": f"so \\boxed{{{answer}}}"}] * 2}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_jsonl(run_dir / "trajectories.jsonl", [traj, void])
    audit = run_cli(capsys, "audit", run_dir, "--json")
    assert audit.code == 0, audit.err
    assert _strict(audit.out)
    report = run_cli(capsys, "report", run_dir)
    assert report.code == 0, report.err
    assert (run_dir / "report.html").is_file()


def test_subprocess_contract_for_a_bad_file(tmp_path):
    """The same contract through a real process (the console entry point's path)."""
    import subprocess
    import sys

    path = tmp_path / "in.jsonl"
    path.write_bytes(NOT_UTF8)
    proc = subprocess.run(
        [sys.executable, "-m", "tirl.cli", "audit", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "content", [b'{"a": \xff}', b"[1]", DEEP.encode(), b'{"trainer": {"steps": ' + LONG_INT.encode() + b"}}"]
)
def test_train_resume_with_a_damaged_config_json(capsys, tmp_path, content):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_bytes(content)
    assert_refused(run_cli(capsys, "train", "--resume", run, "--no-progress"), "config")


@pytest.mark.parametrize("content", [DEEP.encode(), b'{"steps": ' + LONG_INT.encode() + b"}", NOT_UTF8])
def test_report_and_bundle_with_a_damaged_summary_or_config(capsys, tmp_path, content):
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", [metrics_row(s) for s in range(1, 6)])
    (run / "summary.json").write_bytes(content)
    (run / "config.json").write_bytes(content)
    out = run_cli(capsys, "report", run)
    assert out.code == 0 and "Traceback" not in out.err, out.err
    out = run_cli(capsys, "diagnose", "training", run, "--bundle", tmp_path / "b.md")
    assert out.code == 0 and (tmp_path / "b.md").is_file(), out.err


def test_serve_taken_port_or_bad_host_fails_before_the_model_loads(capsys):
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = str(taken.getsockname()[1])
        out = run_cli(capsys, "serve", "--port", port, "--model", "/nonexistent-model-dir")
        assert_refused(out, "cannot bind", port)  # the bind is refused first, not the missing model
    finally:
        taken.close()
    assert_refused(run_cli(capsys, "serve", "--host", "bad\x00host", "--model", "/nonexistent-model-dir"), "--host")


@pytest.mark.parametrize("url", ["http://[::1", "http://h:99999/v1", "ftp://x", "notaurl"])
def test_review_bad_base_url(capsys, tmp_path, monkeypatch, url):
    monkeypatch.setenv("TIRL_TEST_KEY", "k")
    bundle = tmp_path / "b.md"
    bundle.write_text("# b\n", encoding="utf-8")
    out = run_cli(capsys, "review", bundle, "--base-url", url, "--model", "m", "--env-key", "TIRL_TEST_KEY")
    assert_refused(out, "--base-url")


@pytest.mark.parametrize(
    ("line", "advice"),
    [
        ("[filter]\nmin_valid_per_group = 99999999999999999999", "the integer overflows 64 bits"),
        ("[trainer]\nsteps = 1e300", "trainer.steps=1e+300 is invalid: use an integer"),  # a float: not an integer
    ],
)
def test_toml_integer_beyond_64_bits_is_refused(capsys, tmp_path, line, advice):
    cfg = tmp_path / "c.toml"
    cfg.write_text(line + "\n", encoding="utf-8")
    traj = write_jsonl(tmp_path / "t.jsonl", [TRAJ])
    assert_refused(run_cli(capsys, "filter", traj, "--verdicts", tmp_path / "v", "--config", cfg), advice)


@pytest.mark.parametrize(
    ("flags", "advice"),
    [
        (["--log-level", "banana"], "invalid choice: 'banana'"),  # was a KeyError after "listening on"
        (["--batch-window-ms", "-5"], "--batch-window-ms -5.0 is invalid"),  # was accepted
        (["--arrival-gap-ms", "1e9"], "use milliseconds from 0 to 60000"),
        (["--max-arrival-wait-ms", "-1"], "--max-arrival-wait-ms -1.0 is invalid"),
    ],
)
def test_serve_flags_are_checked_before_the_port_is_bound(capsys, flags, advice):
    out = run_cli(capsys, "serve", "--model", "src/tirl/assets/tiny-tir", "--port", "0", *flags)
    assert_refused(out, advice)


@pytest.mark.parametrize(
    ("flags", "advice"),
    [(["--n", "99999999999"], "use a value in 1..1_000_000"), (["--seed", "-1"], "use a value in 0..4_294_967_295")],
)
def test_tasks_export_bounds_n_and_seed_as_eval_does(capsys, tmp_path, flags, advice):
    """``--n 99999999999`` ran without end; ``--seed -1`` was accepted where ``tirl eval --seed -1`` is not."""
    out = run_cli(capsys, "tasks", "export", "--out", str(tmp_path / "t"), *flags)
    assert_refused(out, flags[0], advice)
    assert not (tmp_path / "t").exists()


def test_sandbox_exec_memory_flag_has_the_config_bound(capsys, tmp_path):
    """The parser took 1..1048576, then the config refused 1 naming sandbox.memory_mb; now one line naming the flag."""
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    out = run_cli(capsys, "sandbox", "exec", "--memory-mb", "1", program)
    assert_refused(out, "--memory-mb 1 is invalid: use a value in 64..")


@pytest.mark.parametrize(
    ("name", "data", "needle"),
    [
        ("latin1.py", "print('caf\u00e9')\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9 at offset 10)"),
        ("cookie.py", "# -*- coding: latin-1 -*-\nprint('caf\u00e9')\n".encode("latin-1"), "declares the encoding"),
        ("bad.py", b"# -*- coding: no-such-codec -*-\nprint(1)\n", "encoding declaration Python refuses"),
        ("nul.py", b"print(1)\x00\n", "contains a NUL byte at offset 8"),
        ("latin1.sh", "echo caf\u00e9\n".encode("latin-1"), "is not UTF-8 text"),
    ],
)
def test_sandbox_exec_refuses_a_program_that_is_not_utf8_text(capsys, tmp_path, name, data, needle):
    """Before: the bytes were decoded with errors='replace' and ran with U+FFFD (exit 0), a NUL failed inside."""
    program = tmp_path / name
    program.write_bytes(data)
    assert_refused(run_cli(capsys, "sandbox", "exec", "--backend", "process", program), str(program), needle)


def test_sandbox_exec_runs_a_utf8_file_with_a_bom_as_python_does(capsys, tmp_path):
    """Python drops a UTF-8 BOM (and accepts a utf-8 coding line); before, the BOM reached the sandbox: SyntaxError."""
    program = tmp_path / "bom.py"
    program.write_bytes(b"\xef\xbb\xbf# coding: utf-8\nprint('caf\xc3\xa9')\n")
    out = run_cli(capsys, "sandbox", "exec", "--backend", "process", program)
    assert out.code == 0, out
    assert out.out.splitlines()[0] == "caf\u00e9"
    assert "--- exit 0" in out.out


def test_an_empty_model_path_is_refused(capsys, tmp_path):
    """``--set model.path=`` was accepted and `tirl eval` then loaded the current directory as the model."""
    assert_refused(run_cli(capsys, "config", "show", "--set", "model.path="), "model.path", "name a model directory")
    assert_refused(run_cli(capsys, "eval", "--set", "model.path=  "), "model.path")


def test_tasks_export_refuses_env_name_in_set(capsys, tmp_path):
    """``--set env.name=tir-chain`` was overridden by --env without a word: swe-lite tasks were written, exit 0."""
    out = run_cli(capsys, "tasks", "export", "--out", str(tmp_path / "t"), "--set", "env.name=tir-chain")
    assert_refused(out, "--set env.name", "use --env NAME")
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("key", ["algo.lr=1e-3", "env.max_turns=3", "generation.temperature=0.5", "env.seed=4"])
def test_tasks_export_refuses_a_set_it_does_not_read(capsys, tmp_path, key):
    """It reads env.difficulty and env.tasks_file only: any other --set was accepted and the export ignored it
    (``--set env.seed=4`` wrote the seed-0 tasks: the draw's seed is --seed)."""
    out = run_cli(capsys, "tasks", "export", "--out", str(tmp_path / "t"), "--set", key)
    assert_refused(out, f"--set {key.split('=')[0]}: tirl tasks export reads only env.difficulty and env.tasks_file")
    assert not (tmp_path / "t").exists()
    ok = run_cli(capsys, "tasks", "export", "--env", "swe-lite", "--n", "1", "--set", "env.difficulty=2",
                 "--out", str(tmp_path / "t"))  # fmt: skip
    assert ok.code == 0, ok.err


def test_an_empty_output_directory_is_refused(capsys, tmp_path):
    """``--out ''`` was read as the current directory ("exists and is not an empty directory")."""
    assert_refused(run_cli(capsys, "tasks", "export", "--out", ""), "the output directory is empty")


@pytest.mark.parametrize(
    ("flag", "value", "advice"),
    [("--max-output-chars", "10", "use a value in 64.."), ("--timeout", "100000", "use a value in (0, 86_400]")],
)
def test_sandbox_exec_flags_have_their_config_bounds(capsys, tmp_path, flag, value, advice):
    """--max-output-chars 10 passed the parser (1..1048576), then the config refused it naming its key."""
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    assert_refused(run_cli(capsys, "sandbox", "exec", flag, value, program), f"{flag} ", advice)


@pytest.mark.parametrize("argv", [["filter", "/dev/zero", "--verdicts", "{tmp}/v.jsonl"], ["audit", "/dev/zero"]])
def test_a_device_as_input_is_refused_before_it_is_read(capsys, tmp_path, argv):
    """/dev/zero has no line end: read line by line it took the machine's memory (MemoryError under a cap)."""
    out = run_cli(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert_refused(out, "/dev/zero: is a device, not a file")
    assert not (tmp_path / "v.jsonl").exists()


def test_diagnose_training_names_a_device_for_what_it_is(capsys):
    """``/dev/zero`` (and a pipe such as ``<(cat log)``) was reported as "file not found"."""
    assert_refused(run_cli(capsys, "diagnose", "training", "/dev/zero"), "is a device, not a file", "save the log")


@pytest.mark.parametrize("kind", ["fifo", "deep", "not-utf8"])
def test_audit_of_a_run_whose_config_is_not_a_readable_json_file(capsys, tmp_path, kind):
    """A FIFO config.json was skipped without a word (the audit ran under the default rule); a deep one was
    refused by a catch-all line that did not name the file. Either is now one line naming the run's config."""
    import os

    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "trajectories.jsonl", [TRAJ])
    if kind == "fifo":
        os.mkfifo(run / "config.json")
    else:
        (run / "config.json").write_bytes(DEEP.encode() if kind == "deep" else NOT_UTF8)
    assert_refused(run_cli(capsys, "audit", run), str(run / "config.json"))


def test_eval_seed_out_of_range_names_the_flag_typed(capsys):
    """``tirl eval --seed -1`` said "config env.seed=-1 is invalid", a key the user never typed (session 45)."""
    assert_refused(run_cli(capsys, "eval", "--seed", "-1"), "--seed -1 is invalid", "0..4_294_967_295")
