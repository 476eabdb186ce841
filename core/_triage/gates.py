"""Feature gates: a gate's state in a mode (its argument, its environment variable, else its
default as the source declares it at that commit), and whether a changed line runs at all: the
conditions it sits under in the parsed source (:func:`conditions`), evaluated with the gates'
states (:func:`dead_lines`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import PurePosixPath

from core._config.triage_rules import TriageGate

_TRUE = {"1", "true", "yes", "on"}


def parse_source(source: str | None) -> ast.Module | None:
    """``source`` parsed (:mod:`ast`), or ``None`` when absent or not Python that parses."""
    if source is None:
        return None
    try:
        return ast.parse(source)
    except SyntaxError:
        return None

@dataclass(frozen=True)
class GateState:
    """A gate in one mode: ``on`` and ``why`` (which argument, variable or default decided)."""

    gate: str
    on: bool
    why: str


def flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def _truth_text(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        return True if text in _TRUE else False if text in {"0", "false", "no", "off", ""} else None
    return None


def _constant(node: ast.AST | None) -> bool | None:
    return _truth_text(node.value) if isinstance(node, ast.Constant) else None


def _declared_value(node: ast.stmt | ast.expr, name: str) -> bool | None:
    """The default ``node`` declares for ``name``, or ``None`` when it declares none."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any((t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else None) == name
               for t in targets):
            value = node.value
            if isinstance(value, ast.Call):  # EnvBool(True), EnvBool(default=True), field(default=True)
                given = value.args[:1] + [k.value for k in value.keywords if k.arg == "default"]
                return _constant(given[0]) if given else None
            return _constant(value)
    if isinstance(node, ast.Call) and len(node.args) >= 2:  # os.getenv("NAME", "1"), get_bool_env_var("NAME", "true")
        first = node.args[0]
        if isinstance(first, ast.Constant) and first.value == name:
            return _constant(node.args[1])
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str) and node.args[0].value.startswith("--") \
            and node.args[0].value.lstrip("-").replace("-", "_") == name:  # parser.add_argument("--name", ...)
        keywords = {k.arg: k.value for k in node.keywords}
        if "default" in keywords:
            return _constant(keywords["default"])
        action = keywords.get("action")
        if isinstance(action, ast.Constant) and action.value in ("store_true", "store_false"):
            return action.value == "store_false"
    return None


def declared_default(gate: TriageGate, text: str | None) -> tuple[bool, str] | None:
    """The gate's default as the engine's source ``text`` declares it (see
    :class:`core._config.triage_rules.TriageDefault`): ``(on, "NAME = value")``, or ``None`` when ``text`` is
    absent, does not parse or declares none of the gate's names."""
    tree = parse_source(text) if text else None
    if tree is None:
        return None
    names = [(n, True) for n in gate.env + gate.markers] + [(n, False) for n in gate.inverse_markers]
    for node in ast.walk(tree):
        for name, polarity in names:
            value = _declared_value(node, name) if isinstance(node, (ast.stmt, ast.expr)) else None
            if value is not None:
                return value == polarity, f"{name} = {value}"
    return None


def _default_on(gate: TriageGate, text: str | None) -> tuple[bool | None, str]:
    """(on by default or ``None`` when unknown, what says so) from the commit's copy of the
    gate's default file."""
    assert gate.default is not None
    where = PurePosixPath(gate.default.path).name
    if gate.default.contains:
        on = text is not None and any(word in text for word in gate.default.contains)
        return on, f"{where} {'has' if on else 'lacks'} {gate.default.contains[0]}"
    declared = declared_default(gate, text)
    if declared is None:
        return None, f"{where} declares no default"
    return declared[0], f"{where}: {declared[1]}"


def gate_state(gate: TriageGate, args: list[str], env: dict[str, str], default_text: str | None) -> GateState:
    """The state of ``gate`` for launch arguments ``args`` and environment ``env``;
    ``default_text`` is the commit's copy of ``gate.default.path`` (``None`` if absent)."""
    decided: GateState | None = None
    for arg in args:
        if flag_name(arg) in gate.enable_args:
            decided = GateState(gate.name, True, f"{flag_name(arg)} is in the arguments")
        elif flag_name(arg) in gate.disable_args:
            decided = GateState(gate.name, False, f"{flag_name(arg)} is in the arguments")
    if decided:
        return decided
    for name in gate.env:
        if name in env:
            on = env[name].strip().lower() in _TRUE
            return GateState(gate.name, on, f"env {name}={env[name]}")
    if gate.default is not None:
        declared, where = _default_on(gate, default_text)
        if declared is not None:
            given = "" if declared or not gate.enable_args else f" and no {' or '.join(gate.enable_args)} is given"
            return GateState(gate.name, declared,
                             f"{'on' if declared else 'off'} by default at this commit ({where}){given}")
    turn = gate.disable_args if gate.default_on else gate.enable_args + gate.env
    return GateState(gate.name, gate.default_on, f"{'on' if gate.default_on else 'off'} by default"
                     + (f" (no {' or '.join(turn)} given)" if turn else ""))


