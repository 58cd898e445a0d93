"""The heartbeat schedule of docs/protocol.md section 8.2 and the reconnect pacing of section 8.5, as pure functions (seconds)."""

from dataclasses import dataclass

RTT_ALPHA = 0.2
MIN_HEARTBEAT_INTERVAL = 0.001


def base_interval(lease: float) -> float:
    return lease / 4


def client_timeout(lease: float) -> float:
    """0.8 x lease: the pessimism deadline, counted from the send of the last answered frame."""
    return lease * 0.8


def smooth_rtt(prev: float | None, sample: float) -> float:
    """EWMA with alpha 0.2; the first sample (prev None) is taken as is."""
    return sample if prev is None else prev + RTT_ALPHA * (sample - prev)


def heartbeat_interval(lease: float, smoothed_rtt: float, minimum: float = MIN_HEARTBEAT_INTERVAL) -> float:
    """clamp(lease/4 - 2 x smoothedRTT, minimum, lease/4); the upper bound wins."""
    base = base_interval(lease)
    return min(max(base - 2 * smoothed_rtt, minimum), base)


@dataclass(frozen=True)
class PauseBounds:
    """The bounds of the reconnect pacing, in seconds: the pause before the next address of a round is
    drawn from [next_address_min, next_address_max); the backoff after a whole round starts from
    backoff_base, doubles per round and stops at backoff_max."""

    next_address_min: float = 0.010
    next_address_max: float = 0.050
    backoff_base: float = 0.050
    backoff_max: float = 2.0


PAUSE_BOUNDS = PauseBounds()
"""Every bundled client's: 10-50 ms within a round, 50 ms doubling to 2 s after one."""


def reconnect_pause(failures: int, addresses: int, draw: float, bounds: PauseBounds = PAUSE_BOUNDS) -> float:
    """The pause before the next connect after failure number ``failures`` (1, 2, ...; failures in a row
    since a server last answered) over a list of ``addresses`` addresses, for one ``draw`` in [0, 1)::

        failures % addresses != 0 (the round goes on):
            next_address_min + draw * (next_address_max - next_address_min)
        else (round k = failures // addresses is done):
            base = min(backoff_max, backoff_base * 2**k)
            base / 2 + draw * base / 2

    The rule of all three bundled clients, checked on the vectors of test/conformance/backoff.json.
    The doubling stops at the cap, so no round number overflows a float."""
    if failures % addresses:
        return bounds.next_address_min + draw * (bounds.next_address_max - bounds.next_address_min)
    base = bounds.backoff_base
    rounds = failures // addresses
    while rounds > 0 and base < bounds.backoff_max:
        base *= 2
        rounds -= 1
    base = min(base, bounds.backoff_max)
    return base / 2 + draw * (base / 2)
