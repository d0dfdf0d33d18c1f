"""The swe-lite copy curriculum (:mod:`tirl.sft_swe_copy`) against plain references and the real env.

* the simulated tool outputs and the rendered token ids equal a real demonstration's: pool tasks' expert
  episodes run through the real swe-lite env, sandbox (bubblewrap where it works) and judge, prefix by prefix;
* every target copies what its context shows: the locate turn's package and function names are in the issue
  text, the fix's line number and buggy text in a tool output before it; the fix, run by real ``sed`` or
  ``python3`` on the buggy module, gives back the correct module;
* no package or function name of the pool (any split) occurs in an episode;
* loss mask 1 exactly on the assistant turns; ``tirl sft --env swe-lite`` warms up on this curriculum;
* :func:`~tirl.sft_swe_copy.copy_check`: ``greedy_hits`` against a plain loop over the rows, and the whole
  check against a stand-in model that predicts each token of its input (every turn exact) or all but one.

About 10 s: four real episodes through the sandbox, a few hundred synthetic ones.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tests.models.conftest import swe_demonstrations

from tirl.envs.tasks.swe_curriculum import SYLLABLES, bug_of, generate_curriculum, pools
from tirl.envs.tasks.swe_experts import curriculum_expert_solution
from tirl.models.chat_format import SimpleChatFormat
from tirl.models.tiny import TinyModelSpec, build_tiny_model
from tirl.sft_config import SFTConfig
from tirl.sft_swe_copy import (
    COPY_CHECK_SEED,
    SHORT_SHARE,
    copy_check,
    copy_episode,
    episode_ids,
    expert_turns,
    fresh_program,
    greedy_hits,
    pool_names,
    reserved_names,
    swe_copy_curriculum,
)

TINY = TinyModelSpec(hidden_size=16, layers=1, heads=1, kv_heads=1, intermediate_size=16)


@pytest.fixture(scope="module")
def chat() -> SimpleChatFormat:
    return SimpleChatFormat(build_tiny_model(TINY)[1])


def _way(task) -> tuple[int, bool] | None:  # type: ignore[no-untyped-def]
    """(locate way, python fix) when the expert's script starts with :func:`expert_turns`' turns, else None."""
    script = curriculum_expert_solution(task)
    for way in (0, 1, 2):
        for python in (False, True):
            mine = [turn for turn, _ in expert_turns(task, way, check=True, python=python)]
            if script[: len(mine)] == mine:
                return way, python
    return None


def test_simulated_outputs_equal_the_real_envs(chat: SimpleChatFormat) -> None:
    tasks = [t for t in generate_curriculum(60, seed=5) if " returns " in t.prompt]
    picked: list = []  # type: ignore[type-arg]
    for task in tasks:  # one task per locate way, and one python fix
        way = _way(task)
        if way is not None and (
            way[0] not in {w for _, (w, _) in picked} or (way[1] and not any(p for _, (_, p) in picked))
        ):
            picked.append((task, way))
    assert {w for _, (w, _) in picked} == {0, 1, 2} and any(p for _, (_, p) in picked)
    demos = {d.group: d for d in swe_demonstrations([t for t, _ in picked], chat, "tirl-swe-copy-")}
    assert len(demos) == len(picked)
    for task, (way, python) in picked:
        ids, mask = episode_ids(chat, task.prompt, expert_turns(task, way, check=True, python=python))
        demo = demos[task.id]
        assert chat.tokenizer.decode(demo.token_ids[: len(ids)]) == chat.tokenizer.decode(ids)  # readable diff
        assert demo.token_ids[: len(ids)] == ids, task.id  # prompt, turns and every tool output, token for token
        assert demo.loss_mask[: len(ids)] == mask, task.id


def _context_and_target(task, turns):  # type: ignore[no-untyped-def]
    return task.prompt + "".join(f"{t}\n{o}" for t, o in turns[:-1]), turns[-1][0]


def _run_fix(task, command: str, tmp: Path) -> str:  # type: ignore[no-untyped-def]
    """Write the task's workspace, run ``command`` and then ``python3 check.py`` there; the check's output."""
    for name, text in task.data["files"].items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text, encoding="utf-8")
    body = command.removeprefix("```bash\n").removesuffix("\n```")
    subprocess.run(["bash", "-c", body], cwd=tmp, check=True, capture_output=True, timeout=30)
    return subprocess.run(["python3", "check.py"], cwd=tmp, capture_output=True, text=True, timeout=30).stdout


def test_every_target_copies_from_its_context(tmp_path: Path) -> None:
    rng = random.Random("test")
    kinds = {"locate": 0, "fix": 0}
    for i in range(90):
        task, turns = copy_episode(rng)
        context, target = _context_and_target(task, turns)
        bug, module = bug_of(task), task.data["module"]
        package = module.split("/")[0]
        if "grep -n" in target or "cat -n" in target:  # locate: names copied from the issue text
            kinds["locate"] += 1
            assert f"`{package}`" in task.prompt and module in task.prompt and module in target
            if "grep" in target:
                assert f'"def {bug.function}("' in target and f"`{bug.function}(" in task.prompt
        elif "sed -n" in target:  # the range starts at the line the grep printed
            start = re.search(r"sed -n '(\d+),", target)
            assert start and f"\n{start.group(1)}:def {bug.function}(" in context
        else:  # the fix: its line is on screen, and real sed / python3 gives back the correct module
            kinds["fix"] += 1
            shown = task.data["files"][module].split("\n")[bug.line - 1]
            assert shown in context
            assert _run_fix(task, target, tmp_path / str(i)) == "all checks passed\n"
    assert kinds["locate"] > 15 and kinds["fix"] > 15


def test_no_pool_name_occurs() -> None:
    names = pool_names()
    assert len(names) > 300 and {t.data["program"] for t in pools()["validation"]} <= names
    rng = random.Random("names")
    for _ in range(200):
        task, turns = copy_episode(rng)
        text = task.prompt + "".join(t + o for t, o in turns) + "".join(task.data["files"].values())
        text = text.replace("Traceback (most recent call last)", "")  # Python's words: "last" is a pool name
        assert not set(re.findall(r"[A-Za-z_]\w*", text)) & names, task.prompt


def test_fresh_names_mix_random_letters_and_never_take_a_reserved_name() -> None:
    """Half the words random letters (what taught tiny-tir to copy a whole name), no keyword/builtin/module."""
    import builtins
    import keyword

    assert {"len", "sum", "json", "re", "abc", "for", "match"} <= reserved_names()
    assert {*keyword.kwlist, *dir(builtins), *sys.stdlib_module_names} <= reserved_names()
    rng = random.Random("fresh")
    syllables = re.compile(f"(?:{'|'.join(SYLLABLES)})+")
    packages, stems = [], []
    for _ in range(400):
        program = fresh_program(rng)
        packages.append(program.package)
        stems += [f.name for f in program.funcs]
    names = set(packages) | set(stems)
    assert not names & reserved_names() and not names & pool_names()
    lettered = sum(not syllables.fullmatch(p) for p in packages) / len(packages)
    assert 0.4 <= lettered <= 0.6, lettered  # RANDOM_LETTERS = 0.5 (a random word can be syllables: rarely)


def test_half_the_curriculum_is_short_episodes_of_the_issue_and_its_locate_turn(chat: SimpleChatFormat) -> None:
    episodes = swe_copy_curriculum(200, chat, seed=5)
    texts = [chat.tokenizer.decode(t.token_ids) for t in episodes]
    short = [t for t in texts if "<|system|>" not in t]
    assert 0.4 <= len(short) / len(texts) <= 0.6  # SHORT_SHARE = 0.5
    for text in short:
        issue, turn = text.split("<|assistant|>")
        assert turn.count("```bash") == 1 and ("grep -n" in turn or "cat -n" in turn), turn
        package = re.search(r"in the `(\w+)` package", issue)
        assert package and f"{package.group(1)}/core.py" in turn  # copied from the issue right before it
    assert all("<|system|>" in t for t in texts if t not in short)


def test_short_share_sets_the_share_of_short_episodes_over_the_same_tasks(chat: SimpleChatFormat) -> None:
    def texts(share: float) -> list[str]:
        return [chat.tokenizer.decode(t.token_ids) for t in swe_copy_curriculum(40, chat, seed=5, short_share=share)]

    drill, full = texts(1.0), texts(0.0)
    assert all("<|system|>" not in t for t in drill) and all("<|system|>" in t for t in full)
    # the same tasks whatever the share: each short episode's issue is its full twin's
    for short, long in zip(drill, full, strict=True):
        assert short.split("<|assistant|>")[0].split("<|user|>")[1] in long
    assert SFTConfig().copy_short_share == SHORT_SHARE  # the CLI's default is the module's
    with pytest.raises(ValueError, match="short_share"):
        swe_copy_curriculum(1, chat, short_share=1.5)


def test_curriculum_ids_mask_and_determinism(chat: SimpleChatFormat) -> None:
    a = swe_copy_curriculum(30, chat, seed=3)
    assert [t.token_ids for t in a] == [t.token_ids for t in swe_copy_curriculum(30, chat, seed=3)]
    assert [t.token_ids for t in a] != [t.token_ids for t in swe_copy_curriculum(30, chat, seed=4)]
    tok = chat.tokenizer
    for traj in a:
        assert len(traj.token_ids) == len(traj.loss_mask) < 2000
        text = tok.decode(traj.token_ids)
        spans = re.findall(r"<\|assistant\|>(.*?<\|end\|>)", text, re.S)
        targets = "".join(tok.decode([i for i, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m]))
        assert targets == "".join(spans)  # the loss is on the assistant turns and nothing else
        assert text.split("<|user|>", 1)[1].count("```bash") == len(spans)  # one bash block per turn


def test_tirl_sft_warms_up_on_the_swe_curriculum(chat: SimpleChatFormat) -> None:
    from tirl.sft_recipe import _copy_warmup

    model, tokenizer = build_tiny_model(TINY)
    lines: list[str] = []
    cfg = SFTConfig(env="swe-lite", copy_steps=1, copy_batch_size=2, log=lines.append)
    before = [p.detach().clone() for p in model.parameters()]
    _copy_warmup(model, tokenizer, chat, cfg)
    assert lines[0] == "swe-lite copy curriculum (50% short episodes): 1 step of 2"
    assert lines[1].startswith("copy check before the warm-up (12 validation tasks, greedy, exact turn): locate ")
    assert lines[2].startswith("copy check after the warm-up") and " · fix 0/12 (tokens " in lines[2]
    assert any((p != q).any() for p, q in zip(model.parameters(), before, strict=True))


def test_the_logged_copy_check_reads_the_same_tasks_whatever_the_run_seed(chat: SimpleChatFormat) -> None:
    """Checks of runs with different ``--seed`` compare: the logged check's draw is COPY_CHECK_SEED's."""
    from tirl.sft_recipe import _log_copy_check

    model, _ = build_tiny_model(TINY)
    by_seed = {seed: copy_check(model, chat, 12, seed=seed) for seed in (0, 1)}
    assert by_seed[0].tokens != by_seed[1].tokens  # the draw matters (its turns' token counts differ)
    logged: dict[int, list[str]] = {}
    for seed in (0, 1):
        logged[seed] = []
        _log_copy_check(model, chat, SFTConfig(env="swe-lite", seed=seed, log=logged[seed].append), "after")
    assert (
        logged[0]
        == logged[1]
        == [
            f"copy check after the warm-up (12 validation tasks, greedy, exact turn): {by_seed[COPY_CHECK_SEED].line()}"
        ]
    )


def test_the_sft_log_names_the_split_its_evaluation_reads() -> None:
    """swe-lite's stop-early evaluation reads the validation split: its log and card said "held-out"."""
    from tirl.sft import train_sft

    model, tokenizer = build_tiny_model(TINY)
    demo = swe_copy_curriculum(1, SimpleChatFormat(tokenizer))
    for env, split in (("swe-lite", "validation"), ("tir-chain", "held-out")):
        lines: list[str] = []
        cfg = SFTConfig(env=env, steps=1, eval_every=1, batch_size=1, warmup_steps=0, log=lines.append)
        assert cfg.eval_split == split
        train_sft(model, demo, cfg, pad_id=0, evaluate=lambda: 0.25)
        assert f"step     1  {split} accuracy 0.250" in lines, lines


