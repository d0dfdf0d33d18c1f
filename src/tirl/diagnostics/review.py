"""Send an evidence bundle to any OpenAI-compatible chat endpoint (the official ``openai`` client).

tirl computes its diagnoses itself; this is the optional second opinion the
seeds get by pasting code and logs into a chat. The usual set-up mistakes are
caught with a message that names the fix:

before the request
    the key variable is unset or empty (or holds the key's *value* as its
    name), the base URL has a query string, repeats ``/v1/v1``, or names the
    endpoint (``…/chat/completions``) instead of the API root;
after the request
    401 (the key in ``$VAR`` was rejected), 404 with ``model_not_found`` or a
    model message (the model id is unknown — the models the endpoint lists are
    shown), 404 otherwise (the base URL path is wrong), a refused connection.

``base_url`` is used as the official client uses it: the API root, usually
ending in ``/v1`` (``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1``).
Not covered: streaming, the Responses API, Azure-style deployments.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from tirl.errors import SetupError

SYSTEM_PROMPT = (
    "You review diagnoses of reinforcement-learning runs of tool-using LLM agents. The bundle contains the "
    "tool's verdicts, the log window around each finding, the void-turn filter configuration and code "
    "locations. Say whether the evidence supports each verdict, what else could explain it, and the single "
    "next check to run. Be concrete; cite steps and file:line."
)


@dataclass(frozen=True, slots=True)
class ReviewResult:
    """The reviewer's answer and what produced it."""

    text: str
    model: str
    base_url: str


def check_base_url(base_url: str) -> str:
    """Validate the base URL before any request; returns it without a trailing slash."""
    try:
        parts = urlsplit(base_url)
        valid = parts.scheme in ("http", "https") and bool(parts.netloc)
        _ = parts.port  # raises for a port that is not a number in range
    except ValueError:  # "http://[::1" (unclosed IPv6 bracket), "http://h:99999"
        valid = False
    if not valid:
        raise SetupError(
            f"--base-url {base_url!r} is not an http(s) URL — give the API root, e.g. https://api.openai.com/v1"
        )
    if parts.query or parts.fragment:
        clean = f"{parts.scheme}://{parts.netloc}{parts.path}"
        raise SetupError(
            f"--base-url {base_url!r} has a query string or fragment — the client appends /chat/completions to "
            f"the base URL, so remove it: --base-url {clean}"
        )
    path = parts.path.rstrip("/")
    if "/v1/v1" in path + "/":
        fixed = base_url.rstrip("/").replace("/v1/v1", "/v1")
        raise SetupError(
            f"--base-url {base_url!r} would request {path}/chat/completions (/v1 twice) — write /v1 once: "
            f"--base-url {fixed}"
        )
    for suffix in ("/chat/completions", "/completions", "/models"):
        if path.endswith(suffix):
            root = base_url.rstrip("/")[: -len(suffix)]
            raise SetupError(
                f"--base-url {base_url!r} names an endpoint, not the API root — the client adds {suffix} "
                f"itself: --base-url {root}"
            )
    return base_url.rstrip("/")


def is_local(base_url: str) -> bool:
    """The server runs on this machine (loopback): ``tirl serve`` and ``vllm serve`` there need no key."""
    from urllib.parse import urlsplit

    return (urlsplit(base_url).hostname or "") in ("localhost", "127.0.0.1", "::1") or (
        urlsplit(base_url).hostname or ""
    ).startswith("127.")


def read_key(env_key: str, *, required: bool = True) -> str:
    """The API key from the environment variable named ``env_key`` ("none" when unset and not ``required``)."""
    if env_key.startswith(("sk-", "Bearer ")) or len(env_key) > 64:
        raise SetupError(
            "--env-key takes the NAME of an environment variable, not the key itself — "
            "export MY_KEY=<key> and pass --env-key MY_KEY"
        )
    value = os.environ.get(env_key, "")
    if not value.strip() and not required:
        return "none"  # a local server: the openai client needs some key, the server checks none
    if not value.strip():
        state = "is empty" if env_key in os.environ else "is not set"
        raise SetupError(
            f"the environment variable {env_key} {state} — export {env_key}=<your key> in this shell, "
            f"or pass --env-key with the name of the variable that holds it"
        )
    return value.strip()


def _error_text(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return f"{err.get('code') or ''} {err.get('message') or ''}".strip()
    response = getattr(exc, "response", None)
    text = getattr(response, "text", "") or ""
    return text.strip()[:200] or "no error body"


def _available_models(client: object) -> list[str]:
    try:
        models = client.models.list()  # type: ignore[attr-defined]
        return sorted(m.id for m in models)
    except Exception:  # the listing is a hint only
        return []


def names_the_model(text: str, model: str) -> bool:
    """Whether a 404's text is about the model (OpenAI's ``model_not_found``, or the id itself), not the path.

    ``tirl serve``'s "no route /chat/completions; the API is under /v1 (e.g. /v1/models)" mentions models
    but is about the base URL.
    """
    low = text.lower()
    return "model_not_found" in low or (bool(model) and model.lower() in low)


def review_bundle(
    bundle: str, *, base_url: str, model: str, env_key: str = "OPENAI_API_KEY", timeout_s: float = 120.0
) -> ReviewResult:
    """Send ``bundle`` to ``base_url`` with ``model``; raises :class:`SetupError` with the fix on a mistake."""
    import openai

    url = check_base_url(base_url)
    key = read_key(env_key, required=not is_local(url))
    client = openai.OpenAI(base_url=url, api_key=key, timeout=timeout_s, max_retries=0)
    try:
        resp = client.chat.completions.create(
            model=model,
            messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": bundle}],
        )
    except openai.AuthenticationError as exc:
        if key == "none":  # a local URL and no key set: nothing was sent, so nothing was "rejected"
            state = "is empty" if env_key in os.environ else "is not set"
            raise SetupError(
                f"{url} wants an API key (401: {_error_text(exc)}), and ${env_key} {state} — export {env_key}=<key> "
                "(or pass --env-key NAME of the variable that holds it)"
            ) from None
        raise SetupError(
            f"{url} rejected the key in ${env_key} (401: {_error_text(exc)}) — check that ${env_key} holds a "
            f"key for this endpoint (a new terminal may not have it exported)"
        ) from None
    except openai.NotFoundError as exc:
        text = _error_text(exc)
        if names_the_model(text, model):
            listed = _available_models(client)
            hint = f"; models it lists: {', '.join(listed)}" if listed else ""
            raise SetupError(
                f"{url} does not know the model {model!r} (404: {text}) — copy the id exactly from the "
                f"endpoint's model list{hint}"
            ) from None
        raise SetupError(
            f"{url}/chat/completions was not found (404: {text}) — check the --base-url path; most servers "
            f"expect it to end in /v1"
        ) from None
    except openai.PermissionDeniedError as exc:
        raise SetupError(f"{url} refused the request (403: {_error_text(exc)}) — the key lacks access") from None
    except openai.RateLimitError as exc:
        raise SetupError(f"{url} is rate-limiting this key (429: {_error_text(exc)}) — retry later") from None
    except openai.APIConnectionError:
        raise SetupError(f"cannot connect to {url} — is the server running and the host/port right?") from None
    except openai.APIStatusError as exc:
        raise SetupError(f"{url} answered {exc.status_code}: {_error_text(exc)}") from None
    choice = resp.choices[0] if resp.choices else None
    text = (choice.message.content or "") if choice is not None else ""
    if not text.strip():
        raise SetupError(f"{url} returned an empty answer for model {model!r}")
    return ReviewResult(text=text, model=model, base_url=url)
