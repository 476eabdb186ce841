"""Alembic environment for specperf's schema (run through storage.open_database, not by hand)."""

from alembic import context
from sqlalchemy import engine_from_config, pool
from sqlmodel import SQLModel

import storage._models  # noqa: F401  (registers the tables on SQLModel.metadata)

config = context.config
connection = config.attributes.get("connection")


def _run(conn) -> None:
    context.configure(connection=conn, target_metadata=SQLModel.metadata,
                      render_as_batch=conn.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


if connection is not None:
    _run(connection)
else:
    engine = engine_from_config(config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.",
                                poolclass=pool.NullPool)
    with engine.connect() as conn:
        _run(conn)
