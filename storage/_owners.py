"""Who owns a running job, run or received command, and the one rule for whether that owner
is still alive: an identity that survives containers, and a lease renewed in the database.

A process that owns rows registers its :class:`Identity` in the ``owners`` table and renews
its lease every third of ``lease_s`` (:class:`Heartbeat`, a daemon thread). The identity is a
per-process ``instance`` id (a random UUID), with the pid, host name, boot id
(``/proc/sys/kernel/random/boot_id``), PID namespace and process start time: a pid or a host
name alone names a different process after a container restart (the new bot is PID 1 again,
under a new host name).

:func:`owner_alive` is the rule. In this very kernel boot and PID namespace, an owner is alive
exactly while its pid names the process that started at the recorded time (a dead bot is seen
at once); seen from anywhere else (another container, PID namespace or machine), it is alive
while its lease is renewed within its ``lease_s``, whoever and wherever it was. Owners
recorded before leases existed (``pid`` and ``host`` only) keep the old rule: alive unless on
this host with their pid gone.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from sqlalchemy import Engine, delete
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, col

from storage._models import Owner, utcnow

log = logging.getLogger("specperf.storage")
DEFAULT_LEASE_S = 60.0


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat`` field 22), or None."""
    text = _read(f"/proc/{pid}/stat")
    try:
        fields = text.rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else int(fields[19])
    except (IndexError, ValueError):
        return None


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


@dataclass(frozen=True)
class Identity:
    """One specperf process: ``instance`` (random, unique per process), ``pid``, ``host`` (host
    name), ``boot_id`` (the kernel's, shared by the containers of one machine), ``pid_ns`` (the
    PID namespace, ``pid:[inode]``) and ``start_ticks`` (the process's start, clock ticks
    since boot)."""

    instance: str
    pid: int
    host: str
    boot_id: str
    pid_ns: str
    start_ticks: int | None

    def as_owner(self) -> dict:
        """What a row records as its owner (JSON)."""
        return asdict(self)


_current: Identity | None = None


def identity() -> Identity:
    """This process's identity (made once per process; a forked child gets its own)."""
    global _current
    if _current is None or _current.pid != os.getpid():
        pid = os.getpid()
        _current = Identity(uuid.uuid4().hex, pid, socket.gethostname(), _read("/proc/sys/kernel/random/boot_id"),
                            _pid_namespace(), _start_ticks(pid))
    return _current


def renew(db: Engine, lease_s: float, kind: str = "specperf") -> None:
    """Register this process in ``owners`` (first call) or renew its lease until ``lease_s``
    seconds from now."""
    me = identity()
    with Session(db) as session:
        row = session.get(Owner, me.instance)
        if row is None:
            row = Owner(**{k: v for k, v in me.as_owner().items()}, kind=kind, lease_s=lease_s)
        row.renewed_at, row.lease_s = utcnow(), lease_s
        session.add(row)
        session.commit()


def release(db: Engine) -> None:
    """Remove this process's lease (a clean exit): what it owned is orphaned at once."""
    with Session(db) as session:
        session.execute(delete(Owner).where(col(Owner.instance) == identity().instance))
        session.commit()


def owner_alive(db: Engine, owner: dict | None, now: dt.datetime | None = None) -> bool:
    """Whether the process recorded as ``owner`` (an :meth:`Identity.as_owner` dict) is alive;
    see the module docstring for the rule. ``None`` (no owner) is not alive.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    if not owner:
        return False
    me = identity()
    if owner.get("instance") == me.instance:
        return True
    if "instance" not in owner:  # recorded before leases: pid and host only
        if owner.get("host") != me.host:
            return True
        return _start_ticks(owner["pid"]) is not None
    if owner.get("boot_id") and (owner["boot_id"], owner.get("pid_ns")) == (me.boot_id, me.pid_ns):
        # this kernel boot and PID namespace: the pid with its start time says it all
        ticks = _start_ticks(owner["pid"])
        return ticks is not None and ticks == owner.get("start_ticks")
    if owner.get("boot_id") and owner.get("host") == me.host and owner["boot_id"] != me.boot_id:
        return False  # this machine rebooted since
    with Session(db) as session:
        row = session.get(Owner, owner["instance"])
    if row is None:
        return False
    renewed = row.renewed_at if row.renewed_at.tzinfo else row.renewed_at.replace(tzinfo=dt.UTC)
    return (now or utcnow()) - renewed <= dt.timedelta(seconds=row.lease_s)


_beating: dict[str, Heartbeat] = {}


def keep_alive(db: Engine, lease_s: float = DEFAULT_LEASE_S, kind: str = "specperf") -> Heartbeat:
    """Start this process's :class:`Heartbeat` on the database ``db``, once per process and
    database (later calls return the running one).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the first registration failed.
    """
    key = f"{os.getpid()}:{db.url}"
    if key not in _beating:
        _beating[key] = Heartbeat(db, lease_s, kind).start()
    return _beating[key]


class Heartbeat:
    """Renews this process's lease every ``lease_s / 3`` seconds in a daemon thread, so the
    lease lives as long as the process does, whatever its event loop is busy with. A failed
    renewal (database unreachable) is logged once per outage and retried at the next beat.
    ``start()`` renews once first (and raises if that fails); ``stop()`` ends the thread and,
    with ``release``, removes the lease. :meth:`lease_left_s` says how long the lease written
    last still holds: a process whose lease may have run out (an outage longer than it) must
    stop what it owns, since another bot may then take it over."""

    def __init__(self, db: Engine, lease_s: float = DEFAULT_LEASE_S, kind: str = "specperf") -> None:
        self.db, self.lease_s, self.kind = db, lease_s, kind
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewed = time.monotonic()  # when the last successful renewal began

    def lease_left_s(self) -> float:
        """Seconds until the last renewed lease runs out, counted from when that renewal began
        (it cannot have been written earlier); negative once it has."""
        return self._renewed + self.lease_s - time.monotonic()

    def _renew(self) -> None:
        began = time.monotonic()
        renew(self.db, self.lease_s, self.kind)
        self._renewed = began

    def start(self) -> Heartbeat:
        """Register and start renewing.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the first registration failed.
        """
        self._renew()
        self._thread = threading.Thread(target=self._beat, name="specperf-lease", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        failing = False
        while not self._stop.wait(self.lease_s / 3):
            try:
                self._renew()
            except SQLAlchemyError as exc:
                if not failing:
                    log.warning("cannot renew this process's lease: %s", short_error(exc))
                failing = True
                continue
            if failing:
                log.warning("lease renewed again: the database is reachable")
            failing = False

    def stop(self, release_lease: bool = True) -> None:
        """Stop renewing; with ``release_lease``, remove the lease (errors ignored)."""
        self._stop.set()
        _beating.pop(f"{os.getpid()}:{self.db.url}", None)
        if self._thread is not None:
            self._thread.join(5)
        if release_lease:
            try:
                release(self.db)
            except SQLAlchemyError:
                pass


def short_error(exc: BaseException) -> str:
    """One line naming a database error without its SQL or parameters: the exception's class
    and the driver's first line (``OperationalError: database is locked``), at most 200
    characters."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    text = text.split("[SQL:")[0].strip()
    return f"{exc.__class__.__name__}: {text[:200]}" if text else exc.__class__.__name__

