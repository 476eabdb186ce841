"""Noise known in advance: from A/A launches of one commit on a host, the launch-to-launch
spread per mode, and the margin and launches per arm that reach a given power for a given
change there.

The statistics (core._experiments.stats) decide on the pair log-ratios ``r_i = ln(head_i / base_i)``: with
``n`` pairs of standard deviation ``sd``, the 95% interval of their mean has half-width about
``t * sd / sqrt(n)`` (``t``: Student's quantile at ``1 - alpha/2``, ``n - 1`` degrees of
freedom). With ``k = sd / sqrt(n)`` and normal quantiles ``z``, two conditions:

* a true change ``d`` (``|ln(1 - change)|``) is called REGRESSION with probability ``power``
  when the interval clears the margin ``m``: ``d - m >= (t + z_power) * k``;
* A/A (no change) is called NO CHANGE with probability ``power`` when the interval stays
  within ``m``: ``m >= (t + z_{(1 + power) / 2}) * k``.

The plan is the smallest ``n`` meeting both, with ``m`` the smallest margin for the second.

Windows per launch (issue 42). A calibration measured with ``W >= 2`` windows per launch splits
the noise of the pair changes in two, a one-way analysis of variance of the window pair
log-ratios ``r_ik = ln(head_ik / base_ik)`` (launch pair ``i``, window ``k``): the within-launch
variance ``s_w^2`` (of ``r_ik`` about its launch pair's mean, pooled) and the between-launch
variance ``s_b^2 = max(var_i(mean_k r_ik) - s_w^2 / W, 0)`` (what a launch adds that no number of
windows averages away). The launch is the unit the verdict's statistics count (a launch's figure
is over all its windows), so with ``W'`` windows a pair change has variance
``s_b^2 + s_w^2 / W'``: more windows shrink only the second term. :func:`plan_windows` prices
each ``W'`` at ``pairs(W') x (start_s + W' x window_s)`` per arm (``start_s``: what a launch
costs besides its windows: start-up, warm-up and stop; ``window_s``: one window) and keeps the
cheapest. Windows of one launch that drift together (a VM's slow minutes) make ``s_w^2 / W'``
optimistic; that costs launches when the verdict asks for more, never a verdict's validity.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from core._experiments.stats import ArmTrial, pair_log_ratios


@dataclass(frozen=True)
class NoiseSplit:
    """The noise of one mode's pair changes split by where it comes from (module docstring), and
    what each part costs: ``between_pct`` and ``within_pct`` (sd of pair changes, %, a launch's
    and one window's), measured with ``windows`` windows per launch; ``start_s`` (a launch's
    seconds besides its windows) and ``window_s`` (one window's seconds), ``None`` when the
    run's cost is not known."""

    between_pct: float
    within_pct: float
    windows: int
    start_s: float | None = None
    window_s: float | None = None

    def pair_sd_pct(self, windows: int) -> float:
        """The sd of a pair change (%) of launches measured with ``windows`` windows each."""
        return math.sqrt(self.between_pct ** 2 + self.within_pct ** 2 / windows)

    def line(self) -> str:
        """``between-launch sd 0.6%, within 1.8%, start 32 s, window 11 s``."""
        costs = (f", start {self.start_s:.0f} s, window {self.window_s:.1f} s"
                 if self.start_s is not None and self.window_s is not None else "")
        return f"between-launch sd {self.between_pct:.2f}%, within {self.within_pct:.2f}%{costs}"


@dataclass(frozen=True)
class Plan:
    """Margin (% of base tok/s), launches per arm (= pairs) and windows per launch for ``power``
    at ``change_pct``; ``pairs`` is ``None`` when more than ``max_pairs`` would be needed.
    ``split``: the noise split it was planned from (:func:`plan_windows`), else ``None``."""

    spread_pct: float
    change_pct: float
    power: float
    margin_pct: float | None
    pairs: int | None
    windows: int = 1
    split: NoiseSplit | None = None
    max_pairs: int | None = None  # the cap it was planned within, said when nothing fits it

    def line(self) -> str:
        """``spread 1.9%: margin 2.4% with 9 launches per arm gives 90% power for a 5% change``,
        or from a split ``3 launches x 4 windows per arm (between-launch sd 0.6%, within 1.8%,
        start 32 s, window 11 s): a margin of ...``."""
        if self.split is None:
            head = f"launch-to-launch spread {self.spread_pct:.1f}% (sd of pair changes)"
        elif self.pairs is None:
            head = f"no plan ({self.split.line()})"
        else:
            head = f"{self.pairs} launches x {self.windows} windows per arm ({self.split.line()})"
        if self.pairs is None:
            within = f"within {self.max_pairs} launches per arm" if self.max_pairs else "in a sane number of launches"
            return f"{head}: no margin reaches {self.power:.0%} power for a {self.change_pct:g}% change {within}"
        if self.split is not None:
            return (f"{head}: a margin of {self.margin_pct:.1f}% gives {self.power:.0%} power for a "
                    f"{self.change_pct:g}% change")
        return (f"{head}: a margin of {self.margin_pct:.1f}% with {self.pairs} launches per arm gives "
                f"{self.power:.0%} power for a {self.change_pct:g}% change")


def pair_spread_pct(base: list[ArmTrial], head: list[ArmTrial]) -> float | None:
    """Standard deviation of the pair log-ratios of output tok/s, in % (``None``: fewer than 2 pairs)."""
    n = min(len(base), len(head))
    if n < 2:
        return None
    ratios = pair_log_ratios([t.output_tok_s for t in base[:n]], [t.output_tok_s for t in head[:n]])
    return 100.0 * float(ratios.std(ddof=1))


def plan(spread_pct: float, change_pct: float = 5.0, power: float = 0.9, alpha: float = 0.05,
         max_pairs: int = 64) -> Plan:
    """The margin and pairs for ``power`` to call a ``change_pct`` slowdown REGRESSION (and
    A/A NO CHANGE) given a spread; see the module docstring for the formula.

    Raises:
        ValueError: a spread that is not positive, or a change or power outside (0, 100) / (0, 1).
    """
    if spread_pct <= 0 or not 0 < change_pct < 100 or not 0 < power < 1:
        raise ValueError(f"spread {spread_pct}%, change {change_pct}% and power {power} must be positive "
                         "(change below 100%, power below 1)")
    sd, d = spread_pct / 100.0, abs(math.log1p(-change_pct / 100.0))
    z_power, z_both = stats.norm.ppf(power), stats.norm.ppf((1 + power) / 2)
    for n in range(2, max_pairs + 1):
        t = stats.t.ppf(1 - alpha / 2, n - 1)
        k = sd / math.sqrt(n)
        if d >= (2 * t + z_power + z_both) * k:
            margin = 100.0 * math.ceil(1000 * (t + z_both) * k) / 1000  # rounded up to 0.1%
            return Plan(spread_pct, change_pct, power, margin, n)
    return Plan(spread_pct, change_pct, power, None, None)


def noise_split(base: list[ArmTrial], head: list[ArmTrial], cost: dict | None = None) -> NoiseSplit | None:
    """Split the pair changes' noise of launch pairs ``base[i]``/``head[i]`` into between- and
    within-launch parts (module docstring) from each launch's window figures
    (:attr:`ArmTrial.window_tok_s`), with ``cost`` (a run's ``{"engines_up_s", "measured_s",
    "launches"}``, core._experiments.compare) turned into ``start_s`` and ``window_s``.

    Returns:
        The :class:`NoiseSplit`, or ``None`` with fewer than 2 pairs whose launches have the
        same number (at least 2) of windows, all with tokens.
    """
    rows = []
    for b, h in zip(base, head):
        bw, hw = b.window_tok_s, h.window_tok_s
        if len(bw) >= 2 and len(bw) == len(hw) and all(x > 0 for x in (*bw, *hw)):
            rows.append(pair_log_ratios(bw, hw))
    if len(rows) < 2 or len({len(r) for r in rows}) != 1:
        return None
    ratios = np.vstack(rows)  # launch pairs x windows
    windows = ratios.shape[1]
    within_var = float(ratios.var(axis=1, ddof=1).mean())
    between_var = max(float(ratios.mean(axis=1).var(ddof=1)) - within_var / windows, 0.0)
    start_s = window_s = None
    if cost and cost.get("launches") and cost.get("measured_s"):
        launches = cost["launches"]
        start_s = max(cost["engines_up_s"] - cost["measured_s"], 0.0) / launches
        window_s = cost["measured_s"] / (launches * windows)
    return NoiseSplit(100.0 * math.sqrt(between_var), 100.0 * math.sqrt(within_var), windows, start_s, window_s)


def plan_windows(split: NoiseSplit, change_pct: float = 5.0, power: float = 0.9, alpha: float = 0.05,
                 max_windows: int = 8, max_pairs: int = 64) -> Plan:
    """The cheapest launches per arm (at most ``max_pairs``: a compare's ``max_trials``) and
    windows per launch (1..``max_windows``) that reach :func:`plan`'s goal, priced at
    ``pairs x (start_s + windows x window_s)`` (module docstring); without the costs, the fewest
    launches, then the fewest windows. A split with no noise at all plans as a spread of 0.01%.
    When no choice reaches the goal within ``max_pairs``, the plan has ``pairs`` ``None`` and one
    window (the compare then runs as without a plan, and says so).

    Raises:
        ValueError: as :func:`plan`.
    """
    best: tuple[float, Plan] | None = None
    for windows in range(1, max_windows + 1):
        one = plan(max(split.pair_sd_pct(windows), 0.01), change_pct, power, alpha, max_pairs)
        if one.pairs is None:
            continue
        if split.start_s is not None and split.window_s is not None:
            price = one.pairs * (split.start_s + windows * split.window_s)
        else:
            price = float(one.pairs)
        if best is None or price < best[0] - 1e-9:
            best = (price, dataclasses.replace(one, windows=windows, split=split))
    if best is None:
        return Plan(split.pair_sd_pct(1), change_pct, power, None, None, split=split, max_pairs=max_pairs)
    return best[1]
