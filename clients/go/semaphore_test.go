package lockd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Semaphores and shared claims: the ACQUIRE with LIMIT / SHARED, the ACQUIRED
// with FLAG_SLOT, and the client's strict checks of the slot. The first vectors
// of each test are those of docs/protocol.md section 9; the others are the
// bytes the TypeScript codec (src/protocol encodeAcquire, encodeAcquiredSlot)
// produces for the same requests.

func TestEncodeSemaphoreVectors(t *testing.T) {
	cases := []struct {
		req  AcquireRequest
		want string
	}{
		// Section 9 "ACQUIRE limit 3": options 0x04, the limit at body offset 6, name_length at 8.
		{AcquireRequest{Name: "jobs/nightly", LeaseMs: 5000, Limit: 3},
			"01 00 00 16 01 04 00 00 13 88 00 03 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79"},
		// Section 9 "ACQUIRE shared try": options 0x03, no limit field.
		{AcquireRequest{Name: "jobs/nightly", LeaseMs: 5000, Shared: true, Try: true},
			"01 00 00 14 01 03 00 00 13 88 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79"},
		{AcquireRequest{Name: "jobs/nightly", Owner: "host-12/pid-4411", LeaseMs: 5000, Try: true, Limit: 3},
			"01 00 00 26 01 05 00 00 13 88 00 03 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79 68 6f 73 74 2d 31 32 2f 70 69 64 2d 34 34 31 31"},
		{AcquireRequest{Name: "jobs/nightly", LeaseMs: 5000, Try: true, Limit: MaxLimit},
			"01 00 00 16 01 05 00 00 13 88 ff ff 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79"},
		// shared: options 0x02, no limit field.
		{AcquireRequest{Name: "jobs/nightly", LeaseMs: 5000, Shared: true},
			"01 00 00 14 01 02 00 00 13 88 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79"},
		// limit 1 (and 0, its default) is sent without LIMIT: the bytes of an exclusive claim.
		{AcquireRequest{Name: "jobs/nightly", LeaseMs: 5000, Limit: 1},
			"01 00 00 14 01 00 00 00 13 88 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79"},
		{AcquireRequest{Name: "jobs/nightly", LeaseMs: 5000},
			"01 00 00 14 01 00 00 00 13 88 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79"},
	}
	for _, c := range cases {
		got, err := EncodeAcquireRequest(c.req)
		if err != nil {
			t.Fatalf("%+v: %v", c.req, err)
		}
		if want := unhex(t, c.want); !bytes.Equal(got, want) {
			t.Fatalf("%+v\n got %x\nwant %x", c.req, got, want)
		}
	}
	for _, bad := range []AcquireRequest{
		{Name: "x", LeaseMs: 5000, Limit: -1},
		{Name: "x", LeaseMs: 5000, Limit: MaxLimit + 1},
		{Name: "x", LeaseMs: 5000, Limit: 2, Shared: true},
	} {
		if _, err := EncodeAcquireRequest(bad); err == nil {
			t.Fatalf("%+v: encoded", bad)
		}
	}
}

func TestDecodeSlotVectors(t *testing.T) {
	cases := []struct {
		hex  string
		want Frame
		slot bool
	}{
		// Section 9 "ACQUIRED slot 0", "ACQUIRED push s2", "ERROR LIMIT_MISMATCH".
		{"81 03 00 0a 00 00 00 00 00 00 00 01 00 00", Frame{Type: TypeAcquired, Flags: FlagReply | FlagSlot, Token: 1, Slot: 0}, true},
		{"81 02 00 0a 00 00 00 00 00 00 00 09 00 02", Frame{Type: TypeAcquired, Flags: FlagSlot, Token: 9, Slot: 2}, true},
		{"ff 00 00 0f 25 6c 69 6d 69 74 20 33 2c 20 6e 6f 74 20 35", Frame{Type: TypeError, Code: CodeLimitMismatch, Message: "limit 3, not 5"}, false},
		{"81 03 00 0a 00 00 00 00 00 00 00 07 00 02", Frame{Type: TypeAcquired, Flags: FlagReply | FlagSlot, Token: 7, Slot: 2}, true},
		{"81 02 00 0a 00 00 00 00 00 00 00 07 00 02", Frame{Type: TypeAcquired, Flags: FlagSlot, Token: 7, Slot: 2}, true},
		{"81 03 00 0a 00 00 01 00 00 00 00 05 ff fe", Frame{Type: TypeAcquired, Flags: FlagReply | FlagSlot, Token: 1<<40 + 5, Slot: 65534}, true},
		{"81 03 00 0a 00 00 00 00 00 00 00 09 00 00", Frame{Type: TypeAcquired, Flags: FlagReply | FlagSlot, Token: 9, Slot: 0}, true},
		{"81 01 00 08 00 00 00 00 00 00 00 01", Frame{Type: TypeAcquired, Flags: FlagReply, Token: 1}, false},
	}
	for _, c := range cases {
		var r Reader
		frames, err := r.Push(unhex(t, c.hex))
		if err != nil || len(frames) != 1 || frames[0] != c.want || frames[0].HasSlot() != c.slot {
			t.Fatalf("%s: got %+v %v, want %+v", c.hex, frames, err, c.want)
		}
	}
	// FLAG_SLOT and the body length must agree; 9 bytes is no ACQUIRED at all.
	for _, h := range []string{
		"81 02 00 08 00 00 00 00 00 00 00 07",
		"81 01 00 0a 00 00 00 00 00 00 00 07 00 02",
		"81 03 00 09 00 00 00 00 00 00 00 07 00",
		"81 03 00 0b 00 00 00 00 00 00 00 07 00 02 00",
	} {
		var r Reader
		if _, err := r.Push(unhex(t, h)); err == nil || !isViolation(err) {
			t.Fatalf("%s: %v", h, err)
		}
	}
}

