"""Prompt sets: the prompts a workload sends, read from a file or built in, and the seeded
selection each launch sends.

Formats (docs/workloads.md has an example of each):

* ``spec-bench``: Spec-Bench's and MT-Bench's ``question.jsonl``, one JSON object per line
  with ``question_id``, ``category`` and ``turns`` (a list of user turns; the first is sent).
* ``sharegpt``: one JSON array of conversations, each ``{"conversations": [{"from": "human",
  "value": ...}, ...]}``; the first human (or ``user``) turn is sent, conversations without one
  are skipped (real dumps hold some), an optional ``category`` is kept.
* ``jsonl``: one JSON object per line with ``prompt`` (text) or ``messages`` (a chat, OpenAI
  shape) and an optional ``category``.

Built in: ``random-words`` (seeded draws from a fixed 60-word list, ``prompt_words`` each: step
time on text no one serves) and ``categories`` (``categories.jsonl`` beside this module, written
for specperf: six categories of twelve prompts each).

Every fault in a file is one :class:`~core._errors.ConfigError` naming the file and the line
(JSONL) or entry (JSON), found when the config is read, so nothing is launched.
"""

from __future__ import annotations

import functools
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from core._errors import ConfigError

RANDOM_WORDS = "random-words"  # the prompts of no set: seeded words, no categories
BUILTIN_PROMPT_SETS = (RANDOM_WORDS, "categories")
UNCATEGORISED = "uncategorised"
_BUILTIN_FILE = Path(__file__).with_name("categories.jsonl")

# A fixed vocabulary, so prompts never depend on the machine's locale or word lists.
_WORDS = (
    "the model serves tokens to many users while the scheduler batches requests and the "
    "draft proposes a few tokens that the target verifies in one step so throughput rises "
    "when acceptance is high and falls when the verify step grows slow under load on a busy "
    "device with warm caches cold caches graphs kernels memory bandwidth clocks power links"
).split()


@dataclass(frozen=True)
class Prompt:
    """One prompt: ``text`` (sent as is to completions, as one user turn to chat) or
    ``messages`` (a chat, only for ``api = "chat"``), its ``category`` (``None``: the set has
    none) and ``where`` it was read (``file:line``, ``file: entry N``, or the built-in name)."""

    text: str | None
    category: str | None = None
    where: str = ""
    messages: tuple[dict, ...] | None = field(default=None, compare=False)

    def chat(self) -> list[dict]:
        """The ``messages`` of a chat request."""
        return list(self.messages) if self.messages else [{"role": "user", "content": self.text or ""}]


def _category_name(category: str | None, where: str) -> str | None:
    """``category`` as used (an empty name is none); a name with a control character (a line
    break) would break every one-line message it appears in."""
    if not category:
        return None
    if any(ord(c) < 32 or ord(c) == 127 for c in category):
        raise ConfigError(f"{where}: category {category!r} holds a control character")
    return category


def _line_prompt(entry: object, where: str, fmt: str) -> Prompt:
    """One JSONL line's prompt, in ``fmt`` (``spec-bench`` or ``jsonl``)."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(entry).__name__}")
    category = entry.get("category")
    if category is not None and not isinstance(category, str):
        raise ConfigError(f"{where}: category must be a string, got {category!r}")
    category = _category_name(category, where)
    if fmt == "spec-bench":
        turns = entry.get("turns")
        if not (isinstance(turns, list) and turns and isinstance(turns[0], str) and turns[0].strip()):
            raise ConfigError(f"{where}: no usable prompt: a Spec-Bench question needs \"turns\", a list whose "
                              "first item is the user's text")
        return Prompt(turns[0], category, where)
    if isinstance(entry.get("prompt"), str) and entry["prompt"].strip():
        return Prompt(entry["prompt"], category, where)
    messages = entry.get("messages")
    if isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        return Prompt(None, category, where, tuple(messages))
    raise ConfigError(f"{where}: no usable prompt: a line needs \"prompt\" (text) or \"messages\" (a list of "
                      "{\"role\", \"content\"}), or use format = \"spec-bench\" for \"turns\"")


def _sharegpt(entries: object, name: str) -> list[Prompt]:
    if not isinstance(entries, list):
        raise ConfigError(f"{name}: a ShareGPT file is one JSON array of conversations, got {type(entries).__name__}")
    prompts = []
    for i, entry in enumerate(entries, 1):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            raise ConfigError(f"{name}: entry {i}: no \"conversations\" list (is this a ShareGPT file?)")
        first = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") in ("human", "user")),
                     None)
        if isinstance(first, str) and first.strip():
            category = entry.get("category")
            where = f"{name}: entry {i}"
            prompts.append(Prompt(first, _category_name(category, where) if isinstance(category, str) else None, where))
    return prompts


def _detect(path: Path, head: str) -> str:
    """The format of a file from its first non-blank character and first line."""
    if head.lstrip().startswith("["):
        return "sharegpt"
    first = head.lstrip().split("\n", 1)[0]
    try:
        entry = json.loads(first)
    except json.JSONDecodeError:
        return "jsonl"  # its own parse names the line
    return "spec-bench" if isinstance(entry, dict) and "turns" in entry else "jsonl"


@functools.lru_cache(maxsize=8)
def _read(path: str, fmt: str, stamp: tuple[int, int], name: str) -> tuple[Prompt, ...]:
    """The prompts of the file at ``path`` (``stamp``: its mtime and size, so an edited file is
    read again), ``name`` naming it in errors and in each prompt's ``where``."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"prompt set {name} does not exist (workloads' prompts = a path, \"categories\" or "
                          "\"random-words\")") from None
    except OSError as exc:
        raise ConfigError(f"prompt set {name} cannot be read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark, as editors on Windows write, is not content
    except UnicodeDecodeError as exc:
        at = data[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{name}:{at}: not UTF-8 text (byte 0x{data[exc.start]:02x}); prompt sets are "
                          "UTF-8") from None
    fmt = _detect(Path(path), text) if fmt == "auto" else fmt
    if fmt == "sharegpt":
        try:
            prompts = _sharegpt(json.loads(text), name)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{name}:{exc.lineno}: not JSON ({exc.msg}); a ShareGPT file is one JSON array") from None
    else:
        prompts = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{name}:{number}: not JSON ({exc.msg}); {fmt} files hold one JSON object per "
                                  "line") from None
            prompts.append(_line_prompt(entry, f"{name}:{number}", fmt))
    if not prompts:
        raise ConfigError(f"prompt set {name} holds no usable prompt (read as {fmt})")
    return tuple(prompts)