def _plain_greedy_hits(logits: torch.Tensor, ids: list[int], start: int) -> int:
    hits = 0
    for i in range(start, len(ids)):
        row = logits[i - 1].tolist()
        hits += max(range(len(row)), key=row.__getitem__) == ids[i]
    return hits


def test_greedy_hits_equals_a_plain_loop() -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        n, vocab = int(torch.randint(3, 9, (1,), generator=gen)), 4
        ids = torch.randint(0, vocab, (n,), generator=gen).tolist()
        logits = torch.randn(n, vocab, generator=gen)
        for i in range(1, n):  # most rows predict the next token, so that both outcomes occur
            if torch.rand(1, generator=gen) < 0.8:
                logits[i - 1, ids[i]] = 10.0
        start = int(torch.randint(1, n, (1,), generator=gen))
        assert greedy_hits(logits, ids, start) == _plain_greedy_hits(logits, ids, start)


class Oracle(torch.nn.Module):
    """Predicts each next token of its input (logit 1 on it), except that it gets the token at ``miss`` wrong,
    counted from the end of the input (0: none)."""

    def __init__(self, vocab: int, miss: int = 0) -> None:
        super().__init__()
        self.vocab, self.miss = vocab, miss
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids: torch.Tensor) -> object:
        ids = input_ids[0]
        logits = torch.zeros(len(ids), self.vocab)
        logits[torch.arange(len(ids) - 1), ids[1:]] = 1.0
        if self.miss:
            row = len(ids) - 1 - self.miss
            logits[row] = 0.0
            logits[row, (int(ids[row + 1]) + 1) % self.vocab] = 1.0
        return type("Out", (), {"logits": logits[None]})()