func acquiredSlot(reply bool, token uint64, slot uint16) []byte {
	f := []byte{TypeAcquired, FlagSlot, 0, 10, byte(token >> 56), byte(token >> 48), byte(token >> 40), byte(token >> 32), byte(token >> 24), byte(token >> 16), byte(token >> 8), byte(token), byte(slot >> 8), byte(slot)}
	if reply {
		f[1] |= FlagReply
	}
	return f
}

func acquired(reply bool, token uint64) []byte {
	f := []byte{TypeAcquired, 0, 0, 8, byte(token >> 56), byte(token >> 48), byte(token >> 40), byte(token >> 32), byte(token >> 24), byte(token >> 16), byte(token >> 8), byte(token)}
	if reply {
		f[1] |= FlagReply
	}
	return f
}

// scriptedServer is a server on 127.0.0.1:0: on each connection, the n-th frame
// the client sends (0: the ACQUIRE) is answered with answers[n] (nil: nothing);
// past the end of answers it answers nothing. The ACQUIRE bodies go to acquires,
// and the index of every frame received to frames, as they arrive.
func scriptedServer(t *testing.T, answers ...[]byte) (addr string, acquires <-chan []byte, frames <-chan int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	acq := make(chan []byte, 16)
	seen := make(chan int, 64)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func(conn net.Conn) {
				defer conn.Close()
				head := make([]byte, 4)
				for n := 0; ; n++ {
					if _, err := io.ReadFull(conn, head); err != nil {
						return
					}
					body := make([]byte, int(head[2])<<8|int(head[3]))
					if _, err := io.ReadFull(conn, body); err != nil {
						return
					}
					if n == 0 {
						acq <- body
					}
					select {
					case seen <- n:
					default:
					}
					if n < len(answers) && answers[n] != nil {
						if _, err := conn.Write(answers[n]); err != nil {
							return
						}
					}
				}
			}(conn)
		}
	}()
	return ln.Addr().String(), acq, seen
}

func waitLost(t *testing.T, lock *Lock) *Error {
	t.Helper()
	select {
	case <-lock.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock's context was not cancelled")
	}
	var e *Error
	if !errors.As(lock.Err(), &e) {
		t.Fatalf("Err() = %v", lock.Err())
	}
	return e
}

