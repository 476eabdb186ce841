"""``python -m core._measure.host_client``: specperf's benchmark client on an SSH host, for one
trial (core/_measure/host_client/__init__.py has the protocol). A module of its own, imported by nothing, so
that ``-m`` does not run a module that importing ``core`` has already imported."""

import sys

from core._measure.host_client import main

sys.exit(main())
