"""a verdict's favoured place in the round (issue 44)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06 14:30:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('verdicts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('position', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('verdicts', schema=None) as batch_op:
        batch_op.drop_column('position')
