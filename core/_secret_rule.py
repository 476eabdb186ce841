"""The secret rule: which names look secret, and how their values are hidden in a command line,
an environment and a line of text. Standard-library Python only, with no annotations that need
a newer interpreter: the host agent (core/_hosts/agent.py) and the environment probe
(core/_env/probe_script.py) import it here, and where their source is sent to a host to run
there, their import line is replaced by this file's source (:func:`joined`), so one word list
and one rule hold in every place that shows or stores argv, environment, config or logs
(issue 43: the probe hid ``--passwd`` and the window monitor did not).

A name looks secret when one of its parts (split at ``-``, ``_``, ``.`` and spaces) holds one of
:data:`SECRET_WORDS`, except the part ``TOKENS`` (a count of tokens: ``--max-num-batched-tokens``,
``--speculative-num-draft-tokens``). Hidden: the argument after, or the value in, a command-line
option of such a name (``--api-key sk-...``, ``--hf-token=...``), the value of an assignment of
such a name (``PASSWORD=...``, ``HF_TOKEN=...``) in a command line or a line of text, and the
password of a URL (``postgresql://user:pw@host``).
"""

import re

SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE", "SIGNATURE")
REDACTED = "<redacted>"
URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s]*:)[^@\s/]+@")
_PARTS = re.compile(r"[-_.\s]+")
_OPTION_IN_TEXT = re.compile(r"(--[A-Za-z0-9][\w.-]*)(=|[ \t]+)(?!-)(\"[^\"]*\"|'[^']*'|\S+)")
_ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_.]*)=(\"[^\"]*\"|'[^']*'|[^\s,;]+)")
_RULE_IMPORT = re.compile(r"^from core\._secret_rule import [^\n]*$", re.MULTILINE)


def secret_name(name):
    """Whether ``name`` (an environment variable, a table key, an option such as ``--api-key``)
    looks secret (module docstring)."""
    for part in _PARTS.split(name.upper()):
        if part != "TOKENS" and any(word in part for word in SECRET_WORDS):
            return True
    return False


def redact_args(argv):
    """``argv`` (a list of strings) with secret values hidden: the argument after a secret
    option, the value of ``--secret=value`` and of ``SECRET_NAME=value``, URL passwords."""
    out, hide = [], False
    for arg in argv:
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
        out.append(redact_line(arg))
    return out


def redact_line(text):
    """``text`` (a log line, a message, one argument) with the values of secret options and
    assignments and URL passwords hidden."""
    text = URL_PASSWORD.sub(r"\1" + REDACTED + "@", text)
    text = _OPTION_IN_TEXT.sub(lambda m: m.group(1) + m.group(2) + REDACTED if secret_name(m.group(1)) else m.group(0),
                               text)
    return _ASSIGNMENT.sub(lambda m: m.group(1) + "=" + REDACTED if secret_name(m.group(1)) else m.group(0), text)


def redact_environment(environ):
    """``environ`` (a mapping of names to values) with the values of secret names hidden and URL
    passwords in the others."""
    return {name: REDACTED if secret_name(name) else URL_PASSWORD.sub(r"\1" + REDACTED + "@", value)
            for name, value in environ.items()}


def joined(source):
    """``source`` (the host agent's or the probe's) with its ``from core._secret_rule import ...``
    line replaced by this module's source, to run on a host without specperf installed.

    Raises:
        ValueError: ``source`` has no such line, or more than one.
    """
    with open(__file__, encoding="utf-8") as fh:
        rule = fh.read()
    if len(_RULE_IMPORT.findall(source)) != 1:
        raise ValueError("the source has not exactly one 'from core._secret_rule import' line")
    return _RULE_IMPORT.sub(lambda _: rule, source)
