"""PrefixCache and the in-process generator's reuse of earlier turns' keys and values."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
import torch
from tests.tiny_run import saved_two_layer_policy

from tirl.inference.base import SamplingParams
from tirl.inference.hf import HFGenerator, sample_tokens
from tirl.inference.prefix_cache import CachedPrefix, PrefixCache, weights_fingerprint
from tirl.models.loading import Policy
from tirl.types import Message, Role


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Policy:
    return saved_two_layer_policy(tmp_path_factory.mktemp("tiny"), seed=3)


def _entry(ids: list[int], weights: tuple[tuple[int, int], ...] = ()) -> CachedPrefix:
    t = torch.zeros(1, len(ids), 2)  # [H, n, D]: 8 bytes per position and tensor
    return CachedPrefix(ids=ids, keys=[t], values=[t.clone()], weights=weights)


def _longest_proper_prefix(entries: list[list[int]], prompt: list[int]) -> list[int] | None:
    """Plain reference: the longest stored sequence that is a proper prefix of ``prompt``."""
    found = [e for e in entries if len(e) < len(prompt) and prompt[: len(e)] == e]
    return max(found, key=len) if found else None


def test_take_returns_the_longest_proper_prefix_against_a_plain_reference() -> None:
    rng = random.Random(0)
    for _ in range(300):
        cache = PrefixCache(max_bytes=1 << 30)
        entries = [[rng.randrange(3) for _ in range(rng.randrange(1, 7))] for _ in range(rng.randrange(0, 6))]
        for e in entries:
            cache.put(_entry(e))
        prompt = [rng.randrange(3) for _ in range(rng.randrange(1, 9))]
        expected = _longest_proper_prefix(entries, prompt)
        got = cache.take(prompt, ())
        assert (got.ids if got else None) == expected
        assert len(cache) == len(entries) - (expected is not None)  # a hit is taken out
    assert cache.hits + cache.misses == 1


def test_stale_weights_and_the_byte_budget_drop_entries() -> None:
    cache = PrefixCache(max_bytes=2 * 8 * 10)  # room for 10 positions (keys and values of 8 bytes each)
    cache.put(_entry([1, 2, 3], weights=((1, 0),)))
    cache.put(_entry([1, 2, 3, 4], weights=((1, 0),)))
    assert len(cache) == 2 and cache.nbytes == 2 * 8 * 7
    cache.put(_entry([5, 6, 7, 8], weights=((1, 0),)))  # 11 positions: the oldest goes
    assert [e.ids for e in cache._entries.values()] == [[1, 2, 3, 4], [5, 6, 7, 8]] and cache.evicted == 1
    assert cache.take([1, 2, 3, 4, 9], ((1, 1),)) is None  # the weights changed: every entry is stale
    assert len(cache) == 0 and cache.stale == 2 and cache.nbytes == 0
    cache.put(_entry(list(range(11))))  # bigger than the whole budget: not held
    assert len(cache) == 0
    off = PrefixCache(max_bytes=0)
    off.put(_entry([1]))
    assert len(off) == 0


def test_an_in_place_update_changes_the_fingerprint(policy: Policy) -> None:
    model = policy.model
    before = weights_fingerprint(model)
    assert weights_fingerprint(model) == before
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    loss = model(torch.tensor([[3, 4, 5]])).logits.sum()
    loss.backward()
    opt.step()  # lr 0: the values do not move, the version counters do
    opt.zero_grad()
    assert weights_fingerprint(model) != before


def _plain(policy: Policy, prompt: list[int], n: int, temperature: float, seed: int) -> tuple[list[int], list[float]]:
    """n tokens by a loop that runs the whole sequence each token (no cache, no padding)."""
    rng = torch.Generator().manual_seed(seed)
    ids, lps = list(prompt), []
    for _ in range(n):
        with torch.no_grad():
            logits = policy.model(torch.tensor([ids])).logits[:, -1].float()  # [1, V]
        u = torch.rand(1, generator=rng)
        tok, lp = sample_tokens(logits, torch.tensor([temperature]), torch.tensor([1.0]), u)
        ids.append(int(tok[0]))
        lps.append(float(lp[0]))
    return ids[len(prompt) :], lps


def _observation(policy: Policy, k: int) -> list[int]:
    return policy.chat.prompt_ids([Message(role=Role.USER, content="output " + "x" * (3 * k))])[2:]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
async def test_three_turn_episodes_with_reuse_equal_a_plain_loop(policy: Policy, temperature: float) -> None:
    """Turns 2 and 3 start from the cached keys and values; every token and log-prob is the plain loop's."""
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[10_000])
    texts = ["Compute 1+2.", "What is 12345 mod 97? Use python.", "Hi", "Sum the integers from 13 to 58."]
    contexts = [policy.chat.prompt_ids([Message(role=Role.USER, content=t)]) for t in texts]
    for turn in range(3):
        n = [6 + 2 * i + turn for i in range(4)]
        params = [SamplingParams(max_new_tokens=n[i], temperature=temperature, seed=100 * turn + i) for i in range(4)]
        if turn == 2:  # a new episode joins the batch: a miss beside three hits
            contexts.append(policy.chat.prompt_ids([Message(role=Role.USER, content="A new task, longer.")]))
            n.append(5)
            params.append(SamplingParams(max_new_tokens=5, temperature=temperature, seed=7))
        results = await asyncio.gather(*(gen.generate(c, p) for c, p in zip(contexts, params, strict=True)))
        for c, p, res, k in zip(contexts, params, results, n, strict=True):
            ids, lps = _plain(policy, c, k, temperature, p.seed or 0)
            assert res.token_ids == ids
            assert res.logprobs == pytest.approx(lps, abs=1e-4)
        contexts = [
            c + r.token_ids + _observation(policy, i + turn)
            for i, (c, r) in enumerate(zip(contexts, results, strict=True))
        ]
    assert gen.prefix_cache.hits == 4 + 4 and gen.prefix_cache.misses == 4 + 1
    await gen.close()


