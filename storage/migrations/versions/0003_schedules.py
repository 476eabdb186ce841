"""job priority and watch, schedule log

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 08:20:00
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('priority', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('watch', sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch_op.create_index(batch_op.f('ix_jobs_watch'), ['watch'], unique=False)

    op.create_table('schedule_log',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('schedule_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('result', sa.Text(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('schedule_log', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_schedule_log_schedule_id'), ['schedule_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('schedule_log', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_schedule_log_schedule_id'))
    op.drop_table('schedule_log')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_watch'))
        batch_op.drop_column('watch')
        batch_op.drop_column('priority')
