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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from core._experiments.stats import ArmTrial, pair_log_ratios


@dataclass(frozen=True)
class Plan:
    """Margin (% of base tok/s) and launches per arm (= pairs) for ``power`` at ``change_pct``;
    ``pairs`` is ``None`` when more than ``max_pairs`` would be needed."""

    spread_pct: float
    change_pct: float
    power: float
    margin_pct: float | None
    pairs: int | None

    def line(self) -> str:
        """``spread 1.9%: margin 2.4% with 9 launches per arm gives 90% power for a 5% change``."""
        head = f"launch-to-launch spread {self.spread_pct:.1f}% (sd of pair changes)"
        if self.pairs is None:
            return (f"{head}: no margin reaches {self.power:.0%} power for a {self.change_pct:g}% change "
                    "in a sane number of launches")
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
