"""``tirl model``: make a small model (``init``), check a model directory (``check``), merge a LoRA adapter (``merge``).

``tirl model init --arch qwen2|llama --out DIR [--layers N --hidden N --vocab N --heads N --seed N]
[--corpus builtin|tasks] [--split-digits]``
writes a model, a byte-level BPE tokenizer and tirl's chat template with tool
calls (see :mod:`tirl.models.init`); with no size flags the model is tiny.
The directory is written whole or not at all; an existing non-empty ``DIR``
is refused.

``tirl model check DIR [--tools]`` loads the directory the way ``tirl train
--model DIR`` does and prints what it found (architecture, parameters,
vocabulary, chat template, tool support); anything missing is one
``error:`` line with the fix, exit 2.

``tirl model merge ADAPTER_DIR --out DIR`` writes a standalone model (the
LoRA adapter of a checkpoint folded into its base model, plus the
tokenizer) that loads without peft — the export of a LoRA run
(:func:`tirl.models.memory.export_merged`); written whole or not at all.
"""

from __future__ import annotations

import argparse
import time

from tirl.cli import elapsed
from tirl.models.corpus import CORPORA
from tirl.models.init import ARCHS, ModelSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``tirl model init`` and ``tirl model check``."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="{init,check,merge}")
    d = ModelSpec()
    init = sub.add_parser("init", help="write a small random-weight model with a BPE tokenizer and a tool template")
    init.add_argument("--arch", choices=ARCHS, default=d.arch, help=f"architecture (default {d.arch})")
    init.add_argument("--out", required=True, help="directory to create (must not exist or be empty)")
    init.add_argument("--layers", type=int, default=d.layers, help=f"transformer layers (default {d.layers})")
    init.add_argument("--hidden", type=int, default=d.hidden, help=f"hidden width (default {d.hidden})")
    init.add_argument("--vocab", type=int, default=d.vocab, help=f"vocabulary size (default {d.vocab})")
    init.add_argument(
        "--heads", type=int, default=0, help="attention heads (0, the default: hidden/64, hidden/16 under 256)"
    )
    init.add_argument("--seed", type=int, default=d.seed, help="seed of the weights (default 0)")
    init.add_argument(
        "--corpus",
        choices=CORPORA,
        default=d.corpus,
        help="tokenizer training text: builtin (generic prose, arithmetic, code) or tasks (tirl's task "
        "generators and expert episodes, tool calls included) (default builtin)",
    )
    init.add_argument(
        "--split-digits", action="store_true", help="pre-tokenize as Qwen2 does: each digit its own token"
    )
    check = sub.add_parser("check", help="load a model directory and report its tokenizer, template and tools")
    check.add_argument("path", help="a local Hugging Face model directory")
    check.add_argument("--tools", action="store_true", help="also require a template with tool support")
    merge = sub.add_parser("merge", help="fold a LoRA adapter directory into its base model: a standalone model")
    merge.add_argument("adapter", help="an adapter directory (a LoRA run's checkpoints/step-N/model)")
    merge.add_argument("--out", required=True, help="directory to create (must not exist or be empty)")


def _init(args: argparse.Namespace) -> int:
    from tirl.models.init import init_model

    spec = ModelSpec(
        arch=args.arch, layers=args.layers, hidden=args.hidden, vocab=args.vocab, heads=args.heads, seed=args.seed,
        corpus=args.corpus, split_digits=args.split_digits,
    )  # fmt: skip
    spec.check()
    t0 = time.perf_counter()
    path = init_model(spec, args.out)
    written = time.perf_counter() - t0
    _describe(str(path), need_tools=True)
    print(f"wrote {path} in {elapsed():.1f} s (the whole command; writing the model: {written:.1f} s)")
    return 0


def _describe(path: str, *, need_tools: bool) -> None:
    from tirl.models.loading import load_policy

    policy = load_policy(path, need_tools=need_tools)
    cfg = policy.model.config
    params = sum(p.numel() for p in policy.model.parameters())
    support = policy.chat.tool_support
    print(
        f"{path}: {cfg.model_type} ({type(policy.model).__name__}), {params:,} parameters, "
        f"{cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, vocabulary {len(policy.tokenizer)} "
        f"(embedding rows {cfg.vocab_size})"
    )
    tools = "yes (Hermes <tool_call> blocks)" if support.ok and support.hermes else "yes" if support.ok else "no"
    if not support.ok:
        tools += f" — does not render {'; '.join(support.missing)}"
    print(f"chat template: {type(policy.chat).__name__}; tool calls: {tools}")


def _merge(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tirl.errors import InputError
    from tirl.fileio import staged_dir
    from tirl.models.init import check_out
    from tirl.models.loading import load_policy
    from tirl.models.memory import export_merged, is_adapter_dir

    src, out = Path(args.adapter).expanduser(), Path(args.out).expanduser()
    if not is_adapter_dir(src):
        raise InputError(
            str(src),
            None,
            "is not a LoRA adapter directory (no adapter_config.json)",
            "give a LoRA run's checkpoints/step-N/model",
        )
    check_out(out)
    policy = load_policy(src, train_adapter=True)
    with staged_dir(out, replace=False, fix="give --out a path in a writable directory") as tmp:
        export_merged(policy.model, policy.tokenizer, tmp)
    print(f"wrote {out}: {src} merged into its base model")
    return 0


def _check_exists(path: str) -> None:
    """A missing ``DIR`` of ``tirl model check DIR``, refused before torch loads with a fix that names this command.

    (The loader's own message names ``--model (--init)``, the options of train and sft.)
    """
    from pathlib import Path

    from tirl.errors import InputError

    if not Path(path).expanduser().exists():
        fix = "give `tirl model check DIR` a local Hugging Face model directory, e.g. one from `tirl model init"
        raise InputError(path, None, "does not exist", fix + " --out DIR`")


def run(args: argparse.Namespace) -> int:
    """Dispatch to the sub-action."""
    if args.action == "check":
        _check_exists(args.path)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one summary line instead of per-shard progress bars
    if args.action == "init":
        return _init(args)
    if args.action == "merge":
        return _merge(args)
    _describe(args.path, need_tools=args.tools)
    return 0