// The limit travels in the ACQUIRE; the grant's slot is the lock's; heartbeat
// answers that repeat the slot keep it held, one that changes it is a protocol
// violation (as a changed token is).
func TestSemaphoreGrantCarriesTheSlotAndAChangedSlotLosesTheLock(t *testing.T) {
	addr, acquires, frames := scriptedServer(t,
		append([]byte{0x82, 0x01, 0, 0}, acquiredSlot(false, 5, 1)...), // WAITING, then the promotion push
		acquiredSlot(true, 5, 1), // heartbeat 1: the same slot
		acquiredSlot(true, 5, 2), // heartbeat 2: another slot
	)
	lock, err := (&Client{Servers: addr}).Acquire(context.Background(), "pool/db", Options{Lease: testLease, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	body := <-acquires
	if body[1] != OptionLimit || body[6] != 0 || body[7] != 3 || string(body[10:]) != "pool/db"+(&Client{}).owner(Options{}) {
		t.Fatalf("ACQUIRE body %x", body)
	}
	if slot, ok := lock.Slot(); !ok || slot != 1 || lock.Token() != 5 {
		t.Fatalf("slot %d %v token %d", slot, ok, lock.Token())
	}
	timeout := time.After(5 * time.Second)
	for n := 0; n < 2; {
		select {
		case n = <-frames: // heartbeat 2 sent: heartbeat 1's answer (slot 1) was accepted
		case <-timeout:
			t.Fatalf("no second heartbeat; lock error %v", lock.Err())
		}
	}
	e := waitLost(t, lock)
	if e.Code != "LOCK_LOST" || e.Why != "protocol" || !strings.Contains(e.Message, "slot 2 (held slot 1)") {
		t.Fatalf("error %+v", e)
	}
}

// Before the grant, a slot that does not fit the claim ends it with
// PROTOCOL_VIOLATION: no slot for a limit above 1, a slot at or above the
// limit, a slot for limit 1.
func TestSlotThatDoesNotFitTheClaimIsAViolation(t *testing.T) {
	cases := []struct {
		answer []byte
		opts   Options
		msg    string
	}{
		{acquired(true, 4), Options{Limit: 3}, "without a slot for a claim of limit 3"},
		{acquiredSlot(true, 4, 3), Options{Limit: 3}, "slot 3 for a claim of limit 3"},
		{acquiredSlot(true, 4, 0), Options{}, "slot 0 for a claim of limit 1"},
		{acquiredSlot(true, 4, 0), Options{Shared: true}, "slot 0 for a claim of limit 1"},
	}
	for _, c := range cases {
		addr, _, _ := scriptedServer(t, c.answer)
		c.opts.Lease = testLease
		lock, err := (&Client{Servers: addr}).Acquire(context.Background(), "pool/db", c.opts)
		if lock != nil {
			lock.Release()
			t.Fatalf("%+v: granted", c.opts)
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != "PROTOCOL_VIOLATION" || e.Class != "client" || !strings.Contains(e.Message, c.msg) {
			t.Fatalf("%+v: %v", c.opts, err)
		}
	}
}

// An exclusive lock's heartbeat answered with a slot loses the lock (protocol).
func TestSlotOnAnExclusiveHeartbeatLosesTheLock(t *testing.T) {
	addr, acquires, _ := scriptedServer(t, acquired(true, 8), acquiredSlot(true, 8, 0))
	lock, err := (&Client{Servers: addr}).Acquire(context.Background(), "jobs/x", Options{Lease: testLease, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if body := <-acquires; body[1] != OptionShared || int(body[6])<<8|int(body[7]) != len("jobs/x") {
		t.Fatalf("ACQUIRE body %x", body)
	}
	if slot, ok := lock.Slot(); ok || slot != 0 {
		t.Fatalf("slot %d %v", slot, ok)
	}
	if e := waitLost(t, lock); e.Why != "protocol" || !strings.Contains(e.Message, "slot 0 for a claim of limit 1") {
		t.Fatalf("error %+v", e)
	}
}

// LIMIT_MISMATCH (0x25) ends the claim with ErrLimitMismatch, class client, the
// server's message kept, and the next address is not tried.
func TestLimitMismatchEndsTheClaimAndIsNotRetried(t *testing.T) {
	const msg = "pool/db has limit 3 among its live sessions; this claim asked for limit 2"
	mismatch, acquires := scripted(t, errorFrame(CodeLimitMismatch, msg))
	granting, _ := scripted(t, acquiredSlot(true, 9, 0))
	client := &Client{Servers: mismatch + "," + granting, RetryFirstConnect: true}
	lock, err := client.Acquire(context.Background(), "pool/db", Options{Lease: 2 * time.Second, Limit: 2})
	if lock != nil {
		lock.Release()
		t.Fatal("granted: the claim moved on to the next address")
	}
	if !errors.Is(err, ErrLimitMismatch) {
		t.Fatalf("err %v", err)
	}
	e := err.(*Error)
	if e.Code != "LIMIT_MISMATCH" || e.Class != "client" || e.ServerCode != CodeLimitMismatch || e.ServerMessage != msg || e.Lock != "pool/db" {
		t.Fatalf("error %+v", e)
	}
	if opt := <-acquires; opt != OptionLimit {
		t.Fatalf("options %#x", opt)
	}
	if CodeName(0x25) != "LIMIT_MISMATCH" || ClassOfCode(CodeLimitMismatch) != "client" {
		t.Fatal("name or class of 0x25")
	}
}

// A limit the frame cannot carry, or shared with a limit above 1, is refused
// as BAD_REQUEST before any connection.
func TestBadLimitIsRefusedWithoutConnecting(t *testing.T) {
	var dials int32
	client := &Client{Servers: "127.0.0.1:1", Dial: func(ctx context.Context, address string) (net.Conn, error) {
		atomic.AddInt32(&dials, 1)
		return nil, errors.New("no dialing in this test")
	}}
	for _, opts := range []Options{{Limit: -1}, {Limit: MaxLimit + 1}, {Limit: 3, Shared: true}} {
		lock, err := client.Acquire(context.Background(), "pool/db", opts)
		if lock != nil || !errors.Is(err, ErrBadRequest) || err.(*Error).Class != "client" {
			t.Fatalf("%+v: %v", opts, err)
		}
	}
	if n := atomic.LoadInt32(&dials); n != 0 {
		t.Fatalf("%d dials", n)
	}
}
