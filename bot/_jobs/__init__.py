"""Work that runs without anyone waiting at a terminal: the bot's job queue and its schedule.

- :mod:`~bot._jobs.queue_workers`: one worker per host over the queue that
  :mod:`storage._job_queue` keeps in the database; each job a compare, a calibrate, a bisect
  or an environment check;
- :mod:`~bot._jobs.scheduler`: the ``[schedule]`` summary and the ``[[watches]]``.

A job on a Slurm host is a batch job of its own (:mod:`bot._slurm_batch`, part of the
application layer: submitted by :func:`bot._app.compare_on_slurm`, settled by
:func:`bot._runs.reconcile_runs`); the worker follows it to its end, also across a restart.
"""
