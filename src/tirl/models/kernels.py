"""What a checkpoint's bytes depend on besides its command: the library versions and the CPU's kernels.

``tirl sft`` is byte-identical from run to run on one machine, but not across machines: torch's CPU kernels
are chosen by the CPU's instruction set (``ATEN_CPU_CAPABILITY``: AVX-512, AVX2 or the scalar default) and
MKL's matrix products by the CPU's vendor and generation (``MKL_CBWR``), each sums in its own order, and a few
hundred training steps carry the last bit of difference into every weight (measured on one AMD EPYC: the
quick swe-lite recipe writes four different sets of weights at the native kernels, at ATen ``avx2``, at ATen
``default``, and at ATen ``default`` with ``MKL_CBWR=COMPATIBLE``; the five-stage ``tiny-swe`` chain rerun on
another machine gave another model, docs/training.md). The card of every checkpoint ``tirl sft`` writes
therefore names them (:func:`build_line`), so a reader whose rebuild differs can tell whether the kernels did.

**Portable kernels** (``tirl sft --kernels portable``, :func:`pin_portable`): ATen's scalar ``default``
kernels, MKL's ``COMPATIBLE`` branch (its SSE2 code, documented by Intel as reproducible on every Intel and
compatible processor) and oneDNN capped at SSE4.1 (:data:`PORTABLE_ENV`), set in the process before torch
runs its first kernel. Measured here: the pin overrides whatever the environment asked for (the same bytes
under ``ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2`` as with nothing set) and equals setting the three variables
before the process starts. Not measured: bytes on a second CPU model (no second machine type was at hand);
what would still differ there is code outside these three dispatchers.

Covered: torch's and transformers' versions, ATen's CPU capability as torch reports it (the environment
variable's override included), MKL's branch as the environment sets it (``auto`` when unset), the CPU model
from ``/proc/cpuinfo``. Not covered: the thread count (the command holds it), GPUs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

from tirl.errors import ConfigError

CPUINFO = Path("/proc/cpuinfo")
#: ``tirl sft --kernels``: the CPU's own fastest kernels, or the pinned ones below
Kernels = Literal["native", "portable"]
KERNELS: tuple[Kernels, ...] = ("native", "portable")
#: what :func:`pin_portable` sets: ATen's scalar kernels, MKL's SSE2 branch, oneDNN capped at SSE4.1
PORTABLE_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
}


@dataclass(frozen=True, slots=True)
class BuildKernels:
    """The versions and kernels one process trains with."""

    torch: str
    transformers: str
    cpu_capability: str
    mkl_cbwr: str
    cpu: str

    def line(self) -> str:
        """One card line: ``torch 2.13.0+cpu (ATen CPU kernels AVX512, MKL branch auto), transformers 5.25.0, CPU``."""
        kernels = f"ATen CPU kernels {self.cpu_capability}, MKL branch {self.mkl_cbwr}"
        return f"torch {self.torch} ({kernels}), transformers {self.transformers}, {self.cpu}"

    @property
    def portable(self) -> bool:
        """Whether these are :data:`PORTABLE_ENV`'s kernels (ATen ``DEFAULT``, MKL ``COMPATIBLE``)."""
        return self.cpu_capability == "DEFAULT" and self.mkl_cbwr == PORTABLE_ENV["MKL_CBWR"]


def cpu_model(cpuinfo: Path = CPUINFO) -> str:
    """The first ``model name`` in ``cpuinfo`` (``unknown CPU`` when the file or the field is missing)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown CPU"
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name" and value.strip():
            return value.strip()
    return "unknown CPU"


def package_version(package: str) -> str:
    """The installed distribution's version, or ``not installed``."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def build_kernels(cpuinfo: Path = CPUINFO) -> BuildKernels:
    """The torch, transformers, ATen CPU capability and CPU of the running process (imports torch)."""
    import torch

    return BuildKernels(
        torch=torch.__version__,
        transformers=package_version("transformers"),
        cpu_capability=str(torch.backends.cpu.get_cpu_capability()),
        mkl_cbwr=os.environ.get("MKL_CBWR", "auto"),
        cpu=cpu_model(cpuinfo),
    )


def pin_portable(option: str = "--kernels portable") -> BuildKernels:
    """Set :data:`PORTABLE_ENV` in this process and check that ATen took it; the kernels now in use.

    Must run before torch's first CPU kernel (ATen fixes its capability then, MKL its branch at its first
    call): ``tirl sft`` calls it before it loads a model. A process that already ran kernels raises
    :class:`~tirl.errors.ConfigError` (ATen's capability cannot change any more) rather than train on
    kernels other than the ones its card would name.
    """
    os.environ.update(PORTABLE_ENV)
    kernels = build_kernels()
    if not kernels.portable:
        raise ConfigError(
            f"{option}: ATen's CPU kernels were already fixed at {kernels.cpu_capability} in this "
            "process; run the command in a fresh process, or set "
            + " ".join(f"{k}={v}" for k, v in PORTABLE_ENV.items())
            + " before it starts"
        )
    return kernels


def build_line() -> str:
    """The card's ``built with`` line for this process."""
    return build_kernels().line()


__all__ = [
    "CPUINFO",
    "KERNELS",
    "PORTABLE_ENV",
    "BuildKernels",
    "Kernels",
    "build_kernels",
    "build_line",
    "cpu_model",
    "package_version",
    "pin_portable",
]
