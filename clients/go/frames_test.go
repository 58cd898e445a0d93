package lockd

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// The test vectors of docs/protocol.md section 9 and the session of section 10.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodeVectors(t *testing.T) {
	got, err := EncodeAcquire("jobs/nightly", "", 5000, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, "01 00 00 14 01 00 00 00 13 88 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79"); !bytes.Equal(got, want) {
		t.Fatalf("ACQUIRE\n got %x\nwant %x", got, want)
	}
	got, _ = EncodeAcquire("jobs/nightly", "host-12/pid-4411", 5000, false)
	if want := unhex(t, "01 00 00 24 01 00 00 00 13 88 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79 68 6f 73 74 2d 31 32 2f 70 69 64 2d 34 34 31 31"); !bytes.Equal(got, want) {
		t.Fatalf("ACQUIRE with owner\n got %x\nwant %x", got, want)
	}
	got, _ = EncodeAcquire("jobs/nightly", "", 5000, true)
	if got[5] != OptionTry {
		t.Fatalf("TRY option byte %x", got[5])
	}
	if want := unhex(t, "02 00 00 00"); !bytes.Equal(HeartbeatFrame, want) {
		t.Fatalf("HEARTBEAT %x", HeartbeatFrame)
	}
	if _, err := EncodeAcquire("x", "", 0, false); err == nil {
		t.Fatal("lease 0 must be refused")
	}
}

func TestDecodeVectors(t *testing.T) {
	cases := []struct {
		hex  string
		want Frame
	}{
		{"81 01 00 08 00 00 00 00 00 00 00 01", Frame{Type: TypeAcquired, Flags: FlagReply, Token: 1}},
		{"81 00 00 08 00 00 00 00 00 00 00 07", Frame{Type: TypeAcquired, Token: 7}},
		{"82 01 00 00", Frame{Type: TypeWaiting, Flags: FlagReply}},
		{"ff 00 00 0d 13 6c 6f 63 6b 20 69 73 20 68 65 6c 64", Frame{Type: TypeError, Code: CodeLockBusy, Message: "lock is held"}},
		{"ff 00 00 0c 24 73 68 61 72 64 20 67 61 6d 6d 61", Frame{Type: TypeError, Code: CodeWrongShard, Message: "shard gamma"}},
		{"ff 00 00 0b 14 6c 6f 63 6b 2d 64 65 6c 61 79", Frame{Type: TypeError, Code: CodeLockDelayed, Message: "lock-delay"}},
		{"81 00 00 08 00 00 01 00 00 00 00 05", Frame{Type: TypeAcquired, Token: 1<<40 + 5}},
	}
	for _, c := range cases {
		var r Reader
		frames, err := r.Push(unhex(t, c.hex))
		if err != nil || len(frames) != 1 || frames[0] != c.want {
			t.Fatalf("%s: got %+v %v, want %+v", c.hex, frames, err, c.want)
		}
	}
}

func TestReaderSplitAndCoalesced(t *testing.T) {
	// Section 10: B's whole inbound stream, fed one byte at a time and all at once.
	stream := unhex(t, "82 01 00 00 81 00 00 08 00 00 00 00 00 00 00 02 81 01 00 08 00 00 00 00 00 00 00 02")
	want := []Frame{{Type: TypeWaiting, Flags: FlagReply}, {Type: TypeAcquired, Token: 2}, {Type: TypeAcquired, Flags: FlagReply, Token: 2}}
	var r Reader
	var got []Frame
	for i := range stream {
		f, err := r.Push(stream[i : i+1])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f...)
	}
	var r2 Reader
	all, _ := r2.Push(stream)
	for _, g := range [][]Frame{got, all} {
		if len(g) != len(want) {
			t.Fatalf("got %+v", g)
		}
		for i := range want {
			if g[i] != want[i] {
				t.Fatalf("frame %d: got %+v want %+v", i, g[i], want[i])
			}
		}
	}
}

func TestReaderRejects(t *testing.T) {
	for _, h := range []string{"81 01 00 07", "82 01 00 01", "ff 00 00 00", "07 00 00 00", "16 03 01 00", "48 54 54 50"} {
		var r Reader
		if _, err := r.Push(unhex(t, h)); err == nil {
			t.Fatalf("%s: accepted", h)
		}
	}
}

func TestSchedule(t *testing.T) {
	ms := time.Millisecond
	cases := []struct{ lease, rtt, interval, timeout time.Duration }{
		{5000 * ms, 0, 1250 * ms, 4000 * ms},
		{5000 * ms, 10 * ms, 1230 * ms, 4000 * ms},
		{1000 * ms, 50 * ms, 150 * ms, 800 * ms},
		{1000 * ms, 200 * ms, 1 * ms, 800 * ms},
		{2 * ms, 0, 500 * time.Microsecond, 1600 * time.Microsecond},
	}
	for _, c := range cases {
		if got := HeartbeatInterval(c.lease, c.rtt, DefaultMinHeartbeatInterval); got != c.interval {
			t.Errorf("interval(%v, %v) = %v, want %v", c.lease, c.rtt, got, c.interval)
		}
		if got := ClientTimeout(c.lease); got != c.timeout {
			t.Errorf("clientTimeout(%v) = %v, want %v", c.lease, got, c.timeout)
		}
	}
	if got := SmoothRTT(10*ms, 20*ms); got != 12*ms {
		t.Errorf("EWMA: %v", got)
	}
	if got := SmoothRTT(-1, 7*ms); got != 7*ms {
		t.Errorf("first sample: %v", got)
	}
	if ClassOfCode(0x01) != "server" || ClassOfCode(0x12) != "lock" || ClassOfCode(0x21) != "client" || ClassOfCode(0x35) != "client" {
		t.Error("classes")
	}
}
