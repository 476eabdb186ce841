"""Opening the database: any SQLAlchemy URL, SQLite by default, migrated with Alembic.

``open_database(url)`` brings the schema to the newest Alembic revision (creating it on a
new database) and returns a SQLAlchemy engine; sessions are ``sqlmodel.Session(engine)``.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, event
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import create_engine

from core import SpecperfError

_MIGRATIONS = Path(__file__).parent / "migrations"


class StorageError(SpecperfError):
    """The database cannot be opened or migrated."""


def default_url(data_dir: Path) -> str:
    """The default database: ``sqlite:///<data_dir>/specperf.db``."""
    return f"sqlite:///{data_dir / 'specperf.db'}"


def _alembic_config() -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(_MIGRATIONS))
    return config


def open_database(url: str) -> Engine:
    """An engine for ``url`` with the schema migrated to the newest revision.

    Raises:
        StorageError: the URL is malformed, the server unreachable, or migration failed;
            the message names the URL without its password.
    """
    try:
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url)
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas)
        with engine.begin() as connection:
            config = _alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    except (SQLAlchemyError, ImportError, ValueError) as exc:
        safe = url.split("@")[-1] if "@" in url else url
        raise StorageError(f"cannot open database {safe}: {exc.__class__.__name__}: {str(exc).splitlines()[0]}") from None
    return engine


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")  # a reader (specperf show) never blocks a running compare
    cursor.close()
