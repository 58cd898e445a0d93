package lockd

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/rand"
	"sync"
	"time"
)

// The heartbeat schedule of docs/protocol.md section 8.2 and the reconnect
// pacing of section 8.5, as pure functions.

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

// PauseBounds are the bounds of the reconnect pacing (docs/protocol.md
// section 8.5): the pause before the next address of a round is drawn from
// [NextAddressMin, NextAddressMax); the backoff after a whole round starts
// from BackoffBase, doubles per round and stops at BackoffMax.
type PauseBounds struct {
	NextAddressMin, NextAddressMax time.Duration
	BackoffBase, BackoffMax        time.Duration
}

// DefaultPauseBounds are every bundled client's: 10-50 ms within a round,
// 50 ms doubling to 2 s after one.
var DefaultPauseBounds = PauseBounds{
	NextAddressMin: 10 * time.Millisecond,
	NextAddressMax: 50 * time.Millisecond,
	BackoffBase:    50 * time.Millisecond,
	BackoffMax:     2 * time.Second,
}

// ReconnectPause is the pause before the next connect after failure number
// failures (1, 2, ...; failures in a row since a server last answered) over
// a list of addresses addresses, for one draw in [0, 1):
//
//	failures % addresses != 0 (the round goes on):
//	    NextAddressMin + draw * (NextAddressMax - NextAddressMin)
//	else (round k = failures / addresses is done):
//	    base = min(BackoffMax, BackoffBase * 2^k)
//	    base/2 + draw * base/2
//
// The rule of all three bundled clients, checked on the vectors of
// test/conformance/backoff.json (to the nanosecond: the draw's share is
// truncated to a whole Duration). The doubling stops at the cap, so no round
// number overflows.
func ReconnectPause(failures, addresses int, draw float64, b PauseBounds) time.Duration {
	if failures%addresses != 0 {
		return b.NextAddressMin + time.Duration(draw*float64(b.NextAddressMax-b.NextAddressMin))
	}
	base := b.BackoffBase
	for round := failures / addresses; round > 0 && base < b.BackoffMax; round-- {
		base *= 2
	}
	if base > b.BackoffMax {
		base = b.BackoffMax
	}
	return base/2 + time.Duration(draw*float64(base/2))
}

// jitter is where the pauses' draws come from: a source of this package's
// own, seeded from crypto/rand. math/rand's global source is seeded with 1
// until Go 1.20, so every process drew the same pauses, and the clients of a
// failed server reconnected in step.
var jitter = struct {
	sync.Mutex
	r *rand.Rand
}{r: rand.New(rand.NewSource(jitterSeed()))}

func jitterSeed() int64 {
	var b [8]byte
	if _, err := crand.Read(b[:]); err != nil {
		return time.Now().UnixNano()
	}
	return int64(binary.LittleEndian.Uint64(b[:]))
}

// draw is a number in [0, 1) for one pause.
func draw() float64 {
	jitter.Lock()
	defer jitter.Unlock()
	return jitter.r.Float64()
}
