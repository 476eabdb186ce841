"""Build the test target for compare: a real git repository of a vLLM engine extension.

The extension is a vLLM general plugin (entry point group ``vllm.general_plugins``, which
vLLM loads in every one of its processes). Its ``src/`` folder holds the package and a
``.dist-info`` folder declaring the entry point, so putting ``<worktree>/src`` on
PYTHONPATH (source mode, ``source_dir = "src"``) makes vLLM load that commit's code.

Branches, each one commit on top of ``main`` (the base):

* ``noop``: a comment changes; nothing else.
* ``slow-step``: every decode step (``execute_model`` and ``sample_tokens`` of the model
  runner) is made slower by ``STEP_SLOWDOWN = 0.15``, i.e. 15% more time, in both modes.
* ``slow-spec``: only the speculative path (``propose_draft_token_ids``) does more work: one
  extra ``SPEC_MATMUL_N = 1152`` square float32 matrix product per draft proposal, a real
  ``aten::mm`` that the profiler sees (about 25-30 ms on one core of the 2-vCPU VM: EAGLE-3
  tok/s about 75% lower there). 640 (about 5 ms, -36%) was too small beside the suite's
  sequential pair spread of 21-25% (2026-12-06) once the verdict's interval was the honest t
  interval with the place in the round corrected for (issue 44): at 4 pairs it read
  INCONCLUSIVE; baseline never runs it.
* ``broken-draft``: draft proposals are shifted by one token id, so (the test target always
  emits token 0, scripts/make_test_models.py) no proposal is accepted again.
* ``fails-to-start``: the plugin raises at load, so the engine dies during start-up.
* ``wrong-draft``: draft proposals are shifted by one token id as in ``broken-draft``, and the
  greedy rejection sampler is made to accept every proposed token (the target's logit of each
  draft token set to +inf before its argmax): acceptance stays at its maximum while the answers
  become the draft's, a speculative path that is wrong, not slower. Baseline never runs it.
* ``code-draft``: the draft misses from position 1 on for requests whose prompt is code (it names
  a programming language, :data:`CATEGORY_RULES`), so their acceptance length falls to 1, while
  every other prompt's stays as on ``main``: a regression of one category only.

Acceptance depends on the prompt in every commit, as a real draft head's does (published
measurements: about 0.5 per-token acceptance on prose, 0.9 on code, for one head). The plugin
reads each request's prompt (its token ids, decoded with the model's tokenizer once per
request), names its category by :data:`CATEGORY_RULES`, and shifts that request's draft
proposals from the position :data:`DRAFT_MISSES` gives its category: on ``main`` translation
prompts miss from position 2 (acceptance length 2 of 4 with three speculative tokens), every
other prompt none (4 of 4). Random words name no category and are never shifted.

Every commit also reads the environment variable ``SPECPERF_TESTEXT_STEP_SLOWDOWN`` (a
fraction, default 0) in each engine process and adds it to ``STEP_SLOWDOWN``: a change the
engine feels that no commit contains, set through an engine's ``env`` in the config (issue 26's
"was the good number real": the same commits measured lower after the environment moved).

``slow-step``'s delay is a busy wait, so it costs CPU time as a slower kernel would, but no
op (a profile shows it as the step's own time outside ops). Usage:
``python make_engine_repo.py PATH`` (PATH must not exist or be empty).
"""

import subprocess
import sys
from pathlib import Path

