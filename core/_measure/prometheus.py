"""Reading engine ``/metrics`` pages (Prometheus text format) with prometheus_client's parser."""

from __future__ import annotations

from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families


def sample_sums(text: str, split: str | None = None) -> dict[str, float]:
    """Sum every sample of the exposition ``text`` by sample name, over all label sets.

    Counters keep their ``_total`` suffix (``vllm:generation_tokens_total``), as in the text.
    A gauge reported once per rank (SGLang's ``tp_rank`` label) is summed too; use
    :func:`sample_values` to average such gauges instead. With ``split`` (a label name), a
    sample carrying that label is also summed under ``name{label="value"}`` (vLLM's
    ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"}``), over its other labels.
    """
    sums: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] += sample.value
            if split and split in sample.labels:
                sums[f'{sample.name}{{{split}="{sample.labels[split]}"}}'] += sample.value
    return dict(sums)


def sample_values(text: str, name: str) -> list[float]:
    """Every value of the sample called ``name`` in ``text`` (one per label set)."""
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]
