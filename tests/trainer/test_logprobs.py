"""Chunked target log-probs against the plain full-vocabulary log-softmax, and the memory they keep."""

from __future__ import annotations

import pytest
import torch
from tests.reference import full_vocab_logprobs, logprobs_loop

from tirl.models.memory import release_free_memory
from tirl.trainer.logprobs import target_logprobs


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.6, 0.0])
@pytest.mark.parametrize("chunk", [1, 40, 1 << 24])  # one position per chunk, a few, all at once
def test_values_and_gradients_equal_the_plain_log_softmax(temperature: float, chunk: int) -> None:
    gen = torch.Generator().manual_seed(int(temperature * 10) + chunk % 97)
    logits = (3 * torch.randn(3, 7, 13, generator=gen)).requires_grad_()
    targets = torch.randint(0, 13, (3, 7), generator=gen)
    weights = torch.randn(3, 7, generator=gen)  # a non-uniform upstream gradient

    ref_lp, ref_ent = logprobs_loop(logits, targets, temperature)
    (ref_grad,) = torch.autograd.grad((ref_lp * weights).sum(), logits)
    lp, ent = target_logprobs(logits, targets, temperature, chunk_elements=chunk)
    (grad,) = torch.autograd.grad((lp * weights).sum(), logits)

    torch.testing.assert_close(lp, ref_lp, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent, ref_ent.detach(), rtol=0, atol=1e-5)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-6)
    assert lp.dtype == torch.float32 and not ent.requires_grad
    # and the vectorised full-vocabulary version agrees too (what the trainer used before)
    full_lp, full_ent = full_vocab_logprobs(logits.detach(), targets, temperature)
    torch.testing.assert_close(lp.detach(), full_lp, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent, full_ent, rtol=0, atol=1e-5)


def test_bf16_logits_give_float32_logprobs_and_a_bf16_gradient() -> None:
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(2, 5, 17, generator=gen)
    logits = base.to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, 17, (2, 5), generator=gen)
    lp, _ = target_logprobs(logits, targets, 0.8, chunk_elements=17)
    ref_logits = logits.detach().float().requires_grad_()
    ref_lp, _ = logprobs_loop(ref_logits, targets, 0.8)
    (ref_grad,) = torch.autograd.grad(ref_lp.sum(), ref_logits)
    (grad,) = torch.autograd.grad(lp.sum(), logits)
    assert lp.dtype == torch.float32 and grad.dtype == torch.bfloat16
    torch.testing.assert_close(lp, ref_lp.detach(), rtol=0, atol=1e-5)
    torch.testing.assert_close(grad.float(), ref_grad, rtol=0, atol=1e-2)  # bf16 rounding of the gradient


def test_entropy_off_and_inference_mode() -> None:
    logits = torch.randn(2, 4, 9)
    targets = torch.randint(0, 9, (2, 4))
    with torch.inference_mode():
        lp, ent = target_logprobs(logits, targets, entropy=False)
    torch.testing.assert_close(lp, logprobs_loop(logits, targets, 1.0)[0], rtol=0, atol=1e-5)
    assert torch.equal(ent, torch.zeros(2, 4))


def test_autograd_keeps_the_logits_and_no_vocabulary_sized_copy() -> None:
    logits = torch.randn(4, 6, 50, requires_grad=True)
    targets = torch.randint(0, 50, (4, 6))
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        target_logprobs(logits, targets, 0.9, chunk_elements=200)
    big = [t for t in saved if t.numel() >= logits.numel()]
    assert len(big) == 1 and big[0].data_ptr() == logits.data_ptr()  # only the input logits themselves
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        saved.clear()
        full_vocab_logprobs(logits, targets, 0.9)  # the plain version keeps a [B, T, V] log-softmax
    assert any(t.numel() >= logits.numel() and t.data_ptr() != logits.data_ptr() for t in saved)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="want"):
        target_logprobs(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="chunk_elements"):
        target_logprobs(torch.zeros(1, 2, 3), torch.zeros(1, 2, dtype=torch.long), chunk_elements=0)


def _rss_mb() -> float:
    # smaps_rollup counts pages exactly; VmRSS lags by a counter batch per CPU (tens of MB on a many-core CI machine)
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                return float(line.split()[1]) / 1024
    raise AssertionError("no Rss")


@pytest.mark.skipif(not release_free_memory(), reason="not glibc: malloc_trim is unavailable (documented no-op)")
def test_release_free_memory_returns_freed_heap_pages() -> None:
    # 2400 blocks of 48 KB (below glibc's mmap threshold: they live on the heap); keep every 8th, free the rest
    blocks = [bytearray(48 * 1024) for _ in range(2400)]
    for b in blocks:
        b[::4096] = b"\x01" * len(b[::4096])  # touch every page
    kept = blocks[::8]
    del blocks
    before = _rss_mb()
    assert release_free_memory()
    after = _rss_mb()
    assert before - after > 40, (before, after)  # ~98 MB were freed but held by the heap until the trim
    assert all(k[0] == 1 for k in kept)  # live blocks are untouched
