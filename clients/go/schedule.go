package lockd

import "time"

// The heartbeat schedule of docs/protocol.md section 8.2, as pure functions.

// RTTAlpha is the EWMA weight of a new round-trip sample.
const RTTAlpha = 0.2

// DefaultMinHeartbeatInterval is the floor of the heartbeat interval.
const DefaultMinHeartbeatInterval = time.Millisecond

// BaseInterval is lease / 4.
func BaseInterval(lease time.Duration) time.Duration { return lease / 4 }

// ClientTimeout is 0.8 x lease: the pessimism deadline, counted from the send of the last answered frame.
func ClientTimeout(lease time.Duration) time.Duration { return lease * 4 / 5 }

// SmoothRTT folds one sample into the EWMA; the first sample (prev < 0) is taken as is.
func SmoothRTT(prev, sample time.Duration) time.Duration {
	if prev < 0 {
		return sample
	}
	return prev + time.Duration(RTTAlpha*float64(sample-prev))
}

// HeartbeatInterval is clamp(lease/4 - 2 x smoothedRTT, min, lease/4); the upper bound wins.
func HeartbeatInterval(lease, smoothedRTT, min time.Duration) time.Duration {
	base := BaseInterval(lease)
	iv := base - 2*smoothedRTT
	if iv < min {
		iv = min
	}
	if iv > base {
		iv = base
	}
	return iv
}
