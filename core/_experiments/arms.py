"""Arms beyond commits (issue 39): the base arm of a compare launched from another engine set-up
than the commit's (another config entry: a venv with another release, other args or
environment), so that a release upgrade, an engine flag or an environment variable gets the same
interleaved, judged A/B as a commit.

The two set-ups must serve the same model on the same host with the same workload (the workload
is the request's, one for both); anything else about them may differ. What differs is said first
in the report, as lines such as ``engine env SPECPERF_X: (unset) -> 1.0``, before the snapshots'
differences.

Either both set-ups have a repo (each arm's commit is resolved in its own, and launched from
its worktree) or neither has: then the arms are the set-ups alone (two releases' venvs, two
container images), launched as configured, and each arm's identity, stored where a commit's SHA
goes, is :func:`set_up_id`: ``setup-`` and a digest of the set-up (and of its image's ID when it
runs in a container), so that history tells two set-ups apart and keeps one set-up's runs
together.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex

from core._config import EngineConfig
from core._errors import ConfigError
from core._secret_rule import REDACTED, redact_args, redact_line, secret_name

# what two set-ups of one compare must share: the same engine serving the same model on one host
_SHARED = ("kind", "host", "model", "served_model_name")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# what a set-up difference never is: where the engine listens (concurrent pairing moves it) and how
# long specperf waits for it
_NOT_SET_UP = ("port", "ready_timeout_s", "stop_grace_s", "build_timeout_s")


def check_set_ups(base_name: str, base: EngineConfig, head_name: str, head: EngineConfig, modes: list[str]) -> None:
    """Refuse two set-ups that cannot be one compare's arms.

    Raises:
        ConfigError: they differ in kind, host, model or served model name (naming the field and
            both values), the base lacks one of ``modes``, one has a repo and the other none (each
            arm's commit is resolved in its own), or neither has one and a set-up needs a
            checkout (``build``, ``source_dir``, ``source_package``, a ``{worktree}`` or
            ``{prefix}`` placeholder).
    """
    for name in _SHARED:
        if getattr(base, name) != getattr(head, name):
            raise ConfigError(
                f"the arms must serve the same model on the same host: base engine {base_name!r} has {name} = "
                f"{getattr(base, name)!r} and engine {head_name!r} has {getattr(head, name)!r}; a compare's arms differ "
                "in set-up (python, args, env, command, build, repo), not in what is served or where")
    missing = [m for m in modes if m not in base.modes]
    if missing:
        raise ConfigError(f"base engine {base_name!r} has no mode {', '.join(missing)} (its modes: "
                          f"{', '.join(base.modes)}); both arms are measured in every mode")
    if bool(base.repo) != bool(head.repo):
        without, other = (base_name, head_name) if not base.repo else (head_name, base_name)
        raise ConfigError(f"engine {without!r} has no repo and engine {other!r} has one: the arms are either two "
                          f"commits, each resolved in its engine's repo (set engines.{without}.repo; both entries may "
                          "name the same one), or two set-ups without a repo")
    if not base.repo:
        for name, spec in ((base_name, base), (head_name, head)):
            if (needs := _needs_checkout(spec)) is not None:
                raise ConfigError(f"engine {name!r} has no repo but its {needs} needs a commit's checkout; set "
                                  f"engines.{name}.repo, or drop it (a set-up without a repo is launched as configured)")


def _needs_checkout(engine: EngineConfig) -> str | None:
    """The first setting of ``engine`` that only a commit's worktree gives a meaning to, or ``None``."""
    for name in ("build", "source_dir", "source_package"):
        if getattr(engine, name) not in (None, []):  # source_dir "" is the worktree's root
            return name
    texts = {"python": [engine.python], "args": engine.args, "command": engine.command, "env": engine.env.values(),
             **{f"mode {mode} args": args for mode, args in engine.modes.items()}}
    for name, values in texts.items():
        if any("{worktree}" in v or "{prefix}" in v for v in values):
            return f"{name} ({{worktree}} or {{prefix}})"
    return None


def set_up_ref(name: str, engine: EngineConfig) -> str:
    """How a set-up without a repo is named where a commit's ref goes (stored runs, reports,
    Slack): its container image when it runs in one, else ``engine NAME``."""
    return engine.container.image if engine.container else f"engine {name}"


def set_up_id(engine: EngineConfig, image_id: str | None = None) -> str:
    """The identity of a set-up without a repo, stored where an arm's commit SHA goes:
    ``setup-`` and the first 34 hex digits (40 characters in all, a SHA's length) of the SHA-256 of
    the set-up (every engine field but where it listens and how long specperf waits, as sorted
    JSON) and ``image_id`` (the container image's ID on the host, so that a tag pulled again with
    other content is another set-up). The same set-up gives the same identity on every run."""
    fields = engine.model_dump(mode="json", exclude=set(_NOT_SET_UP))
    text = json.dumps({"engine": fields, "image_id": image_id}, sort_keys=True)
    return "setup-" + hashlib.sha256(text.encode()).hexdigest()[:34]


def base_set_up(base_name: str, base: EngineConfig, head_name: str, head: EngineConfig, modes: list[str],
                env: list[str] | None = None, args: str | None = None) -> EngineConfig:
    """``base`` made the base arm of a compare whose commit's arm is ``head``: on ``head``'s port
    (where an arm listens is no set-up difference), with ``env`` and ``args``
    (:func:`with_overrides`), checked (:func:`check_set_ups`).

    Raises:
        ConfigError: as :func:`with_overrides` and :func:`check_set_ups`.
    """
    arm = with_overrides(base.model_copy(update={"port": head.port}), env or [], args)
    check_set_ups(base_name, arm, head_name, head, modes)
    return arm


def with_overrides(engine: EngineConfig, env: list[str], args: str | None) -> EngineConfig:
    """``engine`` with ``env`` (``KEY=VALUE`` items; an empty VALUE sets it empty) set in its
    environment and ``args`` (a shell-like string, split by :func:`shlex.split`, never run by a
    shell) appended to its common arguments: the last of a repeated option is the one vLLM's and
    SGLang's argument parsers keep.

    Raises:
        ConfigError: an item without ``=`` or with a name that is not an environment variable's,
            or ``args`` that do not split (an unclosed quote).
    """
    updates = dict(engine.env)
    for item in env:
        key, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.fullmatch(key):
            raise ConfigError(f"--base-env takes KEY=VALUE with KEY an environment variable's name, not {item!r}")
        updates[key] = value
    try:
        extra = shlex.split(args) if args else []
    except ValueError as exc:
        raise ConfigError(f"--base-args {args!r} does not split into arguments: {exc}") from None
    return engine.model_copy(update={"env": updates, "args": [*engine.args, *extra]})


def set_up_differences(base: EngineConfig, head: EngineConfig) -> list[str]:
    """What differs between two engine set-ups, one line per difference, base -> head: every
    environment variable first (sorted by name), then the common args, each mode's args and the
    other fields. ``[]`` when the set-ups are the same. Values of secret-looking names are
    hidden (core._secret_rule): a changed token reads ``<redacted> -> <redacted>``."""
    lines = []
    for key in sorted(set(base.env) | set(head.env)):
        before, after = base.env.get(key), head.env.get(key)
        if before != after:
            if secret_name(key):
                before, after = (None if v is None else REDACTED for v in (before, after))
            lines.append(f"engine env {key}: {_shown(before)} -> {_shown(after)}")
    if base.args != head.args:
        lines.append(f"engine args: {_argv(base.args)} -> {_argv(head.args)}")
    for mode in sorted(set(base.modes) & set(head.modes)):
        if base.modes[mode] != head.modes[mode]:
            lines.append(f"engine mode {mode} args: {_argv(base.modes[mode])} -> {_argv(head.modes[mode])}")
    skip = {"env", "args", "modes", "container", *_SHARED, *_NOT_SET_UP}
    fields = [(f"engine {name}", getattr(base, name), getattr(head, name))
              for name in EngineConfig.model_fields if name not in skip]
    if base.container or head.container:  # each container setting on a line of its own, the image first
        boxes = [box.model_dump() if box else {} for box in (base.container, head.container)]
        fields += [(f"engine container {name}", boxes[0].get(name), boxes[1].get(name))
                   for name in sorted(set(boxes[0]) | set(boxes[1]), key=lambda n: (n != "image", n))]
    for label, before, after in fields:
        if before != after:
            listed = isinstance(before, list) or isinstance(after, list)
            shown = (_argv(before or []), _argv(after or [])) if listed else (_shown(before), _shown(after))
            lines.append(f"{label}: {shown[0]} -> {shown[1]}")
    return lines


def _shown(value: object) -> str:
    return "(unset)" if value is None else repr(value) if value == "" else redact_line(str(value))


def _argv(words: list) -> str:
    return shlex.join(redact_args([str(w) for w in words])) if words else "(none)"
