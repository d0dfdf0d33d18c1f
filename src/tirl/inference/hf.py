"""In-process transformers generation: concurrent ``generate`` calls batched into one sampling loop.

:class:`HFGenerator` implements :class:`~tirl.inference.base.Generator` for any
``AutoModelForCausalLM``. Requests from many episodes are queued; a drain task
takes whatever is queued (after a short batching window), left-pads the
prompts, and runs a manual sampling loop over ``past_key_values`` in a worker
thread, so the event loop (sandbox calls, env steps) keeps running while the
model computes. Rows that finish are removed from the KV cache, so a batch
costs what its live rows cost. The KV cache's buffers are allocated per batch
(prompt width plus up to :data:`CACHE_CHUNK` new tokens, doubled when a batch
outgrows them; :mod:`tirl.inference.kv_cache`).

**Continuous batching** (``continuous=True``; off by default: on the SWE job
it measured 0.96x of the rollout speed without it): once a batch is down to its
stragglers (:data:`ADMIT_AT_ROWS` rows, or a quarter of its peak), requests
queued since it started join it between two decode steps — prefilled on their
own, then merged into the batch's KV cache (both sides left-padded to the
longer) — and a row that finishes hands its result back at once, so an
episode's tool call runs while the batch goes on. A batch stops taking
requests while anyone waits for :attr:`model_lock` (a weight update), and its
last results come back with it. **Prefix reuse** (``prefix_cache_mb``,
:mod:`tirl.inference.prefix_cache`): a finished row's keys and values are
kept, and the same episode's next turn prefills only its new ids. Tokens and
log-probs are the same as a plain loop that runs the whole sequence every
token, with or without either (tested).

Sampling: temperature and top-p per request; the log-prob returned for each
token is its log-probability under the distribution it was *sampled from*
(after temperature and top-p renormalisation). With ``temperature=1`` and
``top_p=1`` that is the model's ``log_softmax``. ``temperature=0`` is greedy
decoding and its log-probs are 0.0 (a point mass).

The trainer updates the same torch module in-process and bumps
:attr:`HFGenerator.policy_version`; generation and training must not overlap
(hold :attr:`HFGenerator.model_lock` while updating to be sure).

A request cancelled while queued is skipped; one cancelled while its batch runs (an HTTP client of
``tirl serve`` that hung up) leaves the batch at its next token.

Not covered: per-request stop *token ids* (stop strings and the chat format's
EOS ids are supported), beam search, speculative decoding, admission by
memory (a batch takes up to ``max_batch`` rows, whatever their lengths).
"""

from __future__ import annotations

import inspect
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tirl.inference.base import (
    FinishReason,
    GenerationResult,
    Request,
    RequestBatcher,
    SamplingParams,
    WaitCountingLock,
)
from tirl.inference.kv_cache import PreallocCache, merged_layers, seeded_layers
from tirl.inference.prefix_cache import CachedPrefix, Fingerprint, PrefixCache, weights_fingerprint

SMALL_MODEL_PARAMS = 20_000_000  # below this, threads="auto" generates with one intra-op thread
#: new-token positions a batch's KV cache is first allocated for (then doubled as needed), so that a large
#: ``max_new_tokens`` does not reserve memory (on a GPU) for tokens that are never generated
CACHE_CHUNK = 256
#: continuous batching admits queued requests once the batch is down to this many rows or a quarter of its
#: peak: a merge copies every live row's keys and values, so admitting at every step (tried: 0.67x the
#: throughput of no admission on the SWE job) costs more than the stragglers it saves waiting for
ADMIT_AT_ROWS = 2


