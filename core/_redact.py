"""The one redaction rule of specperf's own process: values of secret-looking names are
replaced by ``<redacted>`` before they reach a stored row (runs' settings, trials' argv, error
texts), a configuration error, or a text posted to Slack or logged after a Slack failure.

Secret-looking names and how their values are hidden in a command line or a line of text:
core._secret_rule, the one rule that the host agent's window monitor and the environment probe
use too. Here, on top of it: an ``env`` table entry of such a name (its value, literal or from
``${VAR}``), and the value of any such environment variable of this process wherever it was
expanded into a string (``--api-key ${VLLM_API_KEY}``), in stored rows, engine log tails, JSON
and pages alike.
"""

from __future__ import annotations

import os

from core._secret_rule import REDACTED, redact_args, redact_line, secret_name

_MIN_SECRET_CHARS = 4  # shorter values ("1", "yes") would blank out ordinary text


def _environment_secrets() -> list[str]:
    values = {v for k, v in os.environ.items() if secret_name(k) and len(v) >= _MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)  # longest first: a secret containing another


def _redact_text(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return "\n".join(redact_line(line) for line in text.split("\n"))


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
            return [_redact_text(v, secrets) for v in redact_args(value)]
        return [redact(v, secrets) for v in value]
    return value
