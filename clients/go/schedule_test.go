package lockd

import (
	"encoding/json"
	"math"
	"os"
	"testing"
	"time"
)

// The reconnect pacing vectors shared by all three clients.
type backoffVectors struct {
	Sets []struct {
		Note   string
		Bounds struct {
			NextAddressMinMs, NextAddressMaxMs, BackoffBaseMs, BackoffMaxMs float64
		}
		Vectors []struct {
			Failures, Addresses int
			Draw, PauseMs       float64
		}
	}
}

func ms(v float64) time.Duration { return time.Duration(math.Round(v * float64(time.Millisecond))) }

func TestReconnectPauseVectors(t *testing.T) {
	raw, err := os.ReadFile("../../test/conformance/backoff.json")
	if err != nil {
		t.Fatal(err)
	}
	var v backoffVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Sets) == 0 {
		t.Fatal("empty vector file")
	}
	for i, set := range v.Sets {
		b := PauseBounds{ms(set.Bounds.NextAddressMinMs), ms(set.Bounds.NextAddressMaxMs), ms(set.Bounds.BackoffBaseMs), ms(set.Bounds.BackoffMaxMs)}
		if i == 0 && b != DefaultPauseBounds {
			t.Errorf("the first set's bounds %+v are not DefaultPauseBounds %+v", b, DefaultPauseBounds)
		}
		if len(set.Vectors) == 0 {
			t.Errorf("%s: no vectors", set.Note)
		}
		for _, c := range set.Vectors {
			got := ReconnectPause(c.Failures, c.Addresses, c.Draw, b)
			// Within 1 ns: a Duration is whole nanoseconds, the vector a float of ms.
			if diff := math.Abs(float64(got) - c.PauseMs*float64(time.Millisecond)); diff > 1 {
				t.Errorf("%s: ReconnectPause(%d, %d, %v) = %v, want %v ms", set.Note, c.Failures, c.Addresses, c.Draw, got, c.PauseMs)
			}
		}
	}
}

func TestJitterIsSeeded(t *testing.T) {
	// Two sources seeded as the package seeds its own do not draw alike
	// (the global source of Go 1.19, seeded with 1, draws alike in every process).
	a := jitterSeed()
	b := jitterSeed()
	if a == b {
		t.Fatalf("two seeds alike: %d", a)
	}
	for i := 0; i < 100; i++ {
		if d := draw(); d < 0 || d >= 1 {
			t.Fatalf("draw %v outside [0, 1)", d)
		}
	}
}
