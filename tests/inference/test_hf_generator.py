"""HFGenerator: batched sampling against one-by-one reference computations."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch
from tests.tiny_run import saved_two_layer_policy

from tirl.inference.base import Generator, SamplingParams
from tirl.inference.hf import HFGenerator, sample_tokens
from tirl.models.loading import Policy
from tirl.types import Message, Role


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Policy:
    """A tiny random Llama saved with save_pretrained and loaded the way a user's checkpoint is."""
    return saved_two_layer_policy(tmp_path_factory.mktemp("tiny"), seed=1)


def _prompts(policy: Policy) -> list[list[int]]:
    texts = ["Compute 1+2.", "What is 12345 mod 97? Use python.", "Hi", "Sum the integers from 13 to 58."]
    return [policy.chat.prompt_ids([Message(role=Role.USER, content=t)]) for t in texts]


def _reference_logp(policy: Policy, prompt: list[int], out: list[int], temperature: float, top_p: float) -> list[float]:
    """Log-prob of each sampled token, one unpadded forward pass and a plain loop over the vocabulary."""
    ids = torch.tensor([prompt + out])
    with torch.no_grad():
        logits = policy.model(ids).logits[0].double()  # [T, V]
    result = []
    for k, tok in enumerate(out):
        row = torch.softmax(logits[len(prompt) - 1 + k] / temperature, dim=-1).tolist()
        order = sorted(range(len(row)), key=lambda i: -row[i])
        kept, mass = [], 0.0
        for i in order:
            if mass >= top_p:
                break
            kept.append(i)
            mass += row[i]
        assert tok in kept, "a token outside the top-p set was sampled"
        total = sum(row[i] for i in kept)
        result.append(math.log(row[tok] / (total if top_p < 1 else 1.0)))
    return result


def test_sample_tokens_matches_a_reference_loop() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 11, generator=g) * 2  # [B, V]
    temps = torch.tensor([1.0, 0.5, 2.0, 1.0, 0.0, 0.8])
    top_ps = torch.tensor([1.0, 0.9, 0.5, 0.3, 1.0, 0.95])
    u = torch.rand(6, generator=g)
    tokens, lps = sample_tokens(logits, temps, top_ps, u)
    for b in range(6):
        if temps[b] == 0:
            assert int(tokens[b]) == int(logits[b].argmax()) and float(lps[b]) == 0.0
            continue
        p = torch.softmax(logits[b].double() / temps[b].double(), dim=-1).tolist()
        order = sorted(range(11), key=lambda i: -p[i])
        kept, mass = [], 0.0
        for i in order:
            if mass >= float(top_ps[b]):
                break
            kept.append(i)
            mass += p[i]
        z = sum(p[i] for i in kept)
        acc, choice = 0.0, kept[-1]
        for i in kept:  # inverse CDF over the kept tokens, best first
            acc += p[i] / z
            if acc >= float(u[b]):
                choice = i
                break
        assert int(tokens[b]) == choice
        want = math.log(p[choice] / z) if top_ps[b] < 1 else math.log(p[choice])
        assert float(lps[b]) == pytest.approx(want, abs=1e-5)


def test_sample_tokens_frequencies_follow_the_distribution() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).repeat(20000, 1)  # [B, V]
    u = torch.rand(20000, generator=torch.Generator().manual_seed(1))
    tokens, _ = sample_tokens(logits, torch.ones(20000), torch.full((20000,), 0.9), u)
    p = torch.softmax(logits[0], -1)
    kept = p[:3] / p[:3].sum()  # top-p 0.9 keeps three tokens (0.64 + 0.24 < 0.9)
    freq = torch.bincount(tokens, minlength=4).double() / 20000
    assert freq[3] == 0
    torch.testing.assert_close(freq[:3], kept.double(), atol=0.02, rtol=0)


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.9)])
async def test_batched_logprobs_equal_one_by_one_forward(policy: Policy, temperature: float, top_p: float) -> None:
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids, seed=0)
    assert isinstance(gen, Generator)
    prompts = _prompts(policy)
    params = SamplingParams(max_new_tokens=24, temperature=temperature, top_p=top_p)
    results = await asyncio.gather(*(gen.generate(p, params) for p in prompts))
    assert gen.batches == 1  # the concurrent calls were gathered into one left-padded batch
    for prompt, res in zip(prompts, results, strict=True):
        assert len(res.token_ids) == len(res.logprobs) > 0
        ref = _reference_logp(policy, prompt, res.token_ids, temperature, top_p)
        assert res.logprobs == pytest.approx(ref, abs=2e-4)
    await gen.close()


