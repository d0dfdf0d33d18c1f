"""``tirl sft --out``: only over its own earlier checkpoint, and swapped in whole (tirl.sft_checkpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tirl.cli import main
from tirl.errors import OutputError
from tirl.models.tiny import TinyModelSpec, build_tiny_model
from tirl.sft_checkpoint import CHECKPOINT_FILES, check_sft_out, save_sft_checkpoint

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ("tiny-tir", "tiny-chain", "tiny-swe", "qwen2-chain")


def _fill(directory: Path, names: list[str], card: str | None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("x")
    if card is not None:
        (directory / "README.md").write_text(card)
    return directory


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("asset", ASSETS)
def test_every_shipped_asset_can_be_rebuilt_in_place(asset: str) -> None:
    check_sft_out(ROOT / "src/tirl/assets" / asset)  # the README's rebuild commands write --out over them


def test_new_empty_and_earlier_sft_outputs_are_accepted(tmp_path: Path) -> None:
    check_sft_out(tmp_path / "absent")
    check_sft_out(_fill(tmp_path / "empty", [], None))
    card = "# warm: a warm-started tirl policy\n\nRebuild: `tirl sft --out warm --seed 0`\n"
    check_sft_out(_fill(tmp_path / "warm", ["config.json", "model.safetensors", "tokenizer.json"], card))


@pytest.mark.parametrize(
    ("names", "card", "problem"),
    [
        (["config.json", "metrics.jsonl", "summary.json"], None, "holds files that are not a checkpoint's (metrics"),
        (["config.json", "model.safetensors", "tokenizer.json"], None, "a checkpoint that tirl sft did not write"),
        (["config.json", "model.safetensors"], "# my model\n", "a checkpoint that tirl sft did not write"),
        (["notes.txt", "a", "b", "c", "d"], None, "(a, b, c, d and 1 more)"),
    ],
)
def test_anything_else_is_refused_and_left_alone(
    tmp_path: Path, names: list[str], card: str | None, problem: str
) -> None:
    target = _fill(tmp_path / "out", names, card)
    before = _snapshot(target)
    with pytest.raises(OutputError, match="give a new or empty directory to --out") as info:
        check_sft_out(target)
    assert problem in str(info.value)
    assert _snapshot(target) == before


def test_a_run_directory_with_checkpoints_is_refused(tmp_path: Path) -> None:
    run = _fill(tmp_path / "run", ["config.json"], None)
    (run / "checkpoints" / "step-1").mkdir(parents=True)
    with pytest.raises(OutputError, match=r"not a checkpoint's \(checkpoints\)"):
        check_sft_out(run)


def test_tirl_sft_into_a_run_directory_is_one_error_line_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _fill(tmp_path / "run", ["config.json", "metrics.jsonl", "trajectories.jsonl"], None)
    before = _snapshot(run)
    code = main(["sft", "--out", str(run), "--steps", "1", "--sandbox", "process", "--threads", "1"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {run}: holds files that are not a checkpoint's (metrics.jsonl, trajectories")
    assert _snapshot(run) == before


def _tiny() -> tuple[object, object]:
    return build_tiny_model(TinyModelSpec(hidden_size=16, layers=1, heads=1, kv_heads=1, intermediate_size=16))


def test_the_swap_replaces_the_old_checkpoint_whole_and_leaves_no_sibling(tmp_path: Path) -> None:
    model, tok = _tiny()
    out = _fill(tmp_path / "warm", ["model.safetensors", "vocab.json"], "old card: tirl sft\n")
    save_sft_checkpoint(model, tok, out, lambda d: (d / "README.md").write_text("new card: tirl sft\n"))
    assert (out / "README.md").read_text() == "new card: tirl sft\n"
    assert "vocab.json" not in {p.name for p in out.iterdir()}  # the old directory's files went with it
    assert {p.name for p in out.iterdir()} <= CHECKPOINT_FILES and (out / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["warm"]
    check_sft_out(out)  # and it can be written over again


def test_a_failed_save_leaves_the_old_checkpoint_as_it_was(tmp_path: Path) -> None:
    model, tok = _tiny()
    out = _fill(tmp_path / "warm", ["model.safetensors"], "old card: tirl sft\n")
    before = _snapshot(out)

    def broken_card(_: Path) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        save_sft_checkpoint(model, tok, out, broken_card)
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["warm"]
