"""The dependency pins a commit moves: every requirement string on a changed line of a
dependency file (requirements files, TOML arrays, ``setup.py`` lists, ``pip install`` in a
Dockerfile, ``*_VERSION`` variables), parsed with ``packaging.requirements``."""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name

from core._triage.diff import Hunk

# A pin where it is not a whole line: a requirement with a version operator or a URL inside a
# shell command, a TOML array or a Python list (``RUN pip install --no-deps torch==2.9.1 && ...``)
_PIN_WORD = re.compile(r"""(?<![\w.=/-])[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]\s]*\])?"""
                       r"""\s*(?:===|==|>=|<=|~=|!=|<|>)\s*[^\s"',;\\&|)]+""")
_QUOTED = re.compile(r""""([^"\n]+)"|'([^'\n]+)'""")
# a version variable: ``ARG TORCH_VERSION=2.9.1``, ``ENV FLASHINFER_VERSION 0.5.3``, ``NCCL_VERSION="2.27.3"``
_VERSION_VARIABLE = re.compile(r"""^\s*(?:ARG\s+|ENV\s+|export\s+)?([A-Za-z][A-Za-z0-9_]*?)_VERSION"""
                               r"""(?:\s*=\s*|\s+)["']?([0-9][^\s"']*)["']?\s*$""")


def _requirement_pins(line: str) -> dict[str, str]:
    """``{normalized name: pin}`` of every requirement string in one line of a dependency
    file (parsed with ``packaging.requirements``): the whole line (requirements files),
    each quoted string (TOML arrays, ``setup.py`` lists; a bare quoted name is "unpinned"),
    and each ``name<op>version`` word (``pip install`` in a Dockerfile, flags and ``&&``
    around it)."""
    text = line.strip().removesuffix("\\").strip()
    if not text or text.startswith("#"):
        return {}
    text = re.sub(r"\s+#.*$", "", text)
    candidates = [(text, False)]
    candidates += [(q or r, True) for q, r in _QUOTED.findall(text)]
    candidates += [(m.group(0), False) for m in _PIN_WORD.finditer(text)]
    found: dict[str, str] = {}
    for candidate, quoted in candidates:
        try:
            requirement = Requirement(candidate.strip())
        except InvalidRequirement:
            continue
        pin = str(requirement.specifier) or (f"@ {requirement.url}" if requirement.url else "")
        if pin or quoted:
            found.setdefault(canonicalize_name(requirement.name), pin or "unpinned")
    if variable := _VERSION_VARIABLE.match(text):
        found.setdefault(canonicalize_name(variable[1].replace("_", "-")), f"=={variable[2]}")
    return found


def _pins(lines: list[str], watched: set[NormalizedName]) -> dict[str, str]:
    found = {}
    for line in lines:
        for name, pin in _requirement_pins(line).items():
            if name in watched:
                found[name] = pin
    return found


def dependency_changes(hunks: list[Hunk], packages: list[str]) -> list[str]:
    """Watched packages whose pins changed in a dependency file, wherever the pin stands on its
    line (see :func:`_requirement_pins`): ``["torch ==2.8.0 -> ==2.9.1", ...]``."""
    watched = {canonicalize_name(p) for p in packages}
    before = _pins([x for h in hunks for x in h.removed], watched)
    after = _pins([x for h in hunks for x in h.added], watched)
    out = []
    for name in dict.fromkeys([*before, *after]):
        old, new = before.get(name), after.get(name)
        if old != new:
            out.append(f"{name} {old or '(none)'} -> {new or '(removed)'}")
    return out
