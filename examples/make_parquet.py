"""Write a verl gsm8k-style parquet task file, then train on it.

The rows (``data_source``, ``prompt``, ``ability``, ``reward_model``, ``extra_info``) are the format
``verl/examples/data_preprocess/gsm8k.py`` produces::

    python examples/make_parquet.py tasks.parquet
    tirl train --set env.tasks_file=tasks.parquet --set filter.action_rule=gsm8k

``filter.action_rule=gsm8k`` tells the void rule that ``#### ANSWER`` is a final answer (the default ``tir`` rule
would judge such turns void). The first ``env.eval_size`` rows are held out for evaluation.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def rows(n: int) -> list[dict]:
    """``n`` arithmetic word problems in verl's gsm8k row layout."""
    out = []
    for i in range(n):
        a, b = 3 + i, 4 + 2 * i
        question = f"Ann has {a} apples and buys {b} more. How many apples does she have?"
        out.append({
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"split": "train", "index": i, "question": question},
        })  # fmt: skip
    return out


def write(path: str | Path, n: int = 64) -> Path:
    """Write ``n`` rows to ``path`` (parquet) and return it."""
    p = Path(path)
    pq.write_table(pa.Table.from_pylist(rows(n)), p)
    return p


if __name__ == "__main__":
    print(write(sys.argv[1] if len(sys.argv) > 1 else "tasks.parquet"))