def test_copy_check_counts_each_kind_and_finds_one_wrong_token(chat: SimpleChatFormat) -> None:
    vocab = len(chat.tokenizer)
    right = copy_check(Oracle(vocab), chat, 6)
    asked = {k: n for k, (_, n) in right.counts.items()}
    assert asked == {"locate": 6, "sed -n": 2, "fix": 6}  # a bare grep's sed -n: tasks 1 and 4 of 6 (way k % 3 == 1)
    assert all(hit == n for hit, n in right.counts.values()) and right.rate("fix") == 1.0
    assert all(hit == n > 0 for hit, n in right.tokens.values())
    last = copy_check(Oracle(vocab, miss=1), chat, 6)  # the turn's last token (its end marker) wrong
    assert all(hit == 0 for hit, _ in last.counts.values())
    assert all(hit == n - asked[k] for k, (hit, n) in last.tokens.items())  # one token short per turn
    assert 0.9 < last.token_rate("locate") < 1.0 and last.line().startswith("locate 0/6 (tokens ")


class CatOnly(Oracle):
    """The oracle, but it writes a locate turn right only the ``cat -n`` way (it misses one token otherwise)."""

    def __init__(self, vocab: int, tokenizer: object) -> None:
        super().__init__(vocab)
        self.tokenizer = tokenizer

    def forward(self, input_ids: torch.Tensor) -> object:
        tail = self.tokenizer.decode(input_ids[0, -60:].tolist())  # type: ignore[attr-defined]
        self.miss = 0 if "cat -n" in tail.rsplit("```bash", 1)[-1] else 1
        return super().forward(input_ids)


def test_a_locate_turn_counts_whichever_of_the_experts_ways_it_takes(chat: SimpleChatFormat) -> None:
    """The expert picks its locate way at random; a model that always locates with ``cat -n`` copies just as well."""
    got = copy_check(CatOnly(len(chat.tokenizer), chat.tokenizer), chat, 6)
    assert got.counts["locate"] == [6, 6]  # before: only the tasks whose way was cat -n (2 of 6) counted
