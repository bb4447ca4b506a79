"""Coverage of the honest intervals over time, by simulation through the client's own
mechanism tables, memoization and period gate.

    ./dev bench coverage [--trials 1000] [--devices 2000] [--share 0.3]

For windows of 1, 7 and 30 periods; memoized, memoized + instantaneous, and fresh coins; and
three populations (the same devices every period; half of them replaced each period; the same
devices calling ``report()`` 1-10 times per period, through ``PeriodGate``), it counts how often
the 95% interval of ``deniable.analysis.estimate.debias`` (with the metric's policy and the
window's periods) covers the true device share, and prints the mean width beside it. The
naive interval (the window's reports taken as independent, what the analysis did before) is
printed for contrast.

How a device's reports are drawn, exactly as the client draws them:
- every perturbation is a lookup in the mechanism's outcome table (``client.pool``: the
  PerturbationPool's table, built by running ``RandomizedResponse.perturb`` on every draw) with
  a uniform draw from ``os.urandom``;
- a memoized answer is drawn once per (device, true value) from the memo layer's table and
  reused in every period: over random device secrets, ``client.memo.memo_bit`` has exactly that
  distribution, independently per value (memo.py);
- with an instantaneous layer, the memo layer is ``composition.split(wire, layer)`` and every
  report re-perturbs the memoized bit with the layer's table;
- devices that call ``report()`` several times per period pass through real ``PeriodGate``
  objects (one per device, on a simulated clock), which admit the first call of each period.

The true share of a window is the mean of the true values over the reports the gate admits:
the share of devices answering yes per period, averaged over the window (see docs/analysis.md).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from deniable.analysis.estimate import debias
from deniable.client.composition import split
from deniable.client.mechanism import RandomizedResponse
from deniable.client.period import CollectionPolicy, PeriodGate
from deniable.client.pool import outcome_table

WIRE = RandomizedResponse.from_id("rr:1/4:1/2")
"""The wire mechanism: P1 = 5/8, Q = 3/8 (epsilon = ln(5/3))."""
LAYER = RandomizedResponse.from_id("rr:1/2:1/2")
"""The instantaneous layer; split(WIRE, LAYER) is the two-coin scheme rr:1/2:1/2."""
POLICIES = {
    "memoized": CollectionPolicy("memoized"),
    "memoized+instantaneous": CollectionPolicy("instantaneous", LAYER),
    "fresh": CollectionPolicy("fresh"),
}
POPULATIONS = ("same devices", "half replaced", "many calls")
WINDOWS = (1, 7, 30)


class _Table:
    """A mechanism's outcome table: perturb arrays of true bits with os.urandom draws."""

    def __init__(self, mechanism: RandomizedResponse) -> None:
        table = outcome_table(mechanism)
        if table is None:
            raise ValueError(f"{mechanism.id} has no outcome table")
        no, yes, width = table
        self.rows = np.array([list(no), list(yes)], dtype=np.int8)
        self.mask = (1 << width) - 1

    def perturb(self, true_bits: np.ndarray) -> np.ndarray:
        draws = np.frombuffer(os.urandom(true_bits.size), dtype=np.uint8) & self.mask
        return self.rows[true_bits.ravel().astype(np.intp), draws].reshape(true_bits.shape)


@dataclass
class Cell:
    policy: str
    population: str
    periods: int
    trials: int = 0
    covered: int = 0
    width: float = 0.0
    naive_covered: int = 0
    naive_width: float = 0.0

    @property
    def coverage(self) -> float:
        return self.covered / self.trials

    @property
    def naive_coverage(self) -> float:
        return self.naive_covered / self.trials


def _gate_admits(calls: np.ndarray, periods: int) -> int:
    """Run real PeriodGates: ``calls[d]`` report() calls per period for device d. Returns
    the reports admitted (one per device per period if the gate works)."""
    clock = [0.0]
    policy = CollectionPolicy()
    admitted = 0
    for d in range(calls.size):
        gate = PeriodGate(clock=lambda: clock[0])
        for t in range(periods):
            for k in range(int(calls[d])):
                clock[0] = t * 86_400 + 3600 + k * 60
                admitted += gate.admit("m", policy)
    return admitted


