"""An agent loop over ``tirl serve`` with the official ``openai`` client: tool calls run in tirl's sandbox.

    tirl model init --arch qwen2 --out my-model          # or any local model directory with a tool template
    tirl serve --model my-model --port 8000 &
    python examples/serve_tool_loop.py --base-url http://127.0.0.1:8000/v1 "What is 6*7?"

The server parses ``<tool_call>`` blocks into OpenAI ``tool_calls``; this loop runs each ``python`` call in the
sandbox (bubblewrap when available), sends the output back as a ``tool`` message with its ``tool_call_id``,
and stops at the first reply without tool calls, or after ``--max-rounds``. A random-weight model answers
nonsense, of course: point it at a trained checkpoint (a ``tirl train`` run's ``checkpoints/step-N/model``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import openai

from tirl.config import SandboxConfig
from tirl.models.toolcalls import PYTHON_TOOL
from tirl.sandbox import create_sandbox


def run_python(arguments: str) -> str:
    """Run a ``python`` tool call's code in a fresh sandbox; what it printed (or the error) is the result."""
    try:
        code = json.loads(arguments).get("code", "")
    except (json.JSONDecodeError, AttributeError):
        return "error: the arguments are not a JSON object with a 'code' string"
    sandbox = create_sandbox(SandboxConfig(warm_pool=False), warn=False)
    result = asyncio.run(sandbox.run(str(code)))
    return result.stdout + result.stderr


def agent(client: openai.OpenAI, model: str, question: str, max_rounds: int = 3) -> list[dict[str, Any]]:
    """The conversation, tool messages included, until a reply has no tool calls."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for _ in range(max_rounds):
        choice = client.chat.completions.create(
            model=model,
            messages=messages,
            tools=[PYTHON_TOOL],
            temperature=0,
            max_tokens=64,  # type: ignore[list-item]
        ).choices[0]
        reply = choice.message
        messages.append(reply.model_dump(exclude_none=True))
        if choice.finish_reason == "length":  # cut at max_tokens: a half-written call is not returned
            print("note: the reply was cut at max_tokens=64; no tool call to run", file=sys.stderr)
            break
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            output = run_python(call.function.arguments) if call.function.name == "python" else "error: unknown tool"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return messages


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Parse the arguments, run the loop, print each message."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("question")
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", default=None, help="served model name (default: the first of /v1/models)")
    ap.add_argument("--max-rounds", type=int, default=3)
    args = ap.parse_args(argv)
    client = openai.OpenAI(base_url=args.base_url, api_key="none", max_retries=0)
    model = args.model or client.models.list().data[0].id
    messages = agent(client, model, args.question, args.max_rounds)
    for m in messages:
        print(
            f"{m['role']}: {m.get('content') or ''}{' ' + json.dumps(m['tool_calls']) if m.get('tool_calls') else ''}"
        )
    return messages


if __name__ == "__main__":
    main()
