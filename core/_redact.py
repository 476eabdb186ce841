"""The one redaction rule of specperf's own process: values of secret-looking names are
replaced by ``<redacted>`` before they reach a stored row (runs' settings, trials' argv, error
texts), a configuration error, or a text posted to Slack or logged after a Slack failure.

Secret-looking: a name holding KEY, TOKEN, SECRET or PASSWORD (the environment probe's rule,
core._env.probe_script, which runs on hosts standalone). Four places carry them: an ``env`` table
entry of such a name (its value, literal or from ``${VAR}``), the value of any such environment
variable wherever it was expanded into a string (``--api-key ${VLLM_API_KEY}``), the argument
after, or the value in, a command-line option of such a name (``--api-key sk-...``,
``--hf-token=...``), and the password of a URL (``postgresql://user:pw@host``).
"""

from __future__ import annotations

import os
import re

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


_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s]*:)[^@\s/]+@")


def _redact_text(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return _URL_PASSWORD.sub(rf"\1{REDACTED}@", text)


def redact(value, secrets: list[str] | None = None):
    """``value`` (JSON-like: dicts, lists, strings) with secrets replaced by ``<redacted>``: in
    dicts, values under secret-looking keys; in lists of strings, option arguments of
    secret-looking options; in every string, the values of secret-looking environment
    variables of this process and URLs' passwords; anything else as is."""
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