def simulate(policy_name: str, population: str, periods: int, trials: int, devices: int,
             share: float, confidence: float = 0.95, rng: np.random.Generator | None = None,
             gate_check_devices: int = 200) -> Cell:
    """Coverage of one cell over ``trials`` simulated windows (see the module docstring)."""
    rng = rng or np.random.default_rng()
    policy = POLICIES[policy_name]
    wire = _Table(WIRE)
    memo = _Table(split(WIRE, LAYER)) if policy.instantaneous else wire
    layer = _Table(LAYER) if policy.instantaneous else None
    cell = Cell(policy_name, population, periods)
    if population == "many calls":
        # The gate, for real: every call beyond a period's first must be dropped.
        calls = rng.integers(1, 11, gate_check_devices)
        admitted = _gate_admits(calls, periods)
        if admitted != gate_check_devices * periods:
            raise AssertionError(f"PeriodGate admitted {admitted} reports, expected "
                                 f"{gate_check_devices * periods}")
    for _ in range(trials):
        # Devices present in each period: (periods, devices) indices into the population.
        if population == "half replaced":
            total = devices + (periods - 1) * (devices // 2)
            active = np.empty((periods, devices), dtype=np.int64)
            current = np.arange(devices)
            nxt = devices
            for t in range(periods):
                if t:
                    out = rng.choice(devices, devices // 2, replace=False)
                    current = current.copy()
                    current[out] = np.arange(nxt, nxt + devices // 2)
                    nxt += devices // 2
                active[t] = current
        else:  # the same devices every period (the gate has made many calls into one)
            total = devices
            active = np.broadcast_to(np.arange(devices), (periods, devices))
        truth = (rng.random(total) < share).astype(np.int8)
        true_bits = truth[active]                      # (periods, devices)
        if policy.memoization == "fresh":
            reported = wire.perturb(true_bits)
        else:
            answers = memo.perturb(np.stack([np.zeros(total, np.int8),
                                             np.ones(total, np.int8)]))  # (value, device)
            reported = answers[true_bits, active]
            if layer is not None:
                reported = layer.perturb(reported)
        n = np.array([reported.size])
        ones = np.array([int(reported.sum())])
        target = float(true_bits.mean())
        honest = debias(WIRE, ones, n, confidence, policy=policy,
                        periods=np.array([periods]))
        naive = debias(WIRE, ones, n, confidence)
        cell.trials += 1
        cell.covered += bool(honest.ci_low[0] <= target <= honest.ci_high[0])
        cell.width += float(honest.ci_high[0] - honest.ci_low[0])
        cell.naive_covered += bool(naive.ci_low[0] <= target <= naive.ci_high[0])
        cell.naive_width += float(naive.ci_high[0] - naive.ci_low[0])
    cell.width /= cell.trials
    cell.naive_width /= cell.trials
    return cell


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000,
                        help="trials per cell (default %(default)s: a cell whose true coverage "
                             "is 95.5%% falls below 93.5%% by chance about once in 700 at "
                             "1000 trials, once in 20 at 500)")
    parser.add_argument("--devices", type=int, default=2000)
    parser.add_argument("--share", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the simulated population (coins always come from "
                             "os.urandom)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    print(f"wire {WIRE.id}, instantaneous layer {LAYER.id}, {args.devices} devices per "
          f"period, true share {args.share}, {args.trials} trials per cell, 95% intervals")
    print(f"{'policy':24} {'population':14} {'T':>3} {'coverage':>9} {'mean width':>11}   "
          f"{'naive cov.':>10} {'naive width':>11}")
    failures = []
    for policy in POLICIES:
        for population in POPULATIONS:
            for periods in WINDOWS:
                cell = simulate(policy, population, periods, args.trials, args.devices,
                                args.share, rng=rng)
                ok = 0.935 <= cell.coverage <= 1.0
                failures += [] if ok else [cell]
                print(f"{policy:24} {population:14} {periods:>3} {cell.coverage:>9.3f} "
                      f"{cell.width:>11.4f}   {cell.naive_coverage:>10.3f} "
                      f"{cell.naive_width:>11.4f}{'' if ok else '   <- OUT OF [0.935, 1]'}")
                sys.stdout.flush()
    print(f"{time.monotonic() - started:.0f} s; "
          f"{'every cell within [0.935, 1]' if not failures else f'{len(failures)} cells out'}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
