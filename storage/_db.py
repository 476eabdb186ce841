"""Opening the database: any SQLAlchemy URL, SQLite by default, migrated with Alembic.

``open_database(url)`` brings the schema to the newest Alembic revision (creating it on a
new database) and returns the database handle (a SQLAlchemy ``Engine``, called ``db`` throughout
so it is never confused with an LLM engine); sessions are ``sqlmodel.Session(db)``.
"""

from __future__ import annotations

import re
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlmodel import create_engine

from core import SpecperfError

_MIGRATIONS = Path(__file__).parent / "migrations"


class StorageError(SpecperfError):
    """The database cannot be opened or migrated."""


class NoSuchRunError(StorageError):
    """Run ``run_id`` is not in the database ``db``: the message names the id and the database
    (its URL, password hidden) and says that ``specperf history`` lists the runs there."""

    def __init__(self, run_id: int | str, db: Engine) -> None:
        self.run_id = run_id
        where = db.url.render_as_string(hide_password=True)
        super().__init__(f"{run_id} is not in the database {where}; `specperf history` lists the runs there")


def default_url(data_dir: Path) -> str:
    """The default database: ``sqlite:///<data_dir>/specperf.db``."""
    return f"sqlite:///{data_dir / 'specperf.db'}"


def _alembic_config() -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(_MIGRATIONS))
    return config


def open_database(url: str, existing: bool = False) -> Engine:
    """The database handle (SQLAlchemy ``Engine``) for ``url`` with the schema migrated to the newest revision.

    ``existing``: a SQLite file must already be there (a command that only reads runs: a
    mistyped ``--db`` path then says so, instead of creating an empty database and its folders
    before "no such run").

    Raises:
        StorageError: the URL is malformed, the server unreachable, the folder of a SQLite
            file cannot be made, the file is missing (``existing``), or migration failed; the
            message shows the URL and the driver's words with any password removed.
    """
    safe, secrets = _redacted(url)
    if existing and url.startswith("sqlite:///") and url != "sqlite:///:memory:" and \
            not Path(url.removeprefix("sqlite:///")).expanduser().is_file():
        raise StorageError(f"no database at {safe}: check --db (or [storage].url); `specperf history` with the "
                           "default database lists the runs stored there")
    try:
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).expanduser().parent.mkdir(parents=True, exist_ok=True)
        # pre-ping: a pooled connection a database restart cut is replaced, not handed out
        db = create_engine(url, pool_pre_ping=True)
        if db.dialect.name == "sqlite":
            event.listen(db, "connect", _sqlite_pragmas)
        with db.begin() as connection:
            config = _alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    except (SQLAlchemyError, ImportError, ValueError, OSError) as exc:
        detail = _scrubbed(str(exc).splitlines()[0] if str(exc) else "", secrets)
        raise StorageError(f"cannot open database {safe}: {exc.__class__.__name__}: {detail}") from None
    return db


def _scrubbed(text: str, secrets: list[str]) -> str:
    """``text`` with each of ``secrets`` that stands as a word of its own (not inside a longer
    word: a password ``pw`` leaves ``pwd`` alone) replaced by ``***``."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", "***", text)
    return text


def _redacted(url: str) -> tuple[str, list[str]]:
    """``url`` as safe to show, and the secrets to scrub from error messages.

    The password is read from the raw text (everything between ``user:`` and the last ``@``
    of the authority) so an unencoded ``@`` inside it cannot split it into a fake host, and
    from ``password=`` style query parameters.
    """
    scheme, sep, rest = url.partition("://")
    authority = rest.split("/", 1)[0]
    secrets = []
    if sep and "@" in authority:
        userinfo, host = authority.rsplit("@", 1)
        user, colon, password = userinfo.partition(":")
        if password:
            secrets.append(password)
            url = f"{scheme}://{user}:***@{host}{rest[len(authority):]}"
    try:
        query = make_url(url).query
    except ArgumentError:
        return "(a malformed database URL)", secrets
    in_query = [v for k, v in query.items() if "pass" in k.lower() and isinstance(v, str) and v]
    for secret in in_query:
        url = url.replace(f"={secret}", "=***")
    secrets += in_query
    # a driver may quote a piece of a password that held "@" as if it were a host name
    secrets += [piece for secret in list(secrets) for piece in secret.split("@") if len(piece) >= 3]
    return url, secrets


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")  # a reader (specperf show) never blocks a running compare
    cursor.close()
