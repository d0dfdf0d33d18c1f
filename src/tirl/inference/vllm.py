"""In-process vLLM generation for GPU machines (the ``vllm`` extra; vLLM is imported lazily).

:class:`VLLMGenerator` implements :class:`~tirl.inference.base.Generator`
with ``vllm.LLM``: concurrent ``generate`` calls are queued and sent to
``LLM.generate`` together (vLLM schedules them with continuous batching and
paged attention), in a worker thread so the event loop keeps running.
Prompts go in as ``TokensPrompt(prompt_token_ids=...)`` — never re-tokenised —
and each result carries the sampled ``token_ids`` and, from
``SamplingParams(logprobs=0)``, the log-prob of each sampled token.

Log-probs: the engine is created with ``logprobs_mode="processed_logprobs"``
when the installed vLLM knows it, so that log-probs are under the distribution
tokens were sampled from (temperature and top-p applied), as
:class:`~tirl.inference.hf.HFGenerator` reports them; older vLLM returns the
raw model log-probs. Either way vLLM's kernels differ numerically from the
trainer's forward pass: the trainer logs the gap
(``train/gen_logprob_gap_max``) and corrects it with truncated importance
sampling (``algo.tis_cap``).

Weight updates: :meth:`VLLMGenerator.update_weights` copies the trainer's
``state_dict`` into the engine's model through ``LLM.collective_rpc`` (each
worker calls ``model.load_weights``), then ``LLM.reset_prefix_cache()`` so no
KV block computed with the old weights is reused, and sets
``policy_version``. :meth:`sync_weights` is the same with the signature the
trainer's ``on_update`` hook uses.

Not covered (and not run here: no GPU was available when this was written —
see docs/serving.md): tensor/pipeline parallel weight updates through NCCL
(the weights travel by pickling, fine for one GPU, slow for large models),
LoRA, multi-node engines, and sharing one GPU between the trainer and vLLM
(set ``gpu_memory_utilization`` so both fit, or use ``enable_sleep_mode``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from tirl.errors import SetupError
from tirl.inference.base import FinishReason, GenerationResult, Request, RequestBatcher, SamplingParams


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise SetupError(
            f"generator=vllm needs vLLM on a CUDA machine ({exc}) — pip install 'tirl[vllm]', "
            "or serve the model with `vllm serve` and use --generator openai"
        ) from None
    return vllm


def _load_weights(worker: Any, weights: list[tuple[str, Any]]) -> int:
    """Run inside each vLLM worker (``collective_rpc``): load ``(name, tensor)`` pairs into its model."""
    model = worker.model_runner.model
    model.load_weights(weights=iter(weights))
    return len(weights)


def vllm_sampling_params(vllm: Any, p: SamplingParams, eos_ids: Iterable[int]) -> Any:
    """``vllm.SamplingParams`` for tirl's :class:`~tirl.inference.base.SamplingParams`."""
    return vllm.SamplingParams(
        n=1,
        temperature=p.temperature,
        top_p=p.top_p,
        max_tokens=p.max_new_tokens,
        stop=list(p.stop) or None,
        include_stop_str_in_output=True,
        stop_token_ids=sorted(eos_ids) or None,
        seed=p.seed,
        logprobs=0,  # the sampled token's log-prob only
        skip_special_tokens=False,
        detokenize=True,
    )


def result_from_output(output: Any, eos_ids: frozenset[int], version: int) -> GenerationResult:
    """Convert a ``vllm.RequestOutput`` (first completion) into a :class:`GenerationResult`."""
    comp = output.outputs[0]
    ids = [int(t) for t in comp.token_ids]
    if comp.logprobs is None or len(comp.logprobs) != len(ids):
        raise RuntimeError("vLLM returned no log-prob per sampled token; SamplingParams(logprobs=0) was ignored")
    lps = [float(entry[tid].logprob) for entry, tid in zip(comp.logprobs, ids, strict=True)]
    finish: FinishReason
    if comp.finish_reason == "length":
        finish = "length"
    elif ids and ids[-1] in eos_ids:
        finish = "eos"
    else:
        finish = "stop"
    return GenerationResult(
        token_ids=ids, logprobs=lps, finish_reason=finish, text=comp.text or "", policy_version=version
    )


class VLLMGenerator:
    """Batched generation with an in-process ``vllm.LLM``.

    ``model_path``: a local Hugging Face directory. ``eos_ids``: the chat
    format's end-of-turn ids (also passed as ``stop_token_ids``). Extra keyword
    arguments go to ``vllm.LLM`` (e.g. ``max_model_len``, ``enforce_eager``).
    ``llm``: an already-built engine (then ``model_path`` is only recorded).
    """

    def __init__(
        self,
        model_path: str,
        *,
        eos_ids: Iterable[int],
        seed: int = 0,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.5,
        batch_window_s: float = 0.005,
        llm: Any = None,
        **engine_kwargs: Any,
    ) -> None:
        self.vllm = _import_vllm()
        self.model_path = model_path
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.batch_window_s = max(0.0, batch_window_s)
        self.policy_version = 0
        self.tokens_generated = 0
        if llm is None:
            import torch

            if not torch.cuda.is_available():
                raise SetupError("generator=vllm needs a CUDA GPU; none is visible (use generator=hf on CPU)")
            kwargs: dict[str, Any] = {
                "model": model_path,
                "dtype": dtype,
                "seed": seed,
                "gpu_memory_utilization": gpu_memory_utilization,
                **engine_kwargs,
            }
            if "logprobs_mode" in inspect.signature(self.vllm.EngineArgs).parameters:
                kwargs.setdefault("logprobs_mode", "processed_logprobs")
            llm = self.vllm.LLM(**kwargs)
        self.llm = llm
        self._batcher = RequestBatcher(
            self._run, owner="VLLMGenerator", thread_name="tirl-vllm", batch_window_s=self.batch_window_s
        )

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        """Queue one request; queued requests go to ``LLM.generate`` together."""
        return await self._batcher.submit(prompt_ids, params)

    def _run(self, batch: list[Request]) -> list[GenerationResult]:
        vllm = self.vllm
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=r.prompt_ids) for r in batch]
        params = [vllm_sampling_params(vllm, r.params, self.eos_ids) for r in batch]
        version = self.policy_version
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        results = [result_from_output(o, self.eos_ids, version) for o in outputs]
        self.tokens_generated += sum(len(r.token_ids) for r in results)
        return results

    def update_weights(self, model: Any, version: int) -> None:
        """Copy ``model``'s weights into the engine (between batches) and set ``policy_version``."""
        weights = [(name, t.detach().to("cpu")) for name, t in model.state_dict().items()]

        def load() -> None:
            self.llm.collective_rpc(_load_weights, args=(weights,))
            self.llm.reset_prefix_cache()

        # the single executor thread also runs generation, so the load never overlaps a batch
        self._batcher.executor.submit(load).result()
        self.policy_version = version

    def sync_weights(self, model: Any, tokenizer: Any, version: int) -> None:
        """The trainer's ``on_update`` hook: :meth:`update_weights` (the tokenizer does not change)."""
        self.update_weights(model, version)

    async def close(self) -> None:
        """Fail queued requests and stop the worker thread (the engine is freed with this object)."""
        self._batcher.close()
