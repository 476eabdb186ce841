"""Seeded prompt sets: the same workload config always yields the same prompts."""

from __future__ import annotations

import random

from core._config import WorkloadConfig

# A fixed vocabulary, so prompts never depend on the machine's locale or word lists.
_WORDS = (
    "the model serves tokens to many users while the scheduler batches requests and the "
    "draft proposes a few tokens that the target verifies in one step so throughput rises "
    "when acceptance is high and falls when the verify step grows slow under load on a busy "
    "device with warm caches cold caches graphs kernels memory bandwidth clocks power links"
).split()


def make_prompts(workload: WorkloadConfig, count: int, stream: int = 0) -> list[str]:
    """``count`` prompts of ``workload.prompt_words`` words each, seeded by ``workload.seed``.

    ``stream`` selects an independent prompt stream under the same seed (0: measured
    requests, 1: warm-up requests), so warm-up never repeats a measured prompt and cannot
    pre-fill the prefix cache for it.
    """
    rng = random.Random(f"{workload.seed}:{stream}")
    return [" ".join(rng.choice(_WORDS) for _ in range(workload.prompt_words)) for _ in range(count)]
