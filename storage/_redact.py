"""Secrets never reach a stored row: values of secret-looking names are replaced by
``<redacted>`` before runs' settings, trials' argv and error texts are written.

Secret-looking: a name holding KEY, TOKEN, SECRET or PASSWORD (the environment probe's rule,
core._probe_script). Three places carry them: an ``env`` table entry of such a name (its value,
literal or from ``${VAR}``), the value of any such environment variable wherever it was
expanded into a string (``--api-key ${VLLM_API_KEY}``), and the argument after, or the value
in, a command-line option of such a name (``--api-key sk-...``, ``--hf-token=...``).
"""

from __future__ import annotations

import os

SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
REDACTED = "<redacted>"
_MIN_SECRET_CHARS = 4  # shorter values ("1", "yes") would blank out ordinary text


def secret_name(name: str) -> bool:
    """Whether ``name`` (an environment variable, a table key or an option) looks secret."""
    return any(word in name.upper() for word in SECRET_WORDS)


def _environment_secrets() -> list[str]:
    values = {v for k, v in os.environ.items() if secret_name(k) and len(v) >= _MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)  # longest first: a secret containing another


def _redact_argv(argv: list, secrets: list[str]) -> list:
    out, hide = [], False
    for arg in argv:
        if not isinstance(arg, str):
            out.append(arg)
            continue
        if hide:
            out.append(REDACTED)
            hide = False
            continue
        if arg.startswith("--") and secret_name(arg.split("=", 1)[0]):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(arg)
                hide = True
            continue
        out.append(_redact_text(arg, secrets))
    return out


def _redact_text(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def redact(value, secrets: list[str] | None = None):
    """``value`` (JSON-like: dicts, lists, strings) with secrets replaced by ``<redacted>``: in
    dicts, values under secret-looking keys; in lists of strings, option arguments of
    secret-looking options; in every string, the values of secret-looking environment
    variables of this process."""
    secrets = _environment_secrets() if secrets is None else secrets
    if isinstance(value, str):
        return _redact_text(value, secrets)
    if isinstance(value, dict):
        return {k: REDACTED if isinstance(v, str) and v and secret_name(str(k)) else redact(v, secrets)
                for k, v in value.items()}
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return _redact_argv(value, secrets)
        return [redact(v, secrets) for v in value]
    return value
