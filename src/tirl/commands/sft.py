"""``tirl sft``: warm-start the built-in tiny model on tir-math demonstrations.

The shipped checkpoint is rebuilt with::

    tirl sft --out src/tirl/assets/tiny-tir --seed 0

and the chain-task checkpoint (``tiny-chain``, started from ``tiny-tir``) with
``tirl sft --env tir-chain --init src/tirl/assets/tiny-tir --out src/tirl/assets/tiny-chain --seed 0 --threads 1``.

``--tools`` offers the env's python tool in every prompt and writes each expert code turn as a Hermes
``<tool_call>`` block (as ``tirl train --set env.tools=true`` runs episodes); it needs a model whose template
renders tools: ``--arch qwen2|llama`` (a fresh model with a byte-level BPE tokenizer, as ``tirl model init`` makes
it: ``--vocab``, ``--corpus``, ``--split-digits``) or ``--init DIR``. The shipped ``qwen2-chain`` is rebuilt by
:data:`tirl.models.loading.QWEN2_CHAIN_SFT_COMMAND` (two stages).

``--kernels portable`` pins ATen's and MKL's CPU dispatch in the process before the model loads
(:func:`tirl.models.kernels.pin_portable`), so the checkpoint's bytes do not depend on the CPU's instruction
set or vendor; the default ``native`` is faster and repeats its bytes on the same CPU type only.

``--env swe-lite`` demonstrates the swe-lite curriculum (training split; the stop-early accuracy is measured
on its validation split) through the real swe-lite env and judge; ``--demos-out FILE`` also writes the
demonstrations (trajectory JSONL with token ids and loss masks) before training.

This module only turns arguments into an :class:`~tirl.sft.SFTConfig` and
:class:`~tirl.sft_recipe.SFTRunOptions`; the run is :func:`tirl.sft_recipe.run_sft`.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

from tirl.config_ranges import check_flag
from tirl.errors import ConfigError
from tirl.models.corpus import CORPORA
from tirl.models.init import ARCHS, ModelSpec
from tirl.models.kernels import KERNELS, pin_portable
from tirl.models.tiny import TinyModelSpec
from tirl.sft_config import SFTConfig

_SFT_OPTIONS = (
    ("steps", "maximum optimizer steps"),
    ("batch_size", "episodes per step"),
    ("lr", "peak learning rate (AdamW, cosine decay)"),
    ("train_tasks", "generated tasks to demonstrate"),
    ("difficulty", "tir-math difficulty (1-5); swe-lite: 3 or more draws the spec curriculum; tir-chain: none"),
    ("eval_every", "steps between held-out evaluations"),
    ("eval_tasks", "held-out tasks per evaluation"),
)


class _WithDefaults(argparse.HelpFormatter):
    """Help that ends each option with its default (``--help`` promised them and showed none)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if any(action.default is no for no in (None, False, argparse.SUPPRESS)) or "default" in text:  # 0 is shown
            return text
        return text + " (default %(default)s)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``tirl sft``; ``--help`` names each default."""
    parser.formatter_class = _WithDefaults
    d = SFTConfig()
    parser.add_argument("--out", required=True, help="directory to write the checkpoint to (save_pretrained layout)")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of the model init, data and sampling")
    parser.add_argument(
        "--env",
        choices=("tir-math", "tir-chain", "swe-lite"),
        default=d.env,
        help="task family to demonstrate (tir-chain: 3-6 tool turns; use --init with the tir-math model; "
        "swe-lite: the bug-fixing curriculum, 5-8 shell turns)",
    )
    parser.add_argument(
        "--demos-out",
        default=None,
        help="also write the demonstrations to this trajectory JSONL (token ids and loss masks included)",
    )
    parser.add_argument("--init", default=None, help="start from this model directory instead of a fresh tiny model")
    parser.add_argument(
        "--tools",
        action="store_true",
        help="offer the env's python tool in every prompt and demonstrate Hermes <tool_call> blocks, as "
        "`tirl train --set env.tools=true` runs them (needs a model with a tool template: --arch qwen2|llama or "
        "--init DIR)",
    )
    parser.add_argument(
        "--arch",
        choices=("tiny", *ARCHS),
        default="tiny",
        help="a fresh model: tiny (Llama over the character tokenizer) or, as `tirl model init` makes it, a "
        "Qwen2/Llama with a byte-level BPE tokenizer and the ChatML/Hermes template",
    )
    parser.add_argument(
        "--vocab", type=int, help=f"BPE vocabulary of a fresh --arch qwen2|llama model (default {_FRESH['vocab']})"
    )
    parser.add_argument(
        "--corpus", choices=CORPORA, help="BPE training text of a fresh --arch qwen2|llama model (default builtin)"
    )
    parser.add_argument(
        "--split-digits", action="store_true", help="BPE: Qwen2's pre-tokenizer (each digit its own token)"
    )
    for name, text in _SFT_OPTIONS:  # options named after SFTConfig fields, with their defaults and types
        default = getattr(d, name)
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default, help=text)
    parser.add_argument(
        "--stop-at-accuracy",
        type=float,
        default=d.stop_at_accuracy,
        help="stop once held-out accuracy (temperature 1) reaches this; negative = never stop early",
    )
    for name, text in (("layers", "layers"), ("hidden", "width"), ("heads", "attention heads")):
        parser.add_argument(f"--{name}", type=int, help=f"{text} of a fresh model (default {_FRESH[name]})")
    parser.add_argument(
        "--copy-steps",
        type=int,
        default=d.copy_steps,
        help="steps of the synthetic copy curriculum before the demonstrations (0 = none; swe-lite: expert episode "
        "prefixes on fresh names, batch --batch-size; others: digits, batch 64)",
    )
    parser.add_argument(
        "--copy-short-share",
        type=float,
        default=None,
        help=f"swe-lite with --copy-steps: share of the copy episodes that are short (the issue, then the locate "
        f"turn; 1 = a short-context drill, the first stage of the tiny-swe chain in docs/training.md; default "
        f"{d.copy_short_share})",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument(
        "--kernels",
        choices=KERNELS,
        default="native",
        help="native: the CPU's fastest kernels (bytes repeat on the same CPU type); portable: ATen's scalar "
        "kernels and MKL's COMPATIBLE branch, pinned in the process (tirl.models.kernels.PORTABLE_ENV), so the "
        "bytes do not depend on the CPU's instruction set or vendor",
    )
    parser.add_argument("--sandbox", choices=("auto", "bwrap", "process"), default="auto", help="sandbox backend")


#: The fresh model's shape and tokenizer when the flag is not given (None in ``args``: a flag given with
#: ``--init``, or a BPE flag with ``--arch tiny``, is refused rather than ignored).
_FRESH: dict[str, object] = {
    "layers": TinyModelSpec().layers, "hidden": TinyModelSpec().hidden_size, "heads": TinyModelSpec().heads,
    "vocab": 2048, "corpus": "builtin",
}  # fmt: skip


def _check_copy_short_share(args: argparse.Namespace) -> None:
    """``--copy-short-share`` is a share, and only given where it acts: swe-lite's copy curriculum (it was ignored)."""
    share = args.copy_short_share
    if share is None:
        return
    if not 0.0 <= share <= 1.0:
        raise ConfigError(f"--copy-short-share {share} is invalid: use a share from 0 to 1")
    if args.env != "swe-lite":
        raise ConfigError(f"--copy-short-share with --env {args.env}: it shapes swe-lite's copy curriculum — drop it")
    if args.copy_steps <= 0:
        raise ConfigError(
            f"--copy-short-share with --copy-steps {args.copy_steps}: no copy curriculum runs — add --copy-steps N "
            "or drop --copy-short-share"
        )


def _fresh_model_flags(args: argparse.Namespace) -> None:
    """Refuse the fresh-model flags that would be ignored, then fill in the defaults of the others.

    ``--layers/--hidden/--heads/--vocab/--corpus/--split-digits`` with ``--init`` (the model and its tokenizer
    come from there), and the BPE tokenizer's ``--vocab/--corpus/--split-digits`` with ``--arch tiny`` (its
    tokenizer is the character one), were ignored without a word.
    """
    given = [f"--{n.replace('_', '-')}" for n in (*_FRESH, "split_digits") if getattr(args, n) not in (None, False)]
    if args.init and given:
        raise ConfigError(f"{', '.join(given)} with --init: the model and its tokenizer come from --init "
                          f"({args.init}); drop {'them' if len(given) > 1 else 'it'}")  # fmt: skip
    bpe = [flag for flag in given if flag in ("--vocab", "--corpus", "--split-digits")]
    if args.arch == "tiny" and bpe:
        are, them = ("are", "them") if len(bpe) > 1 else ("is", "it")
        raise ConfigError(f"{', '.join(bpe)} {are} for a BPE tokenizer, and --arch tiny has the character one: "
                          f"add --arch qwen2 (or llama), or drop {them}")  # fmt: skip
    for name, default in _FRESH.items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def _config(args: argparse.Namespace) -> SFTConfig:
    counts = {"--steps": args.steps, "--batch-size": args.batch_size, "--train-tasks": args.train_tasks,
              "--eval-tasks": args.eval_tasks, "--eval-every": args.eval_every}  # fmt: skip
    for flag, value in counts.items():  # the one given wrong is named (they were listed together)
        if value < 1:
            raise ConfigError(f"{flag} {value} is invalid: use 1 or more")
    if not 1 <= args.difficulty <= 5:
        raise ConfigError(f"--difficulty {args.difficulty} is invalid: use a level from 1 to 5")
    if args.env == "tir-chain" and args.difficulty != 1:  # generate_chain_tasks takes none: it was ignored
        raise ConfigError(f"--difficulty {args.difficulty} with --env tir-chain: its tasks have no levels — drop "
                          "--difficulty")  # fmt: skip
    check_flag("--threads", "trainer.threads", args.threads)
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise ConfigError(f"--lr {args.lr} is invalid: use a positive learning rate, e.g. 1e-3")
    if args.copy_steps < 0:
        raise ConfigError(f"--copy-steps {args.copy_steps} is invalid: use 0 (no copy curriculum) or more")
    if args.stop_at_accuracy is not None and not args.stop_at_accuracy <= 1.0:
        raise ConfigError(
            f"--stop-at-accuracy {args.stop_at_accuracy} is invalid: use an accuracy up to 1, or -1 (never)"
        )
    if args.init and args.arch != "tiny":
        raise ConfigError(f"--arch {args.arch} with --init: the model and its tokenizer come from --init; drop --arch")
    _fresh_model_flags(args)
    if not args.init and args.arch == "tiny":
        for flag, value in (("--layers", args.layers), ("--hidden", args.hidden), ("--heads", args.heads)):
            if value < 1:
                raise ConfigError(f"{flag} {value} is invalid: a fresh tiny model needs 1 or more")
    if not args.init:  # the bounds and memory of tirl model init's models (a traceback, or the machine's memory)
        spec = ModelSpec(layers=args.layers, hidden=args.hidden, heads=args.heads)
        spec.check()
        spec.check_memory(16)  # AdamW: weights, gradients and two moments, in float32
    check_flag("--seed", "trainer.seed", args.seed)
    check_flag("--train-tasks", "env.eval_size", args.train_tasks)  # 99999999999 generated without end
    check_flag("--eval-tasks", "env.eval_size", args.eval_tasks)
    _check_copy_short_share(args)
    if args.tools and args.env == "swe-lite":
        raise ConfigError("--tools with --env swe-lite is not supported: its experts write bash fences; drop --tools")
    if args.tools and args.arch == "tiny" and not args.init:
        raise ConfigError("--tools needs a model with a tool template: add --arch qwen2 (or --init DIR)")
    stop = args.stop_at_accuracy if args.stop_at_accuracy is not None and args.stop_at_accuracy >= 0 else None
    same = ("steps", "batch_size", "lr", "train_tasks", "difficulty", "seed", "eval_every", "eval_tasks", "env")
    if args.env == "swe-lite":  # 5-8 shell turns with tool output: the turns and caps tirl train uses for it
        from tirl.config_presets import ENV_PRESETS

        preset = ENV_PRESETS["swe-lite"]
        return SFTConfig(
            **{name: getattr(args, name) for name in same},
            stop_at_accuracy=stop,
            copy_steps=max(0, args.copy_steps),
            copy_batch_size=args.batch_size,  # its copy episodes are ~700 tokens: the demonstrations' batch
            copy_short_share=SFTConfig.copy_short_share if args.copy_short_share is None else args.copy_short_share,
            tools=args.tools,
            max_turns=preset["env.max_turns"],
            max_new_tokens=preset["generation.max_new_tokens"],
            max_total_tokens=preset["generation.max_total_tokens"],
            log=lambda line: print(line, flush=True),
        )
    return SFTConfig(
        **{name: getattr(args, name) for name in same},
        stop_at_accuracy=stop,
        copy_steps=max(0, args.copy_steps),
        tools=args.tools,
        max_turns=6 if args.env == "tir-chain" else SFTConfig.max_turns,
        log=lambda line: print(line, flush=True),
    )


def _bpe_spec(args: argparse.Namespace) -> ModelSpec | None:
    """The fresh BPE model of ``--arch qwen2|llama`` (checked: a bad size is one error line), else None."""
    if args.arch == "tiny" or args.init:
        return None
    spec = ModelSpec(
        arch=args.arch, layers=args.layers, hidden=args.hidden, vocab=args.vocab, heads=args.heads, seed=args.seed,
        corpus=args.corpus, split_digits=args.split_digits,
    )  # fmt: skip
    spec.check()
    return spec


def run(args: argparse.Namespace) -> int:
    """Build demonstrations, train, evaluate, save (:func:`tirl.sft_recipe.run_sft`)."""
    from tirl.sft_recipe import SFTRunOptions, run_sft

    cfg = _config(args)
    if args.kernels == "portable":  # before the first kernel runs: ATen and MKL fix their dispatch then
        pin_portable()
    spec = TinyModelSpec(
        hidden_size=args.hidden,
        layers=args.layers,
        heads=args.heads,
        kv_heads=args.heads,
        intermediate_size=3 * args.hidden,
    )
    command = "tirl sft " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 else "tirl sft"
    options = SFTRunOptions(
        out=Path(args.out), init=args.init, spec=spec, threads=args.threads, sandbox=args.sandbox, command=command,
        demos_out=Path(args.demos_out) if args.demos_out else None, bpe=_bpe_spec(args),
    )  # fmt: skip
    run_sft(cfg, options)
    return 0