async def test_same_seed_same_sample_alone_or_in_a_batch(policy: Policy) -> None:
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids)
    prompts = _prompts(policy)
    params = SamplingParams(max_new_tokens=16, seed=123)
    alone = await gen.generate(prompts[1], params)
    batched = await asyncio.gather(*(gen.generate(p, params) for p in prompts))
    assert batched[1].token_ids == alone.token_ids
    await gen.close()


async def test_finish_reasons_eos_stop_and_length(policy: Policy) -> None:
    prompt = _prompts(policy)[0]
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[10_000])
    base = await gen.generate(prompt, greedy)
    assert base.finish_reason == "length" and len(base.token_ids) == 12
    assert base.logprobs == [0.0] * 12

    third = base.token_ids[2]
    first_at = base.token_ids.index(third)
    eos_gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[third])
    res = await eos_gen.generate(prompt, greedy)
    assert res.finish_reason == "eos" and res.token_ids == base.token_ids[: first_at + 1]

    text = policy.tokenizer.decode(base.token_ids[3:6])
    res = await gen.generate(prompt, SamplingParams(max_new_tokens=12, temperature=0.0, stop=(text,)))
    assert res.finish_reason == "stop"
    assert text in res.text and text not in policy.tokenizer.decode(res.token_ids[:-1])
    await gen.close()
    await eos_gen.close()


async def test_busy_time_version_and_close(policy: Policy) -> None:
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids)
    assert gen.busy_s == 0.0 and not gen.is_busy
    gen.policy_version = 7
    res = await gen.generate(_prompts(policy)[0], SamplingParams(max_new_tokens=4))
    assert res.policy_version == 7
    assert gen.busy_s > 0 and gen.tokens_generated == len(res.token_ids)
    await gen.close()
    with pytest.raises(RuntimeError, match="close"):
        await gen.generate([1, 2], SamplingParams())


async def test_thread_count_is_set_for_the_batch_and_restored(policy: Policy) -> None:
    before = torch.get_num_threads()
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids, threads=1)
    seen: list[int] = []
    original = gen._sample_loop

    def spy(prompts, params, requests):  # type: ignore[no-untyped-def]
        seen.append(torch.get_num_threads())
        return original(prompts, params, requests)

    gen._sample_loop = spy  # type: ignore[method-assign]
    await gen.generate(_prompts(policy)[0], SamplingParams(max_new_tokens=2))
    assert seen == [1] and torch.get_num_threads() == before
    assert HFGenerator(policy.model, policy.tokenizer, eos_ids=[0]).threads == 1  # "auto" on a tiny model
    await gen.close()


async def test_prompt_at_the_context_limit_returns_length(policy: Policy) -> None:
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids, max_context=8)
    res = await gen.generate(list(range(3, 11)), SamplingParams(max_new_tokens=4))
    assert res.finish_reason == "length" and res.token_ids == []
    res = await gen.generate([3, 4, 5, 6, 7, 8], SamplingParams(max_new_tokens=4, temperature=0.0))
    assert len(res.token_ids) <= 2
    await gen.close()


def test_preallocated_cache_layer_holds_what_the_concatenating_layer_holds() -> None:
    from transformers.cache_utils import DynamicLayer

    from tirl.inference.kv_cache import PreallocLayer as _PreallocLayer

    g = torch.Generator().manual_seed(0)
    ref, mine = DynamicLayer(), _PreallocLayer(capacity=7)  # capacity 7: the last steps outgrow it
    for step, n in enumerate([5, 1, 1, 1, 2, 1]):  # prefill, then single tokens (one chunk of 2)
        k, v = torch.randn(4 if step < 3 else 3, 2, n, 8, generator=g), torch.randn(4 if step < 3 else 3, 2, n, 8)
        if step == 3:  # a row finished: both keep rows 0, 2, 3
            keep = torch.tensor([0, 2, 3])
            ref.batch_select_indices(keep)
            mine.batch_select_indices(keep)
        rk, rv = ref.update(k, v)
        mk, mv = mine.update(k, v)
        assert torch.equal(rk, mk) and torch.equal(rv, mv)
        assert ref.get_seq_length() == mine.get_seq_length() and ref.get_mask_sizes(1) == mine.get_mask_sizes(1)


