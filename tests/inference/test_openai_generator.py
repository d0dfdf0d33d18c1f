"""OpenAIGenerator against a real ``tirl serve`` subprocess: ids, log-probs, set-up errors, weight sync, training."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest
import torch
from server_proc import serve, tiny_checkpoint

from tirl.errors import SetupError
from tirl.inference.base import SamplingParams
from tirl.inference.hf import HFGenerator
from tirl.inference.openai_http import OpenAIGenerator, parse_token_ids
from tirl.models.loading import load_policy

KEY = "gen-key"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    model_dir = tiny_checkpoint(root / "tiny")
    with serve(model_dir, "--api-key", KEY, "--batch-window-ms", "20") as (url, name, _proc):
        yield url, name, model_dir


def gen(served, **kw) -> OpenAIGenerator:
    policy_eos = kw.pop("eos_ids", ())
    return OpenAIGenerator(served[0], api_key=kw.pop("api_key", KEY), eos_ids=policy_eos, **kw)


def test_ids_and_logprobs_match_in_process_sampling(served):
    """Greedy decoding through HTTP gives the same ids as the in-process sampler on the same weights."""
    policy = load_policy(served[2])
    local = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids)
    prompt = [*policy.tokenizer.encode("<|user|>7*8<|end|><|assistant|>", add_special_tokens=False)]
    params = SamplingParams(max_new_tokens=20, temperature=0.0)

    async def main():
        g = gen(served, eos_ids=policy.chat.eos_ids)
        try:
            remote = await g.generate(prompt, params)
            sampled = await g.generate(prompt, SamplingParams(max_new_tokens=12, temperature=1.0, seed=5))
        finally:
            await g.close()
        here = await local.generate(prompt, params)
        await local.close()
        return remote, sampled, here

    remote, sampled, here = asyncio.run(main())
    assert remote.token_ids == here.token_ids
    assert remote.finish_reason == here.finish_reason
    assert len(sampled.logprobs) == len(sampled.token_ids) > 0
    # the returned log-probs are the model's log-softmax of each sampled token (temperature 1, top-p 1)
    ids = torch.tensor([prompt + sampled.token_ids])
    with torch.no_grad():
        logits = policy.model(ids).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    ref = [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(sampled.token_ids)]
    assert sampled.logprobs == pytest.approx(ref, abs=1e-4)


def test_concurrency_limit_and_many_requests(served):
    async def main():
        g = gen(served, max_concurrency=3)
        try:
            out = await asyncio.gather(
                *(g.generate([10 + i, 11], SamplingParams(max_new_tokens=5, seed=i)) for i in range(12))
            )
        finally:
            await g.close()
        return out, g.stats

    results, stats = asyncio.run(main())
    assert len(results) == 12 and all(1 <= len(r.token_ids) <= 5 for r in results)
    assert stats["requests"] == 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("suffix", "kw", "match"),
    [
        ("/v1", {"api_key": ""}, "needs an API key"),
        ("/v1", {"api_key": "nope"}, "rejected the API key"),
        ("/v1/v1", {}, "repeats /v1"),
        ("", {}, "lacks the /v1 suffix"),
        ("/v1", {"model": "gpt-7"}, "does not serve model 'gpt-7'"),
    ],
)
def test_setup_errors(served, monkeypatch, suffix, kw, match):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    base = served[0].removesuffix("/v1") + suffix

    async def main():
        g = OpenAIGenerator(base, api_key=kw.get("api_key", KEY) or None, model=kw.get("model"))
        try:
            await g.generate([1, 2], SamplingParams(max_new_tokens=2))
        finally:
            await g.close()

    with pytest.raises(SetupError, match=match):
        asyncio.run(main())


def test_no_server_retries_with_backoff_then_setup_error():
    url = f"http://127.0.0.1:{_free_port()}/v1"

    async def main():
        g = OpenAIGenerator(url, retries=2, backoff_s=0.01, timeout_s=5)
        try:
            with pytest.raises(SetupError, match="no OpenAI-compatible server answers"):
                await g.start()
        finally:
            await g.close()
        return g.stats

    assert asyncio.run(main())["retries"] == 2


def test_parse_token_ids_fallback():
    choice = {"token_ids": None, "logprobs": {"tokens": ["token_id:5", "token_id:17"]}}
    assert parse_token_ids(choice) == [5, 17]
    assert parse_token_ids({"token_ids": [3, 4], "logprobs": None}) == [3, 4]
    with pytest.raises(RuntimeError, match="token_id:N"):
        parse_token_ids({"logprobs": {"tokens": ["a"]}})
    with pytest.raises(RuntimeError, match="neither"):
        parse_token_ids({"text": "x"})


def test_weight_sync_reaches_the_server(served, tmp_path):
    policy = load_policy(served[2])

    async def main():
        g = gen(served, eos_ids=policy.chat.eos_ids)
        try:
            await g.start()
            v0 = g.policy_version
            with torch.no_grad():
                for p in policy.model.parameters():
                    p.mul_(0.5)
            g.sync_dir = tmp_path / "w"
            g.sync_weights(policy.model, policy.tokenizer, v0 + 3)
            res = await g.generate([10, 11], SamplingParams(max_new_tokens=4, temperature=0.0))
            return v0, res
        finally:
            await g.close()

    v0, res = asyncio.run(main())
    assert res.policy_version == v0 + 3  # reported by the server, not only set locally
    assert (tmp_path / "w" / f"v{v0 + 3}" / "config.json").is_file()


@pytest.mark.slow
def test_tirl_train_with_openai_generator(tmp_path):
    """`tirl train --generator openai` against a real `tirl serve`, weights synced after each update."""
    from tirl.cli import main
    from tirl.models.loading import builtin_model_path

    model_dir = builtin_model_path()  # warm-started: rewards differ inside groups, so updates happen
    run_dir = tmp_path / "run"
    with serve(model_dir, "--batch-window-ms", "10") as (url, _name, _proc):
        overrides = [
            "trainer.steps=2", "trainer.prompts_per_step=4", "algo.group_size=4", "trainer.eval_before_after=false",
            "sandbox.backend=process", "filter.max_resample_rounds=0", "filter.min_valid_per_group=1",
            "rollout.run_workers=8", "trainer.checkpoint_every=2", "algo.minibatches=1",
            "env.name=tir-math", "env.max_turns=4",  # the task family tiny-tir was warm-started on
        ]  # fmt: skip
        args = ["train", "--model", str(model_dir), "--generator", "openai", "--base-url", url,
                "--run-dir", str(run_dir), "--no-progress"]  # fmt: skip
        for o in overrides:
            args += ["--set", o]
        assert main(args) == 0
        health = httpx.get(url.removesuffix("/v1") + "/health").json()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    updates = [r["policy/version"] for r in rows]  # the version each step sampled with
    assert all(r["rollout/trajectories"] >= 16 for r in rows)
    assert all(r["rollout/failed"] == 0 for r in rows)
    final = sum(1 for r in rows if r.get("train/optimizer_steps", 1) and not r.get("train/no_signal")
                and not r.get("train/skipped_step"))  # fmt: skip
    assert final >= 1, rows
    assert health["policy_version"] == final  # one weight sync per update, reported by the server
    assert updates[0] == 0
    assert (run_dir / "checkpoints").is_dir()


def test_tirl_train_reports_a_missing_server_in_one_line(tmp_path, capsys):
    from tirl.cli import main

    model_dir = tiny_checkpoint(tmp_path / "tiny")
    url = f"http://127.0.0.1:{_free_port()}/v1"
    code = main(["train", "--model", str(model_dir), "--generator", "openai", "--base-url", url,
                 "--run-dir", str(tmp_path / "run"), "--no-progress", "--set", "trainer.eval_before_after=false",
                 "--set", "sandbox.backend=process"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert f"error: no OpenAI-compatible server answers at {url}" in err
    assert "Traceback" not in err


def test_tirl_train_takes_the_key_variable_and_model_id_from_the_config(served, tmp_path, capsys, monkeypatch):
    """``model.api_key_env`` names the variable the key is read from; ``model.model_id`` the served model."""
    from tirl.cli import main

    url, name, model_dir = served
    args = ["train", "--model", str(model_dir), "--generator", "openai", "--base-url", url, "--no-progress",
            "--set", "trainer.eval_before_after=false", "--set", "sandbox.backend=process",
            "--set", "model.api_key_env=TIRL_TEST_KEY"]  # fmt: skip
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("TIRL_TEST_KEY", "wrong")
    assert main([*args, "--run-dir", str(tmp_path / "a")]) == 2
    assert "rejected the API key (401) — check $TIRL_TEST_KEY" in capsys.readouterr().err
    monkeypatch.setenv("TIRL_TEST_KEY", KEY)  # the right key, in the configured variable
    assert main([*args, "--run-dir", str(tmp_path / "b"), "--set", "model.model_id=not-served"]) == 2
    err = capsys.readouterr().err
    assert "does not serve model 'not-served'" in err and name in err and err.count("error:") == 1