def read_prompt_set(source: str, fmt: str = "auto") -> tuple[Prompt, ...]:
    """The prompts of ``source``: ``"categories"`` (built in) or a file path (absolute, as the
    config resolves it) in ``fmt`` (``auto``, ``spec-bench``, ``sharegpt``, ``jsonl``).
    ``"random-words"`` has no fixed prompts: see :func:`select_prompts`.

    Raises:
        ConfigError: the file is missing, unreadable, not JSON, or holds no usable prompt; the
            message names the file and line.
    """
    if source == "categories":
        source, fmt = str(_BUILTIN_FILE), "jsonl"
    try:
        stat = os.stat(source)
        stamp = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        stamp = (0, 0)
    return _read(source, fmt, stamp, "categories" if source == str(_BUILTIN_FILE) else source)


def check_prompt_set(source: str, fmt: str, categories: list[str], api: str, where: str) -> tuple[Prompt, ...]:
    """The prompts a workload may draw from: ``source`` read (:func:`read_prompt_set`), kept to
    ``categories`` when given. ``where`` names the workload in errors.

    Raises:
        ConfigError: as :func:`read_prompt_set`; a category asked for that the set lacks (the
            known ones named); chat ``messages`` under ``api = "completions"``.
    """
    if source == RANDOM_WORDS:
        if categories:
            raise ConfigError(f"{where}: categories = {categories} but the random-words prompts have no categories")
        return ()
    try:
        prompts = read_prompt_set(source, fmt)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    known = sorted({p.category or UNCATEGORISED for p in prompts})
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise ConfigError(f"{where}: categories {unknown} are not in prompt set {source} (its categories: "
                          f"{', '.join(known)})")
    if categories:
        prompts = tuple(p for p in prompts if (p.category or UNCATEGORISED) in categories)
    chat_only = next((p for p in prompts if p.text is None), None)
    if chat_only is not None and api != "chat":
        raise ConfigError(f"{where}: {chat_only.where} holds chat messages, which only api = \"chat\" can send")
    return prompts


def select_prompts(prompts: tuple[Prompt, ...], count: int, *, seed: int, stream: int, mix: str,
                   prompt_words: int) -> list[Prompt]:
    """``count`` prompts for one launch, the same on every launch of a workload.

    ``stream`` 0 is the measured requests, 1 the warm-up: under one seed they are drawn from
    opposite ends of each shuffled category, so warm-up repeats no measured prompt while the set
    has enough (and cannot pre-fill the prefix cache for it). ``mix = "balanced"``: categories in
    turn (sorted), so each gets ``count // categories`` requests or one more, spread through the
    window; ``"file"``: one seeded shuffle of the whole set. A set smaller than asked for is
    cycled. ``prompts`` empty: ``prompt_words`` seeded random words each, without category.
    """
    rng = random.Random(f"{seed}:{stream}")
    if not prompts:
        return [Prompt(" ".join(rng.choice(_WORDS) for _ in range(prompt_words)), None, RANDOM_WORDS)
                for _ in range(count)]
    groups: dict[str, list[Prompt]] = {}
    for prompt in prompts:
        key = (prompt.category or UNCATEGORISED) if mix == "balanced" else ""
        groups.setdefault(key, []).append(prompt)
    for key, group in groups.items():
        random.Random(f"{seed}:{key}").shuffle(group)
        if stream == 1:
            group.reverse()
    order = sorted(groups)
    return [groups[order[i % len(order)]][(i // len(order)) % len(groups[order[i % len(order)]])]
            for i in range(count)]