@pytest.mark.parametrize("chunk", [256, 3])  # 3: the cache outgrows its first allocation several times
async def test_greedy_batch_equals_a_plain_loop_without_cache(
    policy: Policy, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tirl.inference.hf.CACHE_CHUNK", chunk)
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[10_000])
    prompts = _prompts(policy)  # different lengths: left padding, and rows of one batch
    results = await asyncio.gather(*(gen.generate(p, SamplingParams(max_new_tokens=10 + 3 * i, temperature=0.0))
                                     for i, p in enumerate(prompts)))  # fmt: skip
    for i, (prompt, res) in enumerate(zip(prompts, results, strict=True)):
        ids = list(prompt)
        for _ in range(10 + 3 * i):  # the whole sequence again each token, no padding, no cache
            with torch.no_grad():
                ids.append(int(policy.model(torch.tensor([ids])).logits[0, -1].argmax()))
        assert res.token_ids == ids[len(prompt) :]
    await gen.close()


async def test_auto_threads_prefill_on_the_process_count_decode_on_one(policy: Policy) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[10_000])  # threads="auto", a tiny model
    seen: list[tuple[int, int]] = []  # (query length, threads) per forward pass
    real = policy.model.forward

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((kwargs["input_ids"].shape[1], torch.get_num_threads()))
        return real(*args, **kwargs)

    policy.model.forward = spy  # type: ignore[method-assign]
    try:
        await gen.generate(_prompts(policy)[1], SamplingParams(max_new_tokens=4, temperature=0.0))
    finally:
        del policy.model.forward
        await gen.close()
    assert seen[0][0] > 1 and seen[0][1] == 2  # the prompt's forward pass
    assert [t for q, t in seen[1:]] == [1, 1, 1] and all(q == 1 for q, _ in seen[1:])
    assert torch.get_num_threads() == 2
    torch.set_num_threads(before)


async def test_seeded_sampling_equals_a_plain_loop_drawing_one_uniform_per_token(policy: Policy) -> None:
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[10_000])
    prompts = _prompts(policy)
    params = [SamplingParams(max_new_tokens=12, temperature=0.8, top_p=0.95, seed=40 + i) for i in range(4)]
    results = await asyncio.gather(*(gen.generate(p, sp) for p, sp in zip(prompts, params, strict=True)))
    for prompt, sp, res in zip(prompts, params, results, strict=True):
        rng = torch.Generator().manual_seed(sp.seed)
        ids = list(prompt)
        for _ in range(12):  # the whole sequence each token, then one draw from the row's generator
            with torch.no_grad():
                logits = policy.model(torch.tensor([ids])).logits[:, -1].float()  # [1, V]
            u = torch.rand(1, generator=rng)
            tok, _ = sample_tokens(logits, torch.tensor([0.8]), torch.tensor([0.95]), u)
            ids.append(int(tok[0]))
        assert res.token_ids == ids[len(prompt) :]
    await gen.close()


async def test_a_request_cancelled_mid_batch_leaves_the_batch_at_its_next_token(policy: Policy) -> None:
    """Red team, session 45: a cancelled request (a ``tirl serve`` client that hung up) sampled on to max_new."""
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[-1], batch_window_s=0.05)  # no EOS: only lengths end
    long = asyncio.ensure_future(gen.generate(_prompts(policy)[0], SamplingParams(max_new_tokens=600)))
    short = await gen.generate(_prompts(policy)[1], SamplingParams(max_new_tokens=8))  # the same batch
    assert len(short.token_ids) == 8 and gen.is_busy  # handed back at once; the long row goes on
    long.cancel()
    while gen.batches == 0:
        await asyncio.sleep(0.01)
    print(f"tokens generated: {gen.tokens_generated} (608 if the cancelled row had run to its max_new)")
    assert gen.batches == 1 and gen.tokens_generated < 300
    await gen.close()