def default_flip(gate: TriageGate, before: str | None, after: str | None) -> str | None:
    """``"turns X on by default"`` (or off) when the gate's default file changes its default."""
    if gate.default is None:
        return None
    was, now = (_default_on(gate, text)[0] for text in (before, after))
    if was is None or now is None or was == now:
        return None
    return f"turns {gate.name} {'on' if now else 'off'} by default"


def _names(node: ast.AST) -> set[str]:
    """Dotted names and string constants mentioned anywhere in ``node``."""
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            parts, cur = [sub.attr], sub.value
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name):
                parts.append(cur.id)
            out.add(".".join(reversed(parts)))
        elif isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            out.add(sub.value)
    return out


def _mentions(names: set[str], marker: str) -> bool:
    return any(f".{marker}." in f".{name}." for name in names)


def _truth(test: ast.expr, gates: list[TriageGate], states: dict[str, GateState]) -> tuple[bool | None, set[str]]:
    """Whether ``test`` holds with the gates in ``states`` (``None``: unknown), and the gates it used."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        value, used = _truth(test.operand, gates, states)
        return (None if value is None else not value), used
    if isinstance(test, ast.BoolOp):
        results = [_truth(v, gates, states) for v in test.values]
        used = set().union(*(u for _, u in results))
        values = [v for v, _ in results]
        if isinstance(test.op, ast.And):
            return (False if False in values else True if all(v is True for v in values) else None), used
        return (True if True in values else False if all(v is False for v in values) else None), used
    names = _names(test)
    hits = []
    for gate in gates:
        if any(_mentions(names, m) for m in gate.markers):
            hits.append((gate, False))
        elif any(_mentions(names, m) for m in gate.inverse_markers):
            hits.append((gate, True))
    if len(hits) != 1:
        return None, set()
    gate, inverse = hits[0]
    value = states[gate.name].on != inverse
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        is_none = isinstance(right, ast.Constant) and right.value is None
        if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)) != is_none:
            value = not value
    return value, {gate.name}


_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def conditions(tree: ast.Module, line: int, span: tuple[int, int] | None = None) -> list[tuple[ast.expr, bool]]:
    """The conditions line ``line`` runs under in ``tree``: ``(test, must_hold)`` pairs from
    enclosing ``if``/``while`` blocks (``False`` in their ``else``) and from earlier
    early-exit guards in the same blocks (``if X: return`` gives ``(X, False)``). A line in
    a test itself gets no condition from that test (changing a test changes behaviour),
    unless the whole ``if`` without ``else`` lies in ``span`` (the hunk's lines, first and
    last): a block added or removed whole runs only when its test holds."""
    found: list[tuple[ast.expr, bool]] = []
    body: list[ast.stmt] = tree.body
    while True:
        stmt = next((s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        if stmt is None:
            return found
        for earlier in body:
            if earlier is stmt:
                break
            if (isinstance(earlier, ast.If) and not earlier.orelse and earlier.body
                    and isinstance(earlier.body[-1], _EXITS)):
                found.append((earlier.test, False))
        if isinstance(stmt, (ast.If, ast.While)):
            if stmt.test.lineno <= line <= (stmt.test.end_lineno or stmt.test.lineno):
                whole = span is not None and span[0] <= stmt.lineno and (stmt.end_lineno or line) <= span[1]
                if whole and not stmt.orelse:
                    found.append((stmt.test, True))
                return found
            in_body = not stmt.orelse or line <= (stmt.body[-1].end_lineno or line)
            found.append((stmt.test, in_body))
            body = stmt.body if in_body else stmt.orelse
            continue
        blocks = [getattr(stmt, name) for name in ("body", "orelse", "finalbody")
                  if isinstance(getattr(stmt, name, None), list)]
        blocks += [h.body for h in getattr(stmt, "handlers", [])] + [c.body for c in getattr(stmt, "cases", [])]
        inner = next((b for b in blocks if b and b[0].lineno <= line <= (b[-1].end_lineno or line)), None)
        if inner is None:
            return found
        body = inner


def dead_lines(tree: ast.Module, line: int, span: tuple[int, int], gates: list[TriageGate],
          modes: dict[str, dict[str, GateState]]) -> tuple[bool, set[str], set[str]]:
    """(no mode runs ``line``, gates that make it dead, gates it runs under that are on)."""
    conds = conditions(tree, line, span)
    dead_by, live_under = set(), set()
    for states in modes.values():
        mode_dead = False
        for test, must_hold in conds:
            value, used = _truth(test, gates, states)
            if value is not None and value != must_hold:
                mode_dead = True
                dead_by |= used
            elif value is not None:
                live_under |= used
        if not mode_dead:
            return False, set(), live_under
    return bool(modes), dead_by, live_under
