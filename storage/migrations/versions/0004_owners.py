"""owner leases, received commands, seen requests

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 01:30:00
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('owners',
    sa.Column('instance', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('host', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('boot_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('pid_ns', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('start_ticks', sa.BigInteger(), nullable=True),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('renewed_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('lease_s', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('instance')
    )
    with op.batch_alter_table('owners', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_owners_renewed_at'), ['renewed_at'], unique=False)
    op.create_table('seen_requests',
    sa.Column('signature', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('signature')
    )
    with op.batch_alter_table('seen_requests', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_seen_requests_at'), ['at'], unique=False)
    with op.batch_alter_table('command_audit', schema=None) as batch_op:
        batch_op.add_column(sa.Column('payload', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('owner', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('claims', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('command_audit', schema=None) as batch_op:
        batch_op.drop_column('claims')
        batch_op.drop_column('owner')
        batch_op.drop_column('payload')
    with op.batch_alter_table('seen_requests', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_seen_requests_at'))
    op.drop_table('seen_requests')
    with op.batch_alter_table('owners', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_owners_renewed_at'))
    op.drop_table('owners')
