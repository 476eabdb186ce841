"""specperf's front ends: the ``specperf`` terminal command (and, later, the Slack app)."""
