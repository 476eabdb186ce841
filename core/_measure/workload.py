"""The prompts a workload's launch sends: the same for every launch and both arms."""

from __future__ import annotations

from core._config import WorkloadConfig
from core._prompts import Prompt, check_prompt_set, select_prompts


def make_prompts(workload: WorkloadConfig, count: int, stream: int = 0) -> list[Prompt]:
    """``count`` prompts of ``workload`` (core._prompts.select_prompts), seeded by
    ``workload.seed``. ``stream`` 0: the measured requests, 1: the warm-up requests.

    Raises:
        ConfigError: the workload's prompt set cannot be read (the config check reads it first).
    """
    prompts = check_prompt_set(workload.prompts, workload.format, workload.categories, workload.api,
                               "the workload")
    return select_prompts(prompts, count, seed=workload.seed, stream=stream, mix=workload.mix,
                          prompt_words=workload.prompt_words)