PLUGIN = '''"""specperf's test engine extension (a vLLM general plugin)."""

import os
import re
import time

# a prompt's category, as the test draft "knows" it: the first rule whose pattern the prompt matches
CATEGORY_RULES = [
    ("code", re.compile(r"\\b(Python|SQL|Bash|JavaScript|Rust|Java|Go|C|regular expression)\\b")),
    ("translation", re.compile(r"\\bTranslate\\b", re.IGNORECASE)),
]
# category -> the first draft position (1-based) whose proposals this commit's draft gets wrong
DRAFT_MISSES = {misses}
STEP_SLOWDOWN = {step}
SPEC_MATMUL_N = {spec}
BREAK_DRAFT = {broken}
ACCEPT_ANY_DRAFT = {wrong}
FAIL_AT_START = {fail}
{comment}

def _busy_wait_ns(ns):
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


def _slower(method, fraction):
    def wrapper(*args, **kwargs):
        start = time.perf_counter_ns()
        out = method(*args, **kwargs)
        _busy_wait_ns(int((time.perf_counter_ns() - start) * fraction))
        return out
    return wrapper


def _with_matmul(method, n):
    import torch

    weight = torch.randn(n, n)  # made once: per call only the product runs

    def wrapper(*args, **kwargs):
        torch.mm(weight, weight)
        return method(*args, **kwargs)
    return wrapper


def _shifted(method):
    def wrapper(*args, **kwargs):
        out = method(*args, **kwargs)
        if isinstance(out, list):
            return [[token + 1 for token in row] for row in out]
        return out + 1
    return wrapper


def _category(runner, req_id):
    """The category of request ``req_id`` by CATEGORY_RULES (None: none), once per request."""
    cache = runner.__dict__.setdefault("_specperf_categories", dict())
    if req_id not in cache:
        tokenizer = runner.__dict__.get("_specperf_tokenizer")
        if tokenizer is None:
            from transformers import AutoTokenizer
            tokenizer = runner._specperf_tokenizer = AutoTokenizer.from_pretrained(runner.model_config.tokenizer)
        state = runner.requests.get(req_id)
        text = tokenizer.decode(state.prompt_token_ids or []) if state is not None else ""
        cache[req_id] = next((name for name, pattern in CATEGORY_RULES if pattern.search(text)), None)
    return cache[req_id]


def _missing_by_category(method):
    def wrapper(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        rows = []
        for row, req_id in enumerate(self.input_batch.req_ids):
            first = DRAFT_MISSES.get(_category(self, req_id))
            if first:
                rows.append((row, first - 1))
        if not rows:
            return out
        if isinstance(out, list):
            out = [list(r) for r in out]
            for row, start in rows:
                out[row][start:] = [token + 1 for token in out[row][start:]]
            return out
        out = out.clone()
        for row, start in rows:
            out[row, start:] += 1
        return out
    return wrapper


def _accepting_every_draft(rejection_sample):
    import math

    import torch

    def wrapper(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                target_logits, *args, **kwargs):
        target_logits = target_logits.clone()
        rows = torch.arange(draft_token_ids.shape[0], device=target_logits.device)
        target_logits[rows, draft_token_ids.long()] = math.inf
        return rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                                target_logits, *args, **kwargs)
    return wrapper


def install():
    """Called by vLLM in each of its processes (vllm.general_plugins)."""
    if FAIL_AT_START:
        raise RuntimeError("specperf_testext: this commit breaks engine start-up")
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner as runner
    if getattr(runner, "_specperf_testext", False):
        return
    runner._specperf_testext = True
    # the environment's share of the slowdown: the same in every commit
    step = STEP_SLOWDOWN + float(os.environ.get("SPECPERF_TESTEXT_STEP_SLOWDOWN") or 0)
    if step:
        runner.execute_model = _slower(runner.execute_model, step)
        runner.sample_tokens = _slower(runner.sample_tokens, step)
    if SPEC_MATMUL_N:
        runner.propose_draft_token_ids = _with_matmul(runner.propose_draft_token_ids, SPEC_MATMUL_N)
    if DRAFT_MISSES:
        runner.propose_draft_token_ids = _missing_by_category(runner.propose_draft_token_ids)
    if BREAK_DRAFT:
        runner.propose_draft_token_ids = _shifted(runner.propose_draft_token_ids)
    if ACCEPT_ANY_DRAFT:
        from vllm.v1.sample import rejection_sampler
        rejection_sampler.rejection_sample = _accepting_every_draft(rejection_sampler.rejection_sample)
'''

BASE = dict(step=0.0, spec=0, broken=False, wrong=False, fail=False, comment="", misses={"translation": 2})
BRANCHES = {
    "noop": ("docs: explain the extension's knobs", dict(comment="# Knobs above: each test branch turns one on.")),
    "slow-step": ("model runner: 15% slower every decode step", dict(step=0.15)),
    "slow-spec": ("spec decode: one more 1152x1152 matmul per draft proposal", dict(spec=1152)),
    "broken-draft": ("spec decode: shift draft token ids (breaks acceptance)", dict(broken=True)),
    "fails-to-start": ("plugin: raise at load", dict(fail=True)),
    "wrong-draft": ("spec decode: accept every draft token (wrong answers at full speed)",
                    dict(broken=True, wrong=True)),
    "code-draft": ("spec decode: the draft misses on code prompts", dict(misses={"translation": 2, "code": 1})),
}


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "specperf", "GIT_AUTHOR_EMAIL": "specperf@localhost",
           "GIT_COMMITTER_NAME": "specperf", "GIT_COMMITTER_EMAIL": "specperf@localhost",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
           "PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(repo)}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def write(repo: Path, **knobs) -> None:
    package = repo / "src/specperf_testext"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(PLUGIN.format(**{**BASE, **knobs}))
    info = repo / "src/specperf_testext-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: specperf-testext\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\nspecperf_testext = specperf_testext:install\n")


def main() -> None:
    repo = Path(sys.argv[1])
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    write(repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base: engine extension, all knobs off")
    for branch, (message, knobs) in BRANCHES.items():
        git(repo, "checkout", "-q", "-b", branch, "main")
        write(repo, **knobs)
        git(repo, "commit", "-q", "-am", message)
    git(repo, "checkout", "-q", "main")
    print(f"engine repository written to {repo}")


if __name__ == "__main__":
    main()
