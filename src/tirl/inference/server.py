"""``tirl serve``: an OpenAI-compatible HTTP server over one in-process policy.

Endpoints (all JSON; errors in OpenAI's shape ``{"error": {message, type, param, code}}``):

* ``GET /v1/models`` — the one served model (``id``, ``max_model_len``, ``policy_version``).
* ``POST /v1/completions`` — ``prompt`` is text, a list of texts, a list of
  token ids or a list of lists of token ids (vLLM's convention). Streaming
  (``stream: true``, server-sent events ending ``data: [DONE]``) and not.
* ``POST /v1/chat/completions`` — ``messages`` rendered with the model's chat
  format (:mod:`tirl.models.chat_format`), streaming and not.
* ``POST /v1/load_weights`` — ``{"path": DIR, "policy_version": N?}``: copy the
  weights of the checkpoint at ``DIR`` (a ``save_pretrained`` directory on a
  file system the server can read) into the served model between batches,
  and set the policy version (default: the old one + 1). This is the
  trainer's weight sync.
* ``GET /health`` — ``{"status": "ok", "policy_version": N, "requests", "batches", "tokens_generated"}``
  (no key needed).

Token-id extension (vLLM's names, so one RL client works against both):

* ``return_token_ids: true`` — each choice carries ``token_ids`` (the sampled
  ids, the EOS id included) and ``prompt_token_ids`` (completions: per choice;
  chat: top level, as vLLM does).
* ``return_tokens_as_token_ids: true`` — log-prob tokens are ``"token_id:N"``.
* ``logprobs`` — the log-prob of each sampled token under the distribution it
  was sampled from (temperature and top-p applied). ``top_logprobs`` list the
  sampled token only: alternatives are not computed.
* ``include_stop_str_in_output`` (default false: the text is cut before the
  stop string, as OpenAI does; token ids are never cut) and
  ``skip_special_tokens`` (default true; affects ``text`` only).
* Every response has ``policy_version``: the weights version that sampled it.

Concurrent requests are batched by :class:`~tirl.inference.hf.HFGenerator`
(one sampling loop; no second sampler here); :class:`~tirl.inference.arrival.ArrivalGate` lets a
burst of HTTP arrivals finish before an idle sampler starts, so that the
burst shares one batch as it would in-process. Prompts are encoded on one
tokenizer thread (:mod:`~tirl.inference.tokenizer_thread`), not the event
loop; a client that hangs up cancels its generation (:mod:`~tirl.inference.request_io`).

A streamed chunk's text is decoded a few tokens at a time (:mod:`~tirl.inference.stream_text`); a handler's
exception is logged and answered with a JSON 500 that does not echo it (:mod:`~tirl.inference.internal_errors`).

Not covered: incremental streaming while sampling — a streamed response
sends its chunks (one per token) when its sample is complete, because the
batched sampler returns whole samples; multi-model serving; per-token
deltas when streaming with ``tools`` (:mod:`tirl.inference.tools_api`);
``echo``; penalties; top-k alternatives in log-probs; TLS (put a proxy in
front for that).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tirl.errors import describe
from tirl.inference.arrival import ArrivalGate
from tirl.inference.base import GenerationResult, SamplingParams
from tirl.inference.hf import HFGenerator
from tirl.inference.internal_errors import InternalErrors, report
from tirl.inference.openai_protocol import APIError, ChatJob, Common, CompletionJob, bad, parse_chat, parse_completion
from tirl.inference.request_io import ClientGone, read_json, unless_client_leaves
from tirl.inference.stream_text import token_pieces
from tirl.inference.tokenizer_thread import TokenizerThread
from tirl.inference.tools_api import tool_chunks, tool_reply
from tirl.models.loading import Policy

_FINISH = {"eos": "stop", "stop": "stop", "length": "length"}
MAX_BODY_BYTES = 8 * 2**20  # default request body cap (413 above it); tirl serve --max-body-mb


def _prompt_chars(job: ChatJob) -> int:
    """The characters a chat prompt renders at least: contents, tool-call names and arguments, tool definitions."""
    chars = 0
    for m in job.messages:
        chars += len(m.content or "")
        for call in m.tool_calls:
            args = call.arguments if isinstance(call.arguments, str) else str(call.arguments)
            chars += len(call.name or "") + len(args)
    if job.tools is not None:
        chars += len(json.dumps(job.tools.tools))
    return chars


def _longest_token_chars(tokenizer: Any) -> int:
    """The most characters one token's text can have (at least 1); the bound of the pre-tokenize check."""
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    longest = max((len(p) for p in pieces if isinstance(p, str)), default=1)
    return max(1, longest, *(len(t) for t in getattr(tokenizer, "all_special_tokens", [])))


