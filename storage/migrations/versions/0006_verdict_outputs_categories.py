"""a verdict's outputs check and its verdicts per category, a trial's acceptance per draft
position (issues 37 and 38)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06 18:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('verdicts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('outputs', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('categories', sa.JSON(), nullable=True))
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.add_column(sa.Column('acceptance_per_position', sa.JSON(), nullable=True))


def downgrade() -> None:
    # dropped in place (SQLite 3.35 and later): recreating the table, batch mode's way on SQLite,
    # fails on the snapshots' foreign key into it
    with op.batch_alter_table('trials', schema=None, recreate='never') as batch_op:
        batch_op.drop_column('acceptance_per_position')
    with op.batch_alter_table('verdicts', schema=None) as batch_op:
        batch_op.drop_column('categories')
        batch_op.drop_column('outputs')
