"""The label of a profiled op or kernel, from its name.

Names as torch's profiler writes them: ATen ops (``aten::mm``), custom ops of an engine
(``_C::onednn_mm``, ``vllm::unified_attention_with_output``), CUDA kernels
(``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``, ``flash_fwd_kernel``, ``sm90_xmma_gemm_...``),
and the step marker's own time (:data:`STEP_OWN`). The first category whose patterns match
wins, in the order of :data:`CATEGORIES` (communication before attention: an all-reduce
kernel fused into an attention layer is still communication).
"""

from __future__ import annotations

import re

STEP_OWN = "(step: Python outside ops)"
"""The pseudo-op holding the step markers' self time: what the engine's step spent outside
every profiled op (its Python, a busy wait, the scheduler inside the step)."""

COMMUNICATION, ATTENTION, GEMM, SAMPLING, DRAFT, STEP, OTHER = (
    "communication", "attention", "GEMM", "sampling", "draft model", "step", "other")

CATEGORIES: list[tuple[str, re.Pattern[str]]] = [
    (COMMUNICATION, re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|c10d|"
                               r"custom_ar|cross_device_reduce|send_recv|p2p", re.I)),
    (DRAFT, re.compile(r"eagle|draft|propose|spec_decode|rejection", re.I)),
    (ATTENTION, re.compile(r"attn|attention|flash|sdpa|scaled_dot_product|paged|fmha|xformers|mla_|"
                           r"kv_cache|reshape_and_cache", re.I)),
    (SAMPLING, re.compile(r"sampl|topk|top_k|top_p|argmax|multinomial|gumbel|logits|penalt", re.I)),
    # cuBLAS on Hopper and later names its GEMM kernels nvjet_sm90_* (recorded on an H100, 2026-12-06),
    # with splitKreduce_kernel after a split-K one; CUTLASS's are cutlass_* or sm90_xmma_gemm_*
    (GEMM, re.compile(r"gemm|matmul|aten::(?:mm|addmm|bmm|baddbmm|linear)$|_mm$|onednn_mm|cutlass|cublas|"
                      r"xmma|wgmma|\bmm_|nvjet|splitkreduce", re.I)),
]


def category_of(name: str) -> str:
    """The category of op or kernel ``name``: one of :data:`COMMUNICATION`, :data:`DRAFT`,
    :data:`ATTENTION`, :data:`SAMPLING`, :data:`GEMM`, :data:`STEP` (:data:`STEP_OWN`) or
    :data:`OTHER`."""
    if name == STEP_OWN:
        return STEP
    for category, pattern in CATEGORIES:
        if pattern.search(name):
            return category
    return OTHER
