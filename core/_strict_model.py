"""What every section of ``specperf.toml`` shares: strict pydantic models (unknown keys are
errors, values frozen) and ``${NAME}`` expansion from the environment. The front ends' own
sections (``bot``'s ``[slack]``, ``[schedule]``, ``[[watches]]``) build on these too.
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_vars(text: str) -> str:
    """``text`` with every ``${NAME}`` replaced by that environment variable.

    Raises:
        ValueError: a referenced variable is not set (pydantic reports it as the key's error).
    """

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ValueError(f"references ${{{name}}}, which is not set in the environment")
        return os.environ[name]

    return _VAR.sub(sub, text)


class ConfigSection(BaseModel):
    """Base of every configuration section: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