async def test_reuse_skips_the_cached_positions_and_an_update_invalidates_them(policy: Policy) -> None:
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[10_000])
    prompt = policy.chat.prompt_ids([Message(role=Role.USER, content="What is 12345 mod 97? Use python.")])
    first = await gen.generate(prompt, SamplingParams(max_new_tokens=8, temperature=0.0))
    assert gen.prefill_tokens == len(prompt)
    second_prompt = prompt + first.token_ids + _observation(policy, 2)
    await gen.generate(second_prompt, SamplingParams(max_new_tokens=4, temperature=0.0))
    reused = len(prompt) + len(first.token_ids) - 1  # the last sampled token was never fed to the model
    assert gen.reused_tokens == reused
    assert gen.prefill_tokens == len(prompt) + len(second_prompt) - reused
    # the weights change in place: the next turn must not reuse keys computed with the old ones
    with torch.no_grad():
        for p in policy.model.parameters():
            p.mul_(1.01)
    try:
        again = await gen.generate(second_prompt, SamplingParams(max_new_tokens=4, temperature=0.0))
        # an entry for second_prompt's prefix was stored by the previous call; it is stale now
        assert gen.prefix_cache.stale >= 1 and gen.prefix_cache.hits == 1
        assert again.token_ids == _plain(policy, second_prompt, 4, 0.0, 0)[0]
    finally:
        with torch.no_grad():
            for p in policy.model.parameters():
                p.div_(1.01)
        await gen.close()


async def test_prefix_cache_off_prefills_everything(policy: Policy) -> None:
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[10_000], prefix_cache_mb=0)
    prompt = policy.chat.prompt_ids([Message(role=Role.USER, content="Hi")])
    first = await gen.generate(prompt, SamplingParams(max_new_tokens=5, temperature=0.0))
    second = prompt + first.token_ids + _observation(policy, 1)
    await gen.generate(second, SamplingParams(max_new_tokens=5, temperature=0.0))
    assert gen.prefill_tokens == len(prompt) + len(second) and len(gen.prefix_cache) == 0
    await gen.close()


