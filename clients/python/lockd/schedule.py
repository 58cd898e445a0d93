"""The heartbeat schedule of docs/protocol.md section 8.2, as pure functions (seconds)."""

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
