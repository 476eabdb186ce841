"""Persistence for runs, trials and environment snapshots (SQLModel).

Empty until the compare work lands; ``core`` never imports from here.
"""
