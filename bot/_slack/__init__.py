"""The Slack bot: ``/specperf`` from Slack to the job queue and back as threaded messages.

- :mod:`~bot._slack.app`: the transport (slack-bolt's app; Socket Mode through
  :mod:`~bot._slack.socket_mode`, or the HTTP endpoint with its signature and replay checks);
- :mod:`~bot._slack.commands`: command text to a parsed command; :mod:`~bot._slack.handlers`:
  each command acknowledged, authorised and run;
- :mod:`~bot._slack.notifier`: a job's life as threaded messages, with the Block Kit of
  :mod:`~bot._slack.blocks` (a run's verdict) and :mod:`~bot._slack.summary_blocks` (the
  scheduled summary);
- :mod:`~bot._slack.client`: the Web API client with its retries and pacing.
"""
