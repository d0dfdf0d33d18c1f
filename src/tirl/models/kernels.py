"""What a checkpoint's bytes depend on besides its command: the library versions and the CPU's kernels.

``tirl sft`` is byte-identical from run to run on one machine, but not across machines: torch's CPU kernels
are chosen by the CPU's instruction set (``ATEN_CPU_CAPABILITY``: AVX-512, AVX2 or the scalar default), each
sums in its own order, and a few hundred training steps carry the last bit of difference into every weight
(measured: the quick swe-lite recipe writes other weights at ``avx2`` than at ``avx512`` on the same machine;
the five-stage ``tiny-swe`` chain rerun on another CPU gave another model, docs/training.md). The card of
every checkpoint ``tirl sft`` writes therefore names them (:func:`build_line`), so a reader whose rebuild
differs can tell whether the kernels did.

Covered: torch's and transformers' versions, ATen's CPU capability as torch reports it (the environment
variable's override included), the CPU model from ``/proc/cpuinfo``. Not covered: MKL's and oneDNN's own
dispatch (set by ``MKL_CBWR`` and ``ONEDNN_MAX_CPU_ISA``; on the AMD machine measured, capping both to AVX2
changed no bytes), the thread count (the command holds it), GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True, slots=True)
class BuildKernels:
    """The versions and kernels one process trains with."""

    torch: str
    transformers: str
    cpu_capability: str
    cpu: str

    def line(self) -> str:
        """One card line, e.g. ``torch 2.13.0+cpu (ATen CPU kernels AVX512), transformers 5.25.0, AMD EPYC``."""
        kernels = f"ATen CPU kernels {self.cpu_capability}"
        return f"torch {self.torch} ({kernels}), transformers {self.transformers}, {self.cpu}"


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
        cpu=cpu_model(cpuinfo),
    )


def build_line() -> str:
    """The card's ``built with`` line for this process."""
    return build_kernels().line()


__all__ = ["CPUINFO", "BuildKernels", "build_kernels", "build_line", "cpu_model", "package_version"]