@dataclass(slots=True)
class Sample:
    """One generated choice: its prompt, the generator's result and the text to return."""

    prompt_ids: list[int]
    result: GenerationResult
    text: str
    finish_reason: str


class ModelServer:
    """Holds the policy and its batched generator; builds the Starlette app.

    ``api_key``: when set, every ``/v1`` request must send
    ``Authorization: Bearer <api_key>`` (401 otherwise).
    """

    def __init__(
        self,
        policy: Policy,
        *,
        model_name: str,
        api_key: str | None = None,
        max_batch: int = 64,
        batch_window_s: float = 0.005,
        arrival_gap_s: float = 0.01,
        max_arrival_wait_s: float = 0.25,
        seed: int = 0,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.policy = policy
        self.max_body_bytes = max_body_bytes
        self.model_name = model_name
        self.api_key = api_key or None
        self.generator = HFGenerator(
            policy.model,
            policy.tokenizer,
            eos_ids=policy.chat.eos_ids,
            max_batch=max_batch,
            batch_window_s=batch_window_s,
            seed=seed,
        )
        self.max_context = self.generator.max_context
        self.gate = ArrivalGate(
            lambda: self.generator.is_busy, gap_s=arrival_gap_s, max_wait_s=max_arrival_wait_s, max_batch=max_batch
        )
        self.vocab_size = len(policy.tokenizer)
        # the longest text one token can stand for: a text longer than max_context * this cannot fit, and is
        # refused before the tokenizer sees it (a 20 MB prompt took 37 s and +3.9 GB to tokenize and refuse)
        self.max_prompt_chars = self.max_context * _longest_token_chars(policy.tokenizer)
        self.created = int(time.time())
        self.requests = 0  # generation requests (one per prompt and choice)
        self._pieces: dict[tuple[int, bool], str] = {}
        self._reload_lock = asyncio.Lock()
        self.tokenize = TokenizerThread()  # every encode and chat render of a request, off the event loop

    # ----------------------------------------------------------------- checks
    def _auth(self, request: Request) -> None:
        if self.api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise APIError(401, "missing API key: send 'Authorization: Bearer <key>' (the key given to tirl serve)")
        # As bytes: a header arrives as latin-1 text, and compare_digest raises TypeError on non-ASCII str (a 500)
        if not hmac.compare_digest(token.strip().encode("latin-1"), self.api_key.encode("utf-8")):
            raise APIError(401, "incorrect API key provided")

    def _model(self, name: str) -> None:
        if name != self.model_name:
            name = name if len(name) <= 64 else f"{name[:40]}... ({len(name)} characters)"  # never echo a megabyte
            raise APIError(
                404,
                f"The model `{name}` does not exist. This server serves `{self.model_name}` (GET /v1/models).",
                param="model",
            )

    def _check_ids(self, ids: list[int], max_tokens: int, what: str) -> None:
        if not ids:
            raise bad(f"the {what} is empty", "prompt")
        if len(ids) + max_tokens > self.max_context:  # before the id scan: a long list is refused in O(1)
            raise bad(
                f"This model's maximum context length is {self.max_context} tokens. However, you requested "
                f"{len(ids) + max_tokens} tokens ({len(ids)} in the {what}, {max_tokens} in the completion). "
                "Please reduce the length of the prompt or max_tokens.",
                "max_tokens",
            )
        bad_ids = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad_ids:
            shown = str(bad_ids[0]) if len(str(bad_ids[0])) <= 20 else f"{str(bad_ids[0])[:20]}..."
            raise bad(f"token id {shown} is out of range [0, {self.vocab_size})", "prompt")

    def _check_chars(self, chars: int, what: str, param: str) -> None:
        """The cheap length check before tokenizing: more characters than any fitting prompt can have."""
        if chars > self.max_prompt_chars:
            raise bad(
                f"This model's maximum context length is {self.max_context} tokens; the {what} has {chars} "
                f"characters, more than {self.max_context} tokens can hold. Please reduce the length of the {what}.",
                param,
            )

    def _encode(self, text: str) -> list[int]:
        self._check_chars(len(text), "prompt", "prompt")
        return list(self.policy.tokenizer.encode(text, add_special_tokens=False))

    def _decode(self, ids: list[int], skip_special: bool) -> str:
        return str(self.policy.tokenizer.decode(ids, skip_special_tokens=skip_special))

    # ------------------------------------------------------------- generation
    async def _sample(
        self, prompts: list[list[int]], common: Common, text_of: Callable[[list[int]], str]
    ) -> list[Sample]:
        """``common.n`` samples of each prompt, generated concurrently (batched by the generator)."""
        calls = []
        for ids in prompts:
            for k in range(common.n):
                p = common.params
                seed = None if p.seed is None else p.seed + k
                calls.append((ids, SamplingParams(p.max_new_tokens, p.temperature, p.top_p, p.stop, seed)))
        self.requests += len(calls)
        await self.gate.wait()
        results = await asyncio.gather(*(self.generator.generate(ids, params) for ids, params in calls))
        samples = []
        for (ids, params), res in zip(calls, results, strict=True):
            text = text_of(res.token_ids)
            if res.finish_reason == "stop" and not common.include_stop:
                cut = min((text.find(s) for s in params.stop if s in text), default=-1)
                if cut >= 0:
                    text = text[:cut]
            samples.append(Sample(ids, res, text, _FINISH[res.finish_reason]))
        return samples

    def _piece(self, tid: int, skip_special: bool) -> str:
        """The text of one token (cached: the response path decodes every sampled token)."""
        key = (tid, skip_special)
        text = self._pieces.get(key)
        if text is None:
            text = self._pieces[key] = self._decode([tid], skip_special)
        return text

    def _token_str(self, tid: int, common: Common) -> str:
        return f"token_id:{tid}" if common.token_ids_as_text else self._piece(tid, False)

    def _completion_logprobs(self, ids: list[int], lps: list[float], common: Common, offset0: int) -> dict[str, Any]:
        tokens = [self._token_str(t, common) for t in ids]
        offsets, pos = [], offset0
        for t in ids:
            offsets.append(pos)
            pos += len(self._piece(t, common.skip_special))
        top = [{tok: lp} for tok, lp in zip(tokens, lps, strict=True)] if common.logprobs else None
        return {"tokens": tokens, "token_logprobs": list(lps), "top_logprobs": top, "text_offset": offsets}

    def _chat_logprobs(self, ids: list[int], lps: list[float], job: ChatJob) -> dict[str, Any]:
        content = []
        for t, lp in zip(ids, lps, strict=True):
            tok = self._token_str(t, job.common)
            entry: dict[str, Any] = {"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8"))}
            entry["top_logprobs"] = [dict(entry)] if job.top_logprobs else []
            content.append(entry)
        return {"content": content}

    def _usage(self, samples: list[Sample]) -> dict[str, int]:
        prompt = sum(
            len(s.prompt_ids) for i, s in enumerate(samples) if i == 0 or s.prompt_ids is not samples[i - 1].prompt_ids
        )
        completion = sum(len(s.result.token_ids) for s in samples)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    # --------------------------------------------------------------- handlers
    async def _body(self, request: Request) -> Any:
        """The request's JSON after the key check: a size cap (413), parsed strictly (400); see :func:`read_json`."""
        self._auth(request)
        return await read_json(request, self.max_body_bytes)

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``."""
        self._auth(request)
        entry = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "tirl",
            "root": str(self.policy.path),
            "max_model_len": self.max_context,
            "policy_version": self.generator.policy_version,
        }
        return JSONResponse({"object": "list", "data": [entry]})

    async def health(self, request: Request) -> Response:
        """``GET /health``."""
        gen = self.generator
        return JSONResponse(
            {
                "status": "ok",
                "policy_version": gen.policy_version,
                "requests": self.requests,
                "batches": gen.batches,
                "tokens_generated": gen.tokens_generated,
            }
        )

    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions``."""
        job: CompletionJob = parse_completion(await self._body(request))
        common = job.common
        self._model(common.model)
        prompts = await self.tokenize.run(self._prompt_ids, job)
        rid = f"cmpl-{uuid.uuid4().hex}"

        def text_of(ids: list[int]) -> str:
            return self._decode(ids, common.skip_special)

        if common.stream:
            return self._stream(self._completion_chunks(rid, prompts, common, text_of))
        samples = await unless_client_leaves(request, self._sample(prompts, common, text_of))
        choices = []
        for i, s in enumerate(samples):
            choice: dict[str, Any] = {
                "index": i,
                "text": s.text,
                "finish_reason": s.finish_reason,
                "stop_reason": None,
                "logprobs": None,
            }
            if common.logprobs is not None:
                choice["logprobs"] = self._completion_logprobs(s.result.token_ids, s.result.logprobs, common, 0)
            if common.return_token_ids:
                choice["prompt_token_ids"] = s.prompt_ids
                choice["token_ids"] = s.result.token_ids
            choices.append(choice)
        return JSONResponse(
            {
                "id": rid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.model_name,
                "choices": choices,
                "usage": self._usage(samples),
                "policy_version": self._version(samples),
            }
        )

    async def chat(self, request: Request) -> Response:
        """``POST /v1/chat/completions``."""
        job = parse_chat(await self._body(request), max_messages=self.max_context)
        common = job.common
        self._model(common.model)
        self._check_chars(_prompt_chars(job), "messages", "messages")
        try:
            ids = await self.tokenize.run(self._chat_prompt_ids, job)
        except APIError:
            raise
        except Exception as exc:
            raise bad(f"the messages could not be rendered with the model's chat format ({exc})", "messages") from None
        self._check_ids(ids, common.params.max_new_tokens, "messages")
        rid = f"chatcmpl-{uuid.uuid4().hex}"

        def text_of(tids: list[int]) -> str:
            return self.policy.chat.assistant_text(tids)

        if common.stream and job.tools is not None:  # whole samples, tool_calls parsed (tirl.inference.tools_api)
            base = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": self.model_name}
            usage = self._usage if common.include_usage else None
            return self._stream(tool_chunks(lambda: self._sample([ids], common, text_of), job.tools, base, usage))
        if common.stream:
            return self._stream(self._chat_chunks(rid, ids, job, text_of))
        samples = await unless_client_leaves(request, self._sample([ids], common, text_of))
        choices = []
        for i, s in enumerate(samples):
            text = job.tools.forced_start + s.text if job.tools else s.text
            message, called = tool_reply(text, job.tools, s.finish_reason)
            choice: dict[str, Any] = {
                "index": i,
                "message": message,
                "finish_reason": "tool_calls" if called and s.finish_reason == "stop" else s.finish_reason,
                "stop_reason": None,
                "logprobs": None,
            }
            if common.logprobs is not None:
                choice["logprobs"] = self._chat_logprobs(s.result.token_ids, s.result.logprobs, job)
            if common.return_token_ids:
                choice["token_ids"] = s.result.token_ids
            choices.append(choice)
        body: dict[str, Any] = {
            "id": rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": self._usage(samples),
            "policy_version": self._version(samples),
        }
        if common.return_token_ids:
            body["prompt_token_ids"] = ids
        return JSONResponse(body)

    def _prompt_ids(self, job: CompletionJob) -> list[list[int]]:
        """(Tokenizer thread.) Each prompt's ids, checked as soon as it is encoded: a long one stops the rest."""
        prompts = []
        for p in job.prompts:
            prompts.append(p if isinstance(p, list) else self._encode(p))
            self._check_ids(prompts[-1], job.common.params.max_new_tokens, "prompt")
        return prompts

    def _chat_prompt_ids(self, job: ChatJob) -> list[int]:
        """The rendered messages (with ``tools``), then the forced start of a required call (tools_api)."""
        chat = self.policy.chat
        if job.tools is None:
            return list(chat.prompt_ids(job.messages))
        support = chat.tool_support
        if not (support.ok and support.hermes):
            missing = "; ".join(support.missing) or "<tool_call> blocks"
            raise bad(f"the served model's chat template has no tool support (it does not render {missing})", "tools")
        return [*chat.prompt_ids(job.messages, tools=job.tools.tools), *self._encode(job.tools.forced_start)]

    def _version(self, samples: list[Sample]) -> int:
        return min((s.result.policy_version for s in samples), default=self.generator.policy_version)

    async def load_weights(self, request: Request) -> Response:
        """``POST /v1/load_weights``: ``{"path": DIR, "policy_version": N?}``."""
        body = await self._body(request)
        if not isinstance(body, dict) or not isinstance(body.get("path"), str) or not body["path"].strip("\x00"):
            raise bad("'path' is required: a checkpoint directory written with save_pretrained", "path")
        version = body.get("policy_version")
        if version is not None and (type(version) is not int or not 0 <= version < 2**63):  # bool is not int here
            raise bad("'policy_version' must be an integer from 0 to 2**63 - 1", "policy_version")
        if "\x00" in body["path"]:
            raise bad("'path' holds a NUL character", "path")
        try:
            path = Path(body["path"]).expanduser()
            readable = (path / "config.json").is_file()
        except (OSError, RuntimeError) as exc:  # "~nobody" (no such home), a name too long for the file system
            raise bad(f"'path' cannot be used: {exc}", "path") from None
        if not readable:
            raise bad(f"{path} is not a checkpoint directory (no config.json readable by the server)", "path")
        async with self._reload_lock:
            t0 = time.perf_counter()
            try:
                await asyncio.to_thread(self._load_into_model, path)
            except Exception as exc:  # whatever the client's directory holds (a refused pickle, a bad config): 400
                raise bad(f"could not load the weights of {path}: {describe(exc)}", "path") from None
            gen = self.generator
            gen.policy_version = int(version) if version is not None else gen.policy_version + 1
            return JSONResponse(
                {
                    "status": "ok",
                    "path": str(path),
                    "policy_version": gen.policy_version,
                    "load_s": round(time.perf_counter() - t0, 4),
                }
            )

    def _load_into_model(self, path: Path) -> None:
        """Copy the checkpoint's weights into the served model between batches; its config is checked first.

        ``config.json`` is built on the meta device (no memory) and must give the served model's parameter names
        and shapes, else it is refused before anything is allocated (24 wide layers grew the server by 1.5 GB
        before ``load_state_dict`` refused them). Not covered: the CPU time of an absurd layer count on meta.
        """
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        model = self.policy.model
        config = AutoConfig.from_pretrained(str(path), trust_remote_code=False)
        with torch.device("meta"):
            shell = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        got = {k: tuple(v.shape) for k, v in shell.state_dict().items()}
        if got != want:
            odd = sorted(set(got.items()) ^ set(want.items()))[0][0]
            raise ValueError(
                f"its config.json builds another model than the served one ({len(got)} parameter tensors against "
                f"{len(want)}; first difference at {odd!r}): sync a checkpoint of the served model"
            )
        src = AutoModelForCausalLM.from_pretrained(str(path), dtype=model.dtype, trust_remote_code=False)
        state = src.state_dict()
        with self.generator.model_lock:  # between batches, never during one
            model.load_state_dict(state, strict=True)

    # -------------------------------------------------------------- streaming
    def _stream(self, chunks: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
        async def events() -> AsyncIterator[str]:
            try:
                async for chunk in chunks:
                    yield f"data: {json.dumps(chunk)}\n\n"
            except APIError as exc:
                yield f"data: {json.dumps(exc.body())}\n\n"
            except Exception as exc:  # after the 200 was sent: logged, an error event that does not echo it
                yield f"data: {json.dumps(report(exc, 'a streamed response').body())}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def _completion_chunks(
        self, rid: str, prompts: list[list[int]], common: Common, text_of: Callable[[list[int]], str]
    ) -> AsyncIterator[dict[str, Any]]:
        samples = await self._sample(prompts, common, text_of)
        base = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": self.model_name}
        for i, s in enumerate(samples):
            ids, lps = s.result.token_ids, s.result.logprobs
            deltas = token_pieces(ids, s.text, text_of)
            offset = 0
            for j, (tid, lp, piece) in enumerate(zip(ids, lps, deltas, strict=True)):
                last = j == len(ids) - 1
                choice: dict[str, Any] = {
                    "index": i,
                    "text": piece,
                    "finish_reason": s.finish_reason if last else None,
                    "logprobs": None,
                }
                if common.logprobs is not None:
                    choice["logprobs"] = self._completion_logprobs([tid], [lp], common, offset)
                if common.return_token_ids:
                    choice["token_ids"] = [tid]
                    if j == 0:
                        choice["prompt_token_ids"] = s.prompt_ids
                offset += len(piece)
                yield {**base, "choices": [choice], "policy_version": s.result.policy_version}
        if common.include_usage:
            yield {**base, "choices": [], "usage": self._usage(samples)}

    async def _chat_chunks(
        self, rid: str, ids: list[int], job: ChatJob, text_of: Callable[[list[int]], str]
    ) -> AsyncIterator[dict[str, Any]]:
        common = job.common
        samples = await self._sample([ids], common, text_of)
        base = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": self.model_name}
        for i, s in enumerate(samples):
            first: dict[str, Any] = {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            head = {**base, "choices": [first]}
            if common.return_token_ids and i == 0:
                head["prompt_token_ids"] = ids
            yield head
            tids, lps = s.result.token_ids, s.result.logprobs
            for j, (tid, lp, piece) in enumerate(zip(tids, lps, token_pieces(tids, s.text, text_of), strict=True)):
                last = j == len(tids) - 1
                choice: dict[str, Any] = {
                    "index": i,
                    "delta": {"content": piece},
                    "finish_reason": s.finish_reason if last else None,
                    "logprobs": None,
                }
                if common.logprobs is not None:
                    choice["logprobs"] = self._chat_logprobs([tid], [lp], job)
                if common.return_token_ids:
                    choice["token_ids"] = [tid]
                yield {**base, "choices": [choice], "policy_version": s.result.policy_version}
        if common.include_usage:
            yield {**base, "choices": [], "usage": self._usage(samples)}

    # -------------------------------------------------------------------- app
    def app(self) -> Starlette:
        """The Starlette application."""

        def wrap(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
            async def handler(request: Request) -> Response:
                try:
                    return await fn(request)  # type: ignore[no-any-return]
                except APIError as exc:
                    return JSONResponse(exc.body(), status_code=exc.status)
                except ClientGone:  # its generation was cancelled; nobody reads this (nginx's "client closed")
                    return Response(status_code=499)
                # anything else is a bug: InternalErrors logs it and answers a JSON 500 that does not echo it

            return handler

        async def http_error(request: Request, exc: Exception) -> Response:
            status = exc.status_code if isinstance(exc, HTTPException) else 500
            if status == 404:
                msg = f"no route {request.url.path}; the API is under /v1 (e.g. /v1/models) — check the base URL"
            elif status == 405:
                msg = f"method {request.method} is not allowed on {request.url.path}"
            else:
                msg = str(getattr(exc, "detail", exc))
            return JSONResponse(APIError(status, msg).body(), status_code=status)

        routes = [
            Route("/health", wrap(self.health), methods=["GET"]),
            Route("/v1/models", wrap(self.models), methods=["GET"]),
            Route("/v1/completions", wrap(self.completions), methods=["POST"]),
            Route("/v1/chat/completions", wrap(self.chat), methods=["POST"]),
            Route("/v1/load_weights", wrap(self.load_weights), methods=["POST"]),
        ]
        errors = [Middleware(InternalErrors)]  # a handler's exception: logged, a JSON 500 that does not echo it
        return Starlette(routes=routes, exception_handlers={HTTPException: http_error}, middleware=errors)
