"""Where ``tirl sft`` writes its checkpoint: only over its own earlier checkpoint, and never half-written.

``tirl sft --out DIR`` is rerun over its own output on purpose (the shipped assets are rebuilt in place:
``--out src/tirl/assets/tiny-tir``), so an existing directory is not refused as such. What is refused,
before any demonstration is built (:func:`check_sft_out`): a directory that holds anything but the files of
a checkpoint (a run directory: ``metrics.jsonl``, ``checkpoints/``; a user's own files), or a checkpoint
that ``tirl sft`` did not write (no card naming ``tirl sft``: a ``tirl model init`` model, a downloaded
one). :func:`save_sft_checkpoint` writes the model, tokenizer and card into a new sibling directory and
swaps it in, so ``DIR`` is at every moment the whole old checkpoint or the whole new one (a crash between
the two renames leaves the old one beside it as ``.DIR.old.*``).

Not covered: two ``tirl sft`` processes writing the same ``--out`` at once (the later swap wins).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tirl.errors import OutputError
from tirl.fileio import staged_dir
from tirl.models.tiny import save_policy

#: the names a saved checkpoint may hold (the Hugging Face layout of any tokenizer, and the card)
CHECKPOINT_FILES = frozenset(
    {
        "README.md",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "chat_template.jinja",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "tokenizer.model",
    }
)
#: what the card of a checkpoint written by ``tirl sft`` names (its rebuild command, or the stages' commands)
CARD_MARK = "tirl sft"
_CARD_HEAD = 8192  # the mark is in the card's first lines


def _by_tirl_sft(card: Path) -> bool:
    try:
        with card.open("rb") as f:
            head = f.read(_CARD_HEAD)
    except OSError:
        return False
    return CARD_MARK in head.decode("utf-8", errors="replace")


def check_sft_out(out: Path) -> None:
    """Refuse an ``--out`` that holds anything but an earlier ``tirl sft`` checkpoint (nothing is written)."""
    if not out.is_dir():
        return
    names = sorted(p.name for p in out.iterdir())
    if not names:
        return
    foreign = [n for n in names if n not in CHECKPOINT_FILES]
    fix = "give a new or empty directory to --out (tirl sft replaces only a checkpoint it wrote)"
    if foreign:
        shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
        raise OutputError(str(out), None, f"holds files that are not a checkpoint's ({shown})", fix)
    if not _by_tirl_sft(out / "README.md"):
        raise OutputError(str(out), None, "holds a checkpoint that tirl sft did not write (no card naming it)", fix)


def save_sft_checkpoint(model: Any, tokenizer: Any, out: Path, write_card: Callable[[Path], None]) -> None:
    """Save the model, the tokenizer and the card (``write_card(directory)``) beside ``out``, then swap them in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with staged_dir(out, replace=True, fix="give --out a path in a writable directory") as tmp:
        save_policy(model, tokenizer, tmp)
        write_card(tmp)


__all__ = ["CARD_MARK", "CHECKPOINT_FILES", "check_sft_out", "save_sft_checkpoint"]
