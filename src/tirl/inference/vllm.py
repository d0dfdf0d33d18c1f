"""vLLM generation for GPU machines (the ``vllm`` extra, pinned to 0.33; vLLM is imported lazily).

:class:`VLLMGenerator` implements :class:`~tirl.inference.base.Generator`
with ``vllm.LLM``: concurrent ``generate`` calls are queued and sent to
``LLM.generate`` together (vLLM schedules them with continuous batching and
paged attention), in a worker thread so the event loop keeps running.
Prompts go in as ``TokensPrompt(prompt_token_ids=...)`` — never re-tokenised —
and each result carries the sampled ``token_ids`` and, from
``SamplingParams(logprobs=0)``, the log-prob of each sampled token.

The engine runs in its own process (vLLM's default,
``VLLM_ENABLE_V1_MULTIPROCESSING=1``; ``0`` is refused): in this process it
would claim torch's default process group, which ``--nproc N`` needs.

Engine settings (:func:`engine_kwargs`): ``dtype`` (``model.vllm_dtype``;
tirl's default is the trainer's dtype, so that both sides compute the same
log-probs — vLLM's own ``auto`` turns a float32 checkpoint into bf16),
``gpu_memory_utilization`` and ``max_model_len`` (``model.vllm_*``), and
``logprobs_mode="processed_logprobs"`` so that log-probs are under the
distribution tokens were sampled from (temperature and top-p applied), as
:class:`~tirl.inference.hf.HFGenerator` reports them. vLLM's kernels still
differ numerically from the trainer's forward pass: the trainer logs the gap
(``train/gen_logprob_gap_max``) and corrects it with truncated importance
sampling (``algo.tis_cap``, on by default).

Weight updates (:meth:`VLLMGenerator.update_weights`), on the batcher's single
thread so that they never overlap a batch:

* full weights: the trainer's ``state_dict`` is written to a safetensors file
  in ``/dev/shm`` and every worker loads it by path through
  ``collective_rpc("tirl_load_weights", args=(path,))`` — a method of
  :class:`~tirl.inference.vllm_worker.WeightSyncExtension`, named in the
  engine arguments. Only a method name and a string cross vLLM's serialiser;
  then ``reset_prefix_cache()`` so no KV block of the old weights is reused.
* LoRA (``lora_rank > 0``): the engine keeps the frozen base; each sync saves
  the adapter (peft ``save_pretrained``, a few MB) and later requests carry a
  new ``LoRARequest`` for it; the previous adapter is removed from the engine.

``finish_reason``: ``length`` at the token cap, ``stop`` for a stop string,
``eos`` for an end-of-turn id and for vLLM's own end-of-sequence token.
:meth:`VLLMGenerator.close` fails queued requests and shuts the engine down.

Not covered (and not run here: no GPU was available when this was written —
see docs/models.md, "What has and has not run on a GPU"): engines spread over
several nodes, zero-copy weight transfer (vLLM's CUDA-IPC/NCCL
``weight_transfer`` engines), and sharing one GPU between the trainer and vLLM
beyond ``gpu_memory_utilization``.
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tirl.errors import ConfigError, SetupError
from tirl.inference.base import FinishReason, GenerationResult, Request, RequestBatcher, SamplingParams
from tirl.inference.vllm_worker import WORKER_EXTENSION, load_call, shm_dir, write_weights

ENGINE_PROCESS_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM 0.33's max_lora_rank choices (MaxLoRARanks)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise SetupError(
            f"generator=vllm needs vLLM on a CUDA machine ({exc}) — run `make install-vllm` (its own .venv-vllm: "
            "vLLM pins its torch), or serve the model with `vllm serve` and use --generator openai"
        ) from None
    return vllm


def check_engine_process(environ: Mapping[str, str] = os.environ) -> None:
    """Refuse ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: an in-process engine claims torch's default process group."""
    if environ.get(ENGINE_PROCESS_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        raise SetupError(
            f"{ENGINE_PROCESS_ENV}=0 puts vLLM's engine in the trainer's process, where it claims torch's default "
            f"process group (--nproc N needs it) — unset {ENGINE_PROCESS_ENV}"
        )


def engine_model_dir(path: str | Path) -> Path:
    """The full model directory vLLM loads: a LoRA adapter directory (a resumed LoRA run) names its base."""
    from tirl.models.memory import adapter_base, is_adapter_dir

    p = Path(path)
    return adapter_base(p) if is_adapter_dir(p) else p


def lora_rank_cap(rank: int) -> int:
    """VLLM's ``max_lora_rank`` for an adapter of ``rank``: the smallest of :data:`LORA_RANKS` that holds it."""
    for cap in LORA_RANKS:
        if rank <= cap:
            return cap
    raise ConfigError(f"config algo.lora_rank={rank} is invalid with generator=vllm: use at most {LORA_RANKS[-1]}")


def engine_kwargs(
    model_path: str | Path,
    *,
    dtype: str,
    seed: int,
    gpu_memory_utilization: float,
    max_model_len: int | None,
    lora_rank: int = 0,
    has_logprobs_mode: bool = True,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``vllm.LLM`` for a tirl engine (``extra`` adds to them, never replaces these)."""
    kwargs: dict[str, Any] = dict(extra or {})
    kwargs.update(
        model=str(engine_model_dir(model_path)),
        dtype=dtype,
        seed=seed,
        gpu_memory_utilization=gpu_memory_utilization,
        worker_extension_cls=WORKER_EXTENSION,  # collective_rpc("tirl_load_weights", ...) by name
    )
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    if lora_rank > 0:
        kwargs.update(enable_lora=True, max_lora_rank=lora_rank_cap(lora_rank), max_loras=1)
    if has_logprobs_mode:
        kwargs["logprobs_mode"] = "processed_logprobs"
    return kwargs


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


def finish_reason(completion: Any, eos_ids: frozenset[int]) -> FinishReason:
    """Tirl's finish reason of a ``vllm.CompletionOutput``.

    vLLM says ``finish_reason="stop"`` for a stop string (``stop_reason`` the string), a stop token id
    (``stop_reason`` the id) and its own end-of-sequence token (``stop_reason`` None); only the first is
    tirl's ``stop``.
    """
    if completion.finish_reason == "length":
        return "length"
    if isinstance(getattr(completion, "stop_reason", None), str):
        return "stop"
    if completion.finish_reason == "stop":
        return "eos"
    ids = completion.token_ids
    return "eos" if ids and int(ids[-1]) in eos_ids else "stop"


def result_from_output(output: Any, eos_ids: frozenset[int], version: int) -> GenerationResult:
    """Convert a ``vllm.RequestOutput`` (first completion) into a :class:`GenerationResult`."""
    comp = output.outputs[0]
    ids = [int(t) for t in comp.token_ids]
    if comp.logprobs is None or len(comp.logprobs) != len(ids):
        raise RuntimeError("vLLM returned no log-prob per sampled token; SamplingParams(logprobs=0) was ignored")
    lps = [float(entry[tid].logprob) for entry, tid in zip(comp.logprobs, ids, strict=True)]
    return GenerationResult(
        token_ids=ids,
        logprobs=lps,
        finish_reason=finish_reason(comp, eos_ids),
        text=comp.text or "",
        policy_version=version,
    )


class VLLMGenerator:
    """Batched generation with a ``vllm.LLM`` whose engine runs in its own process.

    ``model_path``: a local Hugging Face directory (a LoRA adapter directory loads its base).
    ``eos_ids``: the chat format's end-of-turn ids (also passed as ``stop_token_ids``). ``lora_rank > 0``:
    the engine serves LoRA adapters and :meth:`update_weights` syncs the adapter only. Extra keyword
    arguments go to ``vllm.LLM`` (e.g. ``enforce_eager``). ``llm``: an already-built engine (then
    ``model_path`` is only recorded).
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        eos_ids: Iterable[int],
        seed: int = 0,
        dtype: str = "float32",
        gpu_memory_utilization: float = 0.5,
        max_model_len: int | None = None,
        lora_rank: int = 0,
        batch_window_s: float = 0.005,
        llm: Any = None,
        **extra: Any,
    ) -> None:
        self.vllm = _import_vllm()
        self.model_path = str(model_path)
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.batch_window_s = max(0.0, batch_window_s)
        self.policy_version = 0
        self.tokens_generated = 0
        self.lora_request: Any = None  # the adapter later requests use (LoRA runs, after the first sync)
        self._lora_id = 0
        if llm is None:
            import torch

            if not torch.cuda.is_available():
                raise SetupError("generator=vllm needs a CUDA GPU; none is visible (use generator=hf on CPU)")
            check_engine_process()
            has_mode = "logprobs_mode" in inspect.signature(self.vllm.EngineArgs).parameters
            kwargs = engine_kwargs(
                model_path, dtype=dtype, seed=seed, gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len, lora_rank=lora_rank, has_logprobs_mode=has_mode, extra=extra,
            )  # fmt: skip
            llm = self.vllm.LLM(**kwargs)
        self.llm = llm
        self.sync_dir = Path(tempfile.mkdtemp(prefix="tirl-vllm-sync-", dir=shm_dir()))  # LoRA adapters
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
        outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=self.lora_request)
        results = [result_from_output(o, self.eos_ids, version) for o in outputs]
        self.tokens_generated += sum(len(r.token_ids) for r in results)
        return results

    def update_weights(self, model: Any, version: int) -> None:
        """Load ``model``'s weights (or, for a peft model, its adapter) into the engine; set ``policy_version``.

        Runs on the generation thread between batches and blocks the caller until loaded: call it off the
        event loop (the trainer's ``on_update`` runs in a worker thread).
        """
        from tirl.models.memory import is_lora

        load = self._load_adapter if is_lora(model) else self._load_full
        # the single executor thread also runs generation, so the load never overlaps a batch; the version
        # is set there too, so no batch that starts after the load is labelled with the old one
        self._batcher.executor.submit(load, model, version).result()

    def _load_full(self, model: Any, version: int) -> None:
        path = write_weights(model)  # /dev/shm when it has room for the weights, else the temp directory
        try:
            counts = load_call(path).send(self.llm)
        finally:
            path.unlink(missing_ok=True)
        expected = len(model.state_dict())
        if not counts or any(int(c) != expected for c in counts):
            raise RuntimeError(f"weight sync: the vLLM workers loaded {counts} tensors, expected {expected} each")
        self.llm.reset_prefix_cache()
        self.policy_version = version

    def _load_adapter(self, model: Any, version: int) -> None:
        from vllm.lora.request import LoRARequest

        self._lora_id += 1  # a new id: vLLM caches adapters by id, so an old id would keep the old weights
        path = self.sync_dir / f"adapter-{self._lora_id}"
        model.save_pretrained(str(path))  # peft: adapter_config.json + adapter_model.safetensors
        old = self.lora_request
        self.lora_request = LoRARequest(f"tirl-v{version}", self._lora_id, str(path))
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        self.llm.reset_prefix_cache()
        self.policy_version = version

    def sync_weights(self, model: Any, tokenizer: Any, version: int) -> None:
        """The trainer's ``on_update`` hook: :meth:`update_weights` (the tokenizer does not change)."""
        self.update_weights(model, version)

    def sync_adapter(self, model: Any, version: int) -> None:
        """Sync a peft model's adapter (no merged copy of the model): :meth:`update_weights`."""
        self.update_weights(model, version)

    async def close(self) -> None:
        """Fail queued requests, stop the worker thread, shut the engine process down and remove the sync files."""
        try:
            self._batcher.close()
        finally:
            engine = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
            llm, self.llm = self.llm, None
            try:
                if engine is not None:
                    engine.shutdown()
                elif llm is not None and callable(getattr(llm, "shutdown", None)):
                    llm.shutdown()
            finally:
                shutil.rmtree(self.sync_dir, ignore_errors=True)