def sample_tokens(
    logits: torch.Tensor,  # [B, V] float32
    temperature: torch.Tensor,  # [B]; 0 means greedy
    top_p: torch.Tensor,  # [B] in (0, 1]
    uniform: torch.Tensor,  # [B] in [0, 1): the random draw of each row
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row by inverse-CDF; return (tokens [B] long, log-probs [B] float).

    The log-prob is under the sampling distribution: ``softmax(logits / T)``
    restricted to the smallest top set of tokens whose mass reaches ``top_p``
    (the top token is always kept), renormalised. Greedy rows get log-prob 0.
    """
    greedy = temperature <= 0  # [B]
    safe_t = torch.where(greedy, torch.ones_like(temperature), temperature)  # [B]
    logp = torch.log_softmax(logits / safe_t[:, None], dim=-1)  # [B, V]
    sorted_logp, order = torch.sort(logp, dim=-1, descending=True)  # [B, V] each
    sorted_p = sorted_logp.exp()  # [B, V]
    mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # [B, V]: mass of strictly better tokens
    keep = mass_before < top_p[:, None]  # [B, V]
    keep[:, 0] = True
    kept_p = sorted_p * keep  # [B, V]
    z = kept_p.sum(dim=-1)  # [B]
    cdf = torch.cumsum(kept_p, dim=-1)  # [B, V]
    k = (cdf < (uniform * z)[:, None]).sum(dim=-1)  # [B]: first index whose cdf reaches u*z
    k = torch.minimum(k, keep.sum(dim=-1) - 1)  # [B]: guard against rounding past the kept set
    tokens = order.gather(1, k[:, None]).squeeze(1)  # [B]
    lp = sorted_logp.gather(1, k[:, None]).squeeze(1)  # [B]
    renorm = torch.where(top_p >= 1.0, torch.zeros_like(z), torch.log(z))  # [B]; exact log_softmax at top_p=1
    lp = lp - renorm
    argmax = logits.argmax(dim=-1)  # [B]
    tokens = torch.where(greedy, argmax, tokens)
    lp = torch.where(greedy, torch.zeros_like(lp), lp)
    return tokens, lp


@dataclass(slots=True)
class _Batch:
    """A batch's prefill: its inputs, attention mask over every position it can reach, and its KV cache."""

    input_ids: torch.Tensor  # [b_live, N]: the ids each row prefills, left-padded
    attn: torch.Tensor  # [b_live, cap]
    pos: torch.Tensor  # [b_live, N]
    width: int  # positions after the prefill (the longest prompt)
    cache: PreallocCache


@dataclass(slots=True)
class _Row:
    """The state of one request inside a running batch."""

    prompt: list[int]
    max_new: int
    stop: tuple[str, ...]
    uniform: torch.Tensor  # [max_new]: the row's random draw for each of its tokens
    temperature: float
    top_p: float
    request: Request | None  # None: a synchronous generate_batch call
    out: list[int]
    logprobs: list[float]
    finish: FinishReason | None = None


@dataclass(slots=True)
class _Running:
    """A batch between two decode steps: the live rows' KV cache, mask, next positions and next-token logits."""

    rows: list[_Row]  # every row of the batch, admitted ones appended
    live: list[int]  # the row of each cache row
    cache: PreallocCache
    attn: torch.Tensor  # [b_live, cap]
    next_pos: torch.Tensor  # [b_live]
    logits: torch.Tensor  # [b_live, V] float32, on the CPU
    length: int  # positions in the cache
    weights: Fingerprint | None  # None: no prefix reuse


class HFGenerator:
    """Batched sampling from an in-process transformers causal LM.

    ``eos_ids`` end a turn (normally ``policy.chat.eos_ids``). ``max_batch``
    bounds the rows of one batch; ``batch_window_s`` is how long the drain task
    waits for concurrent callers before starting a batch. ``threads`` is the
    torch intra-op thread count while a batch runs (set process-wide for the
    batch and restored after it); ``"auto"`` uses 1 for models under 20M
    parameters and leaves the setting alone for bigger ones. Under ``"auto"``
    the prefill (one forward pass over every prompt of the batch, large
    enough to split) keeps the process's thread count: on the 2-core machine
    the bench's 64-prompt prefill took 34 ms on 2 threads against 54 ms on 1.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        eos_ids: Iterable[int],
        max_batch: int = 64,
        batch_window_s: float = 0.005,
        seed: int = 0,
        max_context: int | None = None,
        threads: int | Literal["auto"] | None = "auto",
        prefix_cache_mb: float = 1024.0,
        continuous: bool = False,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        if not self.eos_ids:
            raise ValueError("HFGenerator needs at least one EOS id")
        self.max_batch = max(1, max_batch)
        self.batch_window_s = max(0.0, batch_window_s)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos_ids))
        limit = getattr(model.config, "max_position_embeddings", None)
        self.max_context = int(max_context or limit or 1 << 30)
        n_params = sum(p.numel() for p in model.parameters())
        # "auto": a small model's ops are too small to split across cores; one intra-op thread avoids
        # the barrier stalls that made 2 threads ~10x slower than 1 on a busy 2-core machine.
        self.threads: int | None = (1 if n_params < SMALL_MODEL_PARAMS else None) if threads == "auto" else threads
        self.prefill_threads: int | None = None if threads == "auto" else self.threads  # None: the process's
        self.policy_version = 0
        self.model_lock = WaitCountingLock()  # a weight update waiting on it stops admissions
        self.continuous = continuous
        self.admitted = 0  # requests that joined a running batch
        self.busy_s = 0.0  # cumulative seconds the model spent in batches (for the trace's gpu_util)
        self.tokens_generated = 0
        self.batches = 0
        self.prefill_tokens = 0  # prompt ids run through the model (a prefix cache hit's positions are not)
        self.reused_tokens = 0  # prompt positions whose keys and values came from the prefix cache
        self.prefix_cache = PrefixCache(max_bytes=int(max(0.0, prefix_cache_mb) * 2**20))
        self._busy_since: float | None = None
        self._rng = random.Random(seed)
        self._batcher = RequestBatcher(
            self._run_requests,
            owner="HFGenerator",
            thread_name="tirl-hf-gen",
            batch_window_s=self.batch_window_s,
            max_batch=self.max_batch,
        )
        # transformers 5 renamed the forward argument ``past_key_values`` to ``cache``.
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params and "past_key_values" not in params else "past_key_values"

    @property
    def is_busy(self) -> bool:
        """True while a batch is running."""
        return self._busy_since is not None

    def busy_seconds(self) -> float:
        """Cumulative busy seconds, including the batch running now."""
        since = self._busy_since
        return self.busy_s + (time.perf_counter() - since if since is not None else 0.0)

    @property
    def device(self) -> torch.device:
        """Where the model's parameters live."""
        return next(self.model.parameters()).device

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        """Queue one request; it runs in the next batch."""
        return await self._batcher.submit(prompt_ids, params)

    def _run_requests(self, batch: list[Request]) -> list[GenerationResult]:
        """The batcher's call: ``batch`` grows by the requests admitted while it runs (results in its order)."""
        return self._run_batch([r.prompt_ids for r in batch], [r.params for r in batch], batch)

    def generate_batch(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[GenerationResult]:
        """Synchronous batched generation of exactly these prompts (no admission, results at the end)."""
        return self._run_batch([list(p) for p in prompts], list(params), None)

    def _row_rng(self, params: SamplingParams) -> torch.Generator:
        g = torch.Generator()
        g.manual_seed(params.seed if params.seed is not None else self._rng.getrandbits(63))
        return g

    def _run_batch(
        self, prompts: list[list[int]], params: list[SamplingParams], requests: list[Request] | None
    ) -> list[GenerationResult]:
        with self.model_lock:
            self._busy_since = time.perf_counter()
            prev_threads = torch.get_num_threads()
            self._use_threads(self.prefill_threads)  # process-wide; restored below (training never overlaps)
            try:
                return self._sample_loop(prompts, params, requests)
            finally:
                if torch.get_num_threads() != prev_threads:
                    torch.set_num_threads(prev_threads)
                self.busy_s += time.perf_counter() - self._busy_since
                self._busy_since = None
                self.batches += 1

    @staticmethod
    def _use_threads(n: int | None) -> None:
        """Set torch's intra-op thread count to ``n`` (None: leave it)."""
        if n is not None and n != torch.get_num_threads():
            torch.set_num_threads(n)

    def _stopped_by_string(self, row: _Row) -> bool:
        if not row.stop:
            return False
        text = self.tokenizer.decode(row.out, skip_special_tokens=False)
        return any(s and s in text for s in row.stop)

    def _new_rows(
        self, prompts: list[list[int]], params: list[SamplingParams], requests: list[Request] | None
    ) -> list[_Row]:
        rows = []
        for k, (ids, p) in enumerate(zip(prompts, params, strict=True)):
            max_new = max(0, min(p.max_new_tokens, self.max_context - len(ids)))
            # the row's random draws for all its tokens up front: the same numbers, in the same order, as one
            # torch.rand(1) per token from the row's generator (tested), without 2 calls per row and token
            uniform = torch.rand(max_new, generator=self._row_rng(p))  # [max_new]
            request = requests[k] if requests is not None else None
            rows.append(_Row(list(ids), max_new, tuple(p.stop), uniform, p.temperature, p.top_p, request, [], []))
            if max_new == 0:
                rows[-1].finish = "length"
        return rows

    def _prefill_batch(self, prompts: list[list[int]], max_new: int, weights: Fingerprint | None) -> _Batch:
        """The prefill's inputs and a KV cache holding each prompt's prefix-cache hit (``weights`` None: no reuse).

        Every row prefills the same number of ids: the most any row has not cached. A row with more cached
        positions reuses only those before its last ``n_width`` ids and prefills the rest again (what its
        padding would have cost), so the batch stays left-padded to its longest prompt, as without reuse.
        """
        hits = [self.prefix_cache.take(p, weights) if weights is not None else None for p in prompts]
        n_width = max(len(p) - (len(h.ids) if h else 0) for p, h in zip(prompts, hits, strict=True))
        cached = [max(0, len(p) - n_width) for p in prompts]  # positions each cache row reuses
        fresh = [p[c:] for p, c in zip(prompts, cached, strict=True)]  # the ids each row prefills
        c_width = max(cached)
        width = c_width + n_width  # the longest prompt
        cap = width + max_new  # every position this batch can reach
        input_ids = torch.full((len(prompts), n_width), self.pad_id, dtype=torch.long)  # [b_live, N]
        attn = torch.zeros((len(prompts), cap), dtype=torch.long)  # [b_live, cap]: 1 on real positions
        attn[:, width:] = 1  # every new token
        for j, (c, ids) in enumerate(zip(cached, fresh, strict=True)):
            input_ids[j, n_width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attn[j, width - c - len(ids) : width] = 1  # left padding, then the cached and the fresh positions
        pos = (attn[:, :width].cumsum(-1) - 1).clamp(min=0)[:, c_width:]  # [b_live, N]: positions skip padding
        capacity = min(cap, width + CACHE_CHUNK)  # grows by doubling past that
        cache = PreallocCache(capacity)
        if c_width:
            cache.layers = seeded_layers(hits, cached, c_width, cache_capacity=capacity)
        self.prefill_tokens += sum(len(f) for f in fresh)
        self.reused_tokens += sum(cached)
        dev = self.device
        return _Batch(input_ids.to(dev), attn.to(dev), pos.to(dev), width, cache)

    def _start(self, rows: list[_Row], offset: int, weights: Fingerprint | None) -> _Running | None:
        """Prefill the unfinished ``rows`` (numbered from ``offset`` in the batch); None when none is live."""
        live = [i for i, r in enumerate(rows) if r.finish is None]
        if not live:
            return None
        batch = self._prefill_batch([rows[i].prompt for i in live], max(rows[i].max_new for i in live), weights)
        out = self.model(
            input_ids=batch.input_ids,
            attention_mask=batch.attn[:, : batch.width],
            position_ids=batch.pos,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kw: batch.cache},
        )
        logits = out.logits[:, -1, :].float().cpu()  # [b_live, V]
        live = [offset + i for i in live]
        return _Running(rows, live, batch.cache, batch.attn, batch.pos[:, -1] + 1, logits, batch.width, weights)

    @torch.inference_mode()
    def _sample_loop(
        self, prompts: list[list[int]], params: list[SamplingParams], requests: list[Request] | None
    ) -> list[GenerationResult]:
        rows = self._new_rows(prompts, params, requests)
        weights = weights_fingerprint(self.model) if self.prefix_cache.max_bytes > 0 else None
        run = self._start(rows, 0, weights)
        if run is None:
            return [self._result(r) for r in rows]
        dev = self.device
        self._use_threads(self.threads)  # the decode steps: one token per row, small operations
        peak = len(run.live)  # the most rows the batch has held since it last admitted
        while True:
            if requests is not None and self.continuous and len(run.live) <= max(ADMIT_AT_ROWS, peak // 4):
                self._admit(run, requests)
                peak = max(peak, len(run.live))
            live = run.live
            u = torch.stack([rows[i].uniform[len(rows[i].out)] for i in live])  # [b_live]
            temps = torch.tensor([rows[i].temperature for i in live], dtype=torch.float32)  # [b_live]
            top_ps = torch.tensor([rows[i].top_p for i in live], dtype=torch.float32)  # [b_live]
            tokens, lps = sample_tokens(run.logits, temps, top_ps, u)  # [b_live] each
            keep = self._append_tokens(rows, live, tokens.tolist(), lps.tolist())
            if len(keep) < len(live):
                self._drop_finished(run, keep)
                tokens = tokens[torch.tensor(keep, dtype=torch.long)]
            if not run.live:
                break
            run.length += 1
            out = self.model(
                input_ids=tokens.to(dev)[:, None],
                attention_mask=run.attn[:, : run.length],
                position_ids=run.next_pos[:, None],
                use_cache=True,
                **{self._cache_kw: run.cache},
            )
            run.logits = out.logits[:, -1, :].float().cpu()  # [b_live, V]
            run.next_pos = run.next_pos + 1
        return [self._result(r) for r in rows]

    def _admit(self, run: _Running, requests: list[Request]) -> None:
        """Continuous batching: requests queued since the batch started join it (prefilled, then merged in).

        Not while a weight update waits for :attr:`model_lock`: the batch then drains and lets it in.
        """
        if self.model_lock.waiting:
            return
        new = self._batcher.take_queued(self.max_batch - len(run.live))
        if not new:
            return
        self.admitted += len(new)
        requests.extend(new)
        rows = self._new_rows([r.prompt_ids for r in new], [r.params for r in new], new)
        offset = len(run.rows)
        run.rows.extend(rows)
        for row in rows:
            if row.finish is not None and row.request is not None:  # no room for a token: answered at once
                self._batcher.deliver(row.request, self._result(row))
        self._use_threads(self.prefill_threads)
        sub = self._start(rows, offset, run.weights)
        self._use_threads(self.threads)
        if sub is None:
            return
        length = max(run.length, sub.length)
        cap = length + max(run.rows[i].max_new - len(run.rows[i].out) for i in run.live + sub.live)
        attn = torch.ones((len(run.live) + len(sub.live), cap), dtype=torch.long, device=run.attn.device)
        b1 = len(run.live)
        attn[:, :length] = 0
        attn[:b1, length - run.length : length] = run.attn[:, : run.length]
        attn[b1:, length - sub.length : length] = sub.attn[:, : sub.length]
        capacity = min(cap, length + CACHE_CHUNK)
        cache = PreallocCache(capacity)
        cache.layers = merged_layers(run.cache, run.length, sub.cache, sub.length, length, capacity)
        run.cache, run.attn, run.length = cache, attn, length
        run.next_pos = torch.cat([run.next_pos, sub.next_pos])
        run.logits = torch.cat([run.logits, sub.logits])
        run.live = run.live + sub.live

    def _drop_finished(self, run: _Running, keep: list[int]) -> None:
        """Store the finished rows' prefixes, hand their results over, and take them out of the cache.

        A finished row's result goes to its caller at once while other rows go on, except when the batch
        is about to end: then every result comes back with the batch (so nothing the caller does next, such
        as a weight update, overlaps the batch's last bookkeeping).
        """
        kept = set(keep)
        done = [j for j in range(len(run.live)) if j not in kept]
        if run.weights is not None:
            self._keep_prefixes(run, done)
        if keep:
            for j in done:
                row = run.rows[run.live[j]]
                if row.request is not None:
                    self._batcher.deliver(row.request, self._result(row))
            kt = torch.tensor(keep, dtype=torch.long, device=run.attn.device)
            run.cache.batch_select_indices(kt)
            run.attn, run.next_pos = run.attn[kt], run.next_pos[kt]  # the logits are replaced next step
        run.live = [run.live[j] for j in keep]

    def _keep_prefixes(self, run: _Running, done: list[int]) -> None:
        """Store the keys and values of finished cache rows ``done``: their prompt and sampled ids but the last."""
        assert run.weights is not None
        for j in done:
            row = run.rows[run.live[j]]
            ids = row.prompt + row.out[:-1]  # the last sampled token was never fed to the model
            where = run.attn[j, : run.length].nonzero().squeeze(1)  # [n]
            if where.numel() != len(ids):  # cannot happen; never store a misaligned entry
                continue
            keys = [layer.keys[j][:, where] for layer in run.cache.layers]  # per layer [H, n, D]
            values = [layer.values[j][:, where] for layer in run.cache.layers]
            self.prefix_cache.put(CachedPrefix(ids=ids, keys=keys, values=values, weights=run.weights))

    def _append_tokens(self, rows: list[_Row], live: list[int], tokens: list[int], lps: list[float]) -> list[int]:
        """Append each live row's sampled token; the positions in ``live`` of the rows that go on."""
        keep: list[int] = []
        for j, (i, tok, lp) in enumerate(zip(live, tokens, lps, strict=True)):
            row = rows[i]
            row.out.append(tok)
            row.logprobs.append(lp)
            if tok in self.eos_ids:
                row.finish = "eos"
            elif self._stopped_by_string(row):
                row.finish = "stop"
            elif len(row.out) >= row.max_new:
                row.finish = "length"
            elif row.request is not None and row.request.future.cancelled():  # its caller left (tirl serve)
                row.finish = "length"  # the result goes nowhere; the row leaves the batch now, not at max_new
            else:
                keep.append(j)
        self.tokens_generated += len(live)
        return keep

    def _result(self, row: _Row) -> GenerationResult:
        return GenerationResult(
            token_ids=row.out,
            logprobs=row.logprobs,
            finish_reason=row.finish or "length",
            text=str(self.tokenizer.decode(row.out, skip_special_tokens=False)) if row.out else "",
            policy_version=self.policy_version,
        )

    async def close(self) -> None:
        """Fail queued requests and stop the worker thread."""
        self._batcher.close()
