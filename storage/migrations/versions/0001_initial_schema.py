"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-30 04:21:21.160761
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('engine_name', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('host', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('workload_name', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('base_ref', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('base_sha', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('head_ref', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('head_sha', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('modes', sa.JSON(), nullable=False),
    sa.Column('settings', sa.JSON(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('log_tail', sa.Text(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('finished_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('arms',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('role', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('sha', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('mode', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('imported', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('arms', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_arms_run_id'), ['run_id'], unique=False)

    op.create_table('verdicts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('mode', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('verdict', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('n_pairs', sa.Integer(), nullable=False),
    sa.Column('change_pct', sa.Float(), nullable=True),
    sa.Column('ci_low_pct', sa.Float(), nullable=True),
    sa.Column('ci_high_pct', sa.Float(), nullable=True),
    sa.Column('p_value', sa.Float(), nullable=True),
    sa.Column('margin_pct', sa.Float(), nullable=False),
    sa.Column('alpha', sa.Float(), nullable=False),
    sa.Column('more_trials', sa.Integer(), nullable=True),
    sa.Column('acceptance_change_pct', sa.Float(), nullable=True),
    sa.Column('step_ms_change_pct', sa.Float(), nullable=True),
    sa.Column('attribution', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('verdicts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_verdicts_run_id'), ['run_id'], unique=False)

    op.create_table('trials',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('arm_id', sa.Integer(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('pgid', sa.Integer(), nullable=True),
    sa.Column('argv', sa.JSON(), nullable=False),
    sa.Column('log_path', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('started_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('ready_s', sa.Float(), nullable=True),
    sa.Column('output_tok_s', sa.Float(), nullable=True),
    sa.Column('request_per_s', sa.Float(), nullable=True),
    sa.Column('output_tokens', sa.Integer(), nullable=True),
    sa.Column('window_s', sa.Float(), nullable=True),
    sa.Column('tpot_ms_mean', sa.Float(), nullable=True),
    sa.Column('latency_ms', sa.JSON(), nullable=True),
    sa.Column('acceptance_length', sa.Float(), nullable=True),
    sa.Column('drafts', sa.Integer(), nullable=True),
    sa.Column('accepted_tokens', sa.Integer(), nullable=True),
    sa.Column('engine_output_tok_s', sa.Float(), nullable=True),
    sa.Column('engine_figures_source', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('requests', sa.JSON(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['arm_id'], ['arms.id'], ),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_trials_arm_id'), ['arm_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_trials_run_id'), ['run_id'], unique=False)

    op.create_table('env_snapshots',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('trial_id', sa.Integer(), nullable=True),
    sa.Column('phase', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('taken_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('env_snapshots', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_env_snapshots_run_id'), ['run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('env_snapshots', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_env_snapshots_run_id'))

    op.drop_table('env_snapshots')
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_trials_run_id'))
        batch_op.drop_index(batch_op.f('ix_trials_arm_id'))

    op.drop_table('trials')
    with op.batch_alter_table('verdicts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_verdicts_run_id'))

    op.drop_table('verdicts')
    with op.batch_alter_table('arms', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_arms_run_id'))

    op.drop_table('arms')
    op.drop_table('runs')