async def test_the_config_keys_reach_the_trainers_generator(policy: Policy) -> None:
    from tirl.config import ConfigError, load_config
    from tirl.trainer.wiring import _generator

    gen = _generator(load_config(None, ["generation.prefix_cache_mb=0.5"]), policy)
    assert isinstance(gen, HFGenerator) and gen.prefix_cache.max_bytes == 512 * 1024 and not gen.continuous
    await gen.close()
    gen = _generator(load_config(None, ["generation.continuous_batching=true"]), policy)
    assert isinstance(gen, HFGenerator) and gen.continuous and gen.prefix_cache.max_bytes == 1024 * 2**20
    await gen.close()
    with pytest.raises(ConfigError, match=r"generation\.prefix_cache_mb"):
        load_config(None, ["generation.prefix_cache_mb=-1"])


async def _when_busy(gen: HFGenerator) -> None:
    while not gen.is_busy:
        await asyncio.sleep(0.001)


async def test_requests_admitted_into_a_running_batch_equal_a_plain_loop(policy: Policy) -> None:
    """Continuous batching: rows that join a running batch (prefilled, merged in) sample the plain loop's tokens."""
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[10_000], continuous=True)
    texts = ["Compute 1+2.", "What is 12345 mod 97? Use python.", "Hi", "Sum the integers from 13 to 58."]
    prompts = [policy.chat.prompt_ids([Message(role=Role.USER, content=t)]) for t in texts]
    long = asyncio.ensure_future(gen.generate(prompts[0], SamplingParams(max_new_tokens=150, temperature=0.9, seed=1)))
    await _when_busy(gen)
    late = [SamplingParams(max_new_tokens=5 + 4 * i, temperature=0.9 if i else 0.0, seed=10 + i) for i in range(3)]
    results = await asyncio.gather(*(gen.generate(p, sp) for p, sp in zip(prompts[1:], late, strict=True)))
    assert gen.admitted == 3 and gen.batches == 0 and gen.is_busy  # they joined it, and came back before it ended
    first = await long
    assert gen.batches == 1
    params = [SamplingParams(150, 0.9, seed=1), *late]
    for prompt, sp, res in zip(prompts, params, [first, *results], strict=True):
        ids, lps = _plain(policy, prompt, sp.max_new_tokens, sp.temperature, sp.seed or 0)
        assert res.token_ids == ids
        assert res.logprobs == pytest.approx(lps, abs=1e-4)
    await gen.close()


async def _busy_with_one_long_row(
    policy: Policy, continuous: bool, n: int
) -> tuple[HFGenerator, list[int], asyncio.Future[Any]]:
    """A generator running a batch of one greedy row of ``n`` tokens (EOS off), and that row's prompt."""
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[10_000], continuous=continuous)
    prompt = policy.chat.prompt_ids([Message(role=Role.USER, content="Hi")])
    long = asyncio.ensure_future(gen.generate(prompt, SamplingParams(max_new_tokens=n, temperature=0.0)))
    await _when_busy(gen)
    return gen, prompt, long


async def test_a_waiting_weight_update_stops_admissions(policy: Policy) -> None:
    gen, prompt, long = await _busy_with_one_long_row(policy, continuous=True, n=150)
    order: list[str] = []

    def update() -> None:  # what sync_snapshot does: wait for the lock, change the weights under it
        with gen.model_lock:
            order.append("update")

    waiter = asyncio.get_running_loop().run_in_executor(None, update)
    while not gen.model_lock.waiting:
        await asyncio.sleep(0.001)
    late = await gen.generate(prompt, SamplingParams(max_new_tokens=3, temperature=0.0))
    order.append("late")
    await asyncio.gather(long, waiter)
    assert gen.admitted == 0 and gen.batches == 2 and order == ["update", "late"]
    assert late.token_ids == _plain(policy, prompt, 3, 0.0, 0)[0]
    await gen.close()


async def test_continuous_off_runs_late_requests_in_the_next_batch(policy: Policy) -> None:
    gen, prompt, long = await _busy_with_one_long_row(policy, continuous=False, n=60)
    await gen.generate(prompt, SamplingParams(max_new_tokens=3, temperature=0.0))
    assert long.done() and gen.admitted == 0 and gen.batches == 2
    await gen.close()
