package lockd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Reclaim (docs/protocol.md section 14): the ACQUIRE with RECLAIM, and a
// held lock that rides out a clean stop of the server, against scripted
// servers over real sockets on 127.0.0.1.

// The bytes of the TypeScript codec (src/protocol encodeAcquire with reclaim)
// for the same requests: the token after lease_ms (and the limit), the slot
// after the token only with LIMIT, then name_length.
func TestEncodeReclaimVectors(t *testing.T) {
	cases := []struct {
		req  AcquireRequest
		want string
	}{
		{AcquireRequest{Name: "jobs/nightly", LeaseMs: 5000, Reclaim: &Reclaim{Token: 41, Slot: -1}},
			"01 00 00 1c 01 08 00 00 13 88 00 00 00 00 00 00 00 29 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79"},
		{AcquireRequest{Name: "jobs/nightly", Owner: "host-12/pid-4411", LeaseMs: 5000, Limit: 3, Reclaim: &Reclaim{Token: 1<<40 + 5, Slot: 2}},
			"01 00 00 30 01 0c 00 00 13 88 00 03 00 00 01 00 00 00 00 05 00 02 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79 68 6f 73 74 2d 31 32 2f 70 69 64 2d 34 34 31 31"},
		{AcquireRequest{Name: "jobs/nightly", Owner: "w", LeaseMs: 5000, Shared: true, Reclaim: &Reclaim{Token: 0xfedcba9876543210}},
			"01 00 00 1d 01 0a 00 00 13 88 fe dc ba 98 76 54 32 10 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79 77"},
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
	// A semaphore's reclaim names a slot below the limit.
	for _, slot := range []int{-1, 3} {
		if _, err := EncodeAcquireRequest(AcquireRequest{Name: "x", LeaseMs: 5000, Limit: 3, Reclaim: &Reclaim{Token: 1, Slot: slot}}); err == nil {
			t.Fatalf("slot %d of limit 3: encoded", slot)
		}
	}
	// RECLAIMABLE on ACQUIRED (with and without a slot) and RECLAIM on ERROR are read and kept.
	var r Reader
	frames, err := r.Push(append(append(unhex(t, "81 05 00 08 00 00 00 00 00 00 00 07"), unhex(t, "81 07 00 0a 00 00 00 00 00 00 00 07 00 02")...),
		errorFrameFlags(CodeShuttingDown, FlagReclaim, "restarting")...))
	if err != nil || len(frames) != 3 || !frames[0].Reclaimable() || !frames[0].Reply() || !frames[1].Reclaimable() || frames[1].Slot != 2 ||
		frames[2].Flags != FlagReclaim || frames[2].Code != CodeShuttingDown || frames[2].Reclaimable() {
		t.Fatalf("%+v %v", frames, err)
	}
	if CodeName(0x15) != "RECLAIM_REFUSED" || ClassOfCode(CodeReclaimRefused) != "lock" {
		t.Fatal("name or class of 0x15")
	}
}

func errorFrameFlags(code, flags byte, msg string) []byte {
	f := errorFrame(code, msg)
	f[1] = flags
	return f
}

const fakeToken = 7

// grantFrame is ACQUIRED with these flags and token 7, with the slot when slot >= 0.
func grantFrame(flags byte, token uint64, slot int) []byte {
	if slot < 0 {
		f := acquired(false, token)
		f[1] = flags
		return f
	}
	f := acquiredSlot(false, token, uint16(slot))
	f[1] = flags | FlagSlot
	return f
}

// reclaimFake is a server with reclaim on: it grants a fresh claim token 7
// (in slot `slot` when that is >= 0) with flags grantFlags, answers every
// HEARTBEAT with ACQUIRED (hbFlags, REPLY), and stops cleanly on stop(): ERROR
// SHUTTING_DOWN with the given flags to every session, and the close. A
// reclaim (ACQUIRE with OptionReclaim) is answered with answer(body) (nil:
// nothing, the connection stays open; close: the connection closes after
// it); on a reclaimed connection the HEARTBEATs are answered like the
// grant's, and counted.
type reclaimFake struct {
	t          *testing.T
	ln         net.Listener
	addr       string
	slot       int
	grantFlags byte
	hbFlags    byte
	answer     func(body []byte) (reply []byte, close bool)

	mu    sync.Mutex
	conns []*fakeConn // the sessions a stop ends
	all   []*fakeConn // every connection, closed at the end of the test
	// silent: HEARTBEATs of fresh claims are not answered from now on (one arriving is reported on unanswered).
	silent bool
	// held: the fresh claims' connections (heldConns reports each as it is granted); pending: those whose HEARTBEAT went unanswered.
	held      []*fakeConn
	heldConns chan *fakeConn
	pending   []*fakeConn

	reclaims          chan []byte   // the body of every reclaim, as it arrives
	reclaimHeartbeats chan struct{} // one per HEARTBEAT answered on a reclaimed connection
	heartbeats        chan struct{} // one per HEARTBEAT answered on a fresh claim's connection
	unanswered        chan struct{}
	wg                sync.WaitGroup
}

type fakeConn struct {
	mu   sync.Mutex
	conn net.Conn
	done chan struct{} // closed when the client has closed the connection (or the test ended)
}

func (c *fakeConn) write(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn.Write(b)
}

// grantBack answers a reclaim as a server that has it: ACQUIRED with REPLY and RECLAIMABLE, token 7 (and the slot).
func (f *reclaimFake) grantBack(body []byte) ([]byte, bool) {
	return grantFrame(FlagReply|FlagReclaimable, fakeToken, f.slot), false
}

func newReclaimFake(t *testing.T, slot int) *reclaimFake {
	t.Helper()
	f := &reclaimFake{t: t, slot: slot, grantFlags: FlagReply | FlagReclaimable, hbFlags: FlagReply | FlagReclaimable,
		reclaims: make(chan []byte, 64), heldConns: make(chan *fakeConn, 16), reclaimHeartbeats: make(chan struct{}, 256), heartbeats: make(chan struct{}, 256), unanswered: make(chan struct{}, 16)}
	f.answer = f.grantBack
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.serve(ln)
	t.Cleanup(f.close)
	return f
}

func (f *reclaimFake) serve(ln net.Listener) {
	f.ln = ln
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c := &fakeConn{conn: conn, done: make(chan struct{})}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.all = append(f.all, c)
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer close(c.done)
				defer conn.Close()
				f.session(c)
			}()
		}
	}()
}

func (f *reclaimFake) session(c *fakeConn) {
	head := make([]byte, 4)
	reclaimed := false
	for n := 0; ; n++ {
		if _, err := io.ReadFull(c.conn, head); err != nil {
			return
		}
		body := make([]byte, int(binary.BigEndian.Uint16(head[2:])))
		if _, err := io.ReadFull(c.conn, body); err != nil {
			return
		}
		f.mu.Lock()
		answer, hbFlags, silent := f.answer, f.hbFlags, f.silent
		f.mu.Unlock()
		switch {
		case n == 0 && body[1]&OptionReclaim != 0:
			f.reclaims <- body
			reply, close := answer(body)
			if reply != nil {
				c.write(reply)
			}
			if close {
				return
			}
			reclaimed = reply != nil
		case n == 0:
			f.mu.Lock()
			f.held = append(f.held, c)
			f.mu.Unlock()
			c.write(grantFrame(f.grantFlags, fakeToken, f.slot))
			f.heldConns <- c
		case silent && !reclaimed:
			f.mu.Lock()
			f.pending = append(f.pending, c)
			f.mu.Unlock()
			select {
			case f.unanswered <- struct{}{}:
			default:
			}
		default:
			c.write(grantFrame(hbFlags, fakeToken, f.slot))
			counted := f.heartbeats
			if reclaimed {
				counted = f.reclaimHeartbeats
			}
			select {
			case counted <- struct{}{}:
			default:
			}
		}
	}
}

// stop is a clean stop: SHUTTING_DOWN with these ERROR flags to every
// session, and the close (its sending side: a FIN, never a reset that could
// overtake the ERROR; the session ends when the client closes).
func (f *reclaimFake) stop(flags byte) {
	f.end(errorFrameFlags(CodeShuttingDown, flags, "the server is stopping"))
}

// eof closes every session without a word: a bare EOF.
func (f *reclaimFake) eof() { f.end(nil) }

func (f *reclaimFake) end(last []byte) {
	f.mu.Lock()
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		if last != nil {
			c.conn.Write(last)
		}
		c.conn.(*net.TCPConn).CloseWrite()
		c.mu.Unlock()
	}
}

func (f *reclaimFake) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

func (f *reclaimFake) close() {
	f.ln.Close()
	f.mu.Lock()
	all := f.all
	f.mu.Unlock()
	for _, c := range all {
		c.conn.Close()
	}
	f.wg.Wait()
}

func (f *reclaimFake) nextReclaim(t *testing.T) []byte {
	t.Helper()
	select {
	case body := <-f.reclaims:
		return body
	case <-time.After(5 * time.Second):
		t.Fatal("no reclaim arrived within 5 s")
		return nil
	}
}

func (f *reclaimFake) heartbeatsAfterReclaim(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-f.reclaimHeartbeats:
		case <-timeout:
			t.Fatalf("%d of %d heartbeats answered on the reclaimed connection within 10 s", i, n)
		}
	}
}

const reclaimLease = 2 * time.Second

func acquireFrom(t *testing.T, client *Client, opts Options) *Lock {
	t.Helper()
	if opts.Lease == 0 {
		opts.Lease = reclaimLease
	}
	lock, err := client.Acquire(context.Background(), "jobs/compaction", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Release() })
	if lock.Token() != fakeToken {
		t.Fatalf("token %d", lock.Token())
	}
	return lock
}

// A clean stop is ridden out: the reclaim carries the claim (name, lease,
// owner) and its token, OnReclaim reports the same lock, the context is
// never cancelled, the confirmed period moves on from the reclaim's send,
// and heartbeats go on on the new connection.
func TestReclaimRidesOutACleanStop(t *testing.T) {
	f := newReclaimFake(t, -1)
	reclaimed := make(chan *Lock, 4)
	lock := acquireFrom(t, &Client{Servers: f.addr, Owner: "w-1"}, Options{OnReclaim: func(l *Lock) { reclaimed <- l }})
	before := lock.s.confirmedUntil()
	f.stop(FlagReclaim)
	body := f.nextReclaim(t)
	want, _ := EncodeAcquireRequest(AcquireRequest{Name: "jobs/compaction", Owner: "w-1", LeaseMs: 2000, Reclaim: &Reclaim{Token: fakeToken}})
	if !bytes.Equal(body, want[4:]) {
		t.Fatalf("reclaim body %x, want %x", body, want[4:])
	}
	select {
	case l := <-reclaimed:
		if l != lock {
			t.Fatal("OnReclaim was given another Lock")
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("OnReclaim was not called; lock error %v", lock.Err())
	}
	if lock.Context().Err() != nil || lock.Reclaims() != 1 || lock.Reclaiming() || lock.Token() != fakeToken {
		t.Fatalf("after the reclaim: ctx %v, reclaims %d, reclaiming %v, token %d", lock.Context().Err(), lock.Reclaims(), lock.Reclaiming(), lock.Token())
	}
	f.heartbeatsAfterReclaim(t, 2)
	if !lock.s.confirmedUntil().After(before) || !lock.Held() || lock.Err() != nil {
		t.Fatalf("not confirmed again after the reclaim: %v", lock.Err())
	}
	lock.Release()
	if e := lock.Err().(*Error); e.Why != "released" {
		t.Fatalf("after Release: %+v", e)
	}
}

// WithLock's work runs through a reclaim without its context being cancelled.
func TestWithLockWorksThroughAReclaim(t *testing.T) {
	f := newReclaimFake(t, -1)
	reclaimed := make(chan struct{}, 1)
	err := (&Client{Servers: f.addr}).WithLock(context.Background(), "jobs/x", Options{Lease: reclaimLease, OnReclaim: func(*Lock) { reclaimed <- struct{}{} }},
		func(ctx context.Context, token uint64) error {
			f.stop(FlagReclaim)
			select {
			case <-reclaimed:
			case <-ctx.Done():
				return errors.New("the work's context was cancelled by a clean stop")
			case <-time.After(5 * time.Second):
				return errors.New("not reclaimed within 5 s")
			}
			f.heartbeatsAfterReclaim(t, 1)
			return ctx.Err()
		})
	if err != nil {
		t.Fatal(err)
	}
}

// The deadline does not move: while the reclaim goes unanswered, the
// confirmed period is still the one of the last answered send before the
// stop, the lock is held, and at its end the lock is lost (unconfirmed).
func TestReclaimUnansweredIsLostAtTheDeadlineThatDidNotMove(t *testing.T) {
	f := newReclaimFake(t, -1)
	f.set(func() { f.answer = func([]byte) ([]byte, bool) { return nil, false } })
	lock := acquireFrom(t, &Client{Servers: f.addr}, Options{Lease: 3 * time.Second})
	// One HEARTBEAT goes unanswered: from now on nothing the client sent is answered, so its deadline is fixed.
	f.set(func() { f.silent = true })
	select {
	case <-f.unanswered:
	case <-time.After(5 * time.Second):
		t.Fatal("no heartbeat within 5 s")
	}
	deadline := lock.s.confirmedUntil()
	f.stop(FlagReclaim)
	f.nextReclaim(t)
	if got := lock.s.confirmedUntil(); !got.Equal(deadline) {
		t.Fatalf("the reclaim moved the deadline by %v", got.Sub(deadline))
	}
	if !lock.Reclaiming() {
		t.Fatal("not reclaiming while the reclaim is in flight")
	}
	e := waitLost(t, lock)
	if now := time.Now(); now.Before(deadline) {
		t.Fatalf("lost %v before the deadline", deadline.Sub(now))
	}
	if e.Why != "unconfirmed" || !strings.Contains(e.Message, "not reclaimed within") || lock.Held() || lock.Reclaiming() {
		t.Fatalf("error %+v", e)
	}
}

// Every other answer to the reclaim loses the lock.
func TestReclaimAnsweredOtherwiseIsLost(t *testing.T) {
	cases := []struct {
		name   string
		answer []byte
		close  bool
		why    string
		code   byte
		msg    string
	}{
		{"refused", errorFrame(CodeReclaimRefused, "no published grant of this name with that token"), true, "server-error", CodeReclaimRefused, "RECLAIM_REFUSED"},
		{"another token", grantFrame(FlagReply|FlagReclaimable, 8, -1), false, "protocol", 0, "answered with token 8"},
		{"a push", grantFrame(FlagReclaimable, fakeToken, -1), false, "protocol", 0, "without REPLY"},
		{"waiting", []byte{TypeWaiting, FlagReply, 0, 0}, false, "protocol", 0, "WAITING"},
		{"a close", nil, true, "closed", 0, "reclaim"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newReclaimFake(t, -1)
			answer, close := c.answer, c.close
			f.set(func() { f.answer = func([]byte) ([]byte, bool) { return answer, close } })
			reclaimed := 0
			lock := acquireFrom(t, &Client{Servers: f.addr}, Options{OnReclaim: func(*Lock) { reclaimed++ }})
			f.stop(FlagReclaim)
			if body := f.nextReclaim(t); body[1] != OptionReclaim {
				t.Fatalf("options %#x", body[1])
			}
			e := waitLost(t, lock)
			if e.Why != c.why || e.ServerCode != c.code || !strings.Contains(e.Message, c.msg) || !errors.Is(e, ErrLockLost) || lock.Held() {
				t.Fatalf("error %+v", e)
			}
			if c.code == CodeReclaimRefused && e.Class != "lock" {
				t.Fatalf("class %s", e.Class)
			}
			if reclaimed != 0 || lock.Reclaims() != 0 {
				t.Fatal("reported as reclaimed")
			}
		})
	}
}

// A loss as before: a bare EOF, SHUTTING_DOWN without RECLAIM, a grant not
// flagged RECLAIMABLE, a latest ACQUIRED without the flag, or reclaim off.
// No reclaim is tried.
func TestNoReclaimWithoutAllItsConditions(t *testing.T) {
	cases := []struct {
		name      string
		grant, hb byte // the grant's and the heartbeat answers' flags
		opts      Options
		stop      func(f *reclaimFake)
		why       string
	}{
		{"bare EOF", FlagReply | FlagReclaimable, FlagReply | FlagReclaimable, Options{}, (*reclaimFake).eof, "closed"},
		{"no RECLAIM flag", FlagReply | FlagReclaimable, FlagReply | FlagReclaimable, Options{}, func(f *reclaimFake) { f.stop(0) }, "server-error"},
		{"grant not flagged", FlagReply, FlagReply, Options{}, func(f *reclaimFake) { f.stop(FlagReclaim) }, "server-error"},
		{"latest answer not flagged", FlagReply | FlagReclaimable, FlagReply, Options{}, func(f *reclaimFake) { f.stop(FlagReclaim) }, "server-error"},
		{"NoReclaim", FlagReply | FlagReclaimable, FlagReply | FlagReclaimable, Options{NoReclaim: true}, func(f *reclaimFake) { f.stop(FlagReclaim) }, "server-error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newReclaimFake(t, -1)
			f.set(func() {
				f.grantFlags, f.hbFlags = c.grant, c.hb
				f.answer = func([]byte) ([]byte, bool) { t.Error("a reclaim was sent"); return nil, true }
			})
			lock := acquireFrom(t, &Client{Servers: f.addr}, c.opts)
			if c.grant != c.hb {
				// A heartbeat's answer (without RECLAIMABLE) is sent before the stop, on the same connection.
				select {
				case <-f.heartbeats:
				case <-time.After(5 * time.Second):
					t.Fatal("no heartbeat answered within 5 s")
				}
			}
			c.stop(f)
			e := waitLost(t, lock)
			if e.Why != c.why || (c.why == "server-error" && e.ServerCode != CodeShuttingDown) || lock.Reclaiming() || lock.Reclaims() != 0 {
				t.Fatalf("error %+v", e)
			}
		})
	}
}

// A semaphore's grant is reclaimed with its slot; a reclaim answered with another slot loses it.
func TestReclaimOfASemaphoreSlot(t *testing.T) {
	f := newReclaimFake(t, 2)
	lock := acquireFrom(t, &Client{Servers: f.addr, Owner: "w"}, Options{Limit: 3})
	f.stop(FlagReclaim)
	body := f.nextReclaim(t)
	want, _ := EncodeAcquireRequest(AcquireRequest{Name: "jobs/compaction", Owner: "w", LeaseMs: 2000, Limit: 3, Reclaim: &Reclaim{Token: fakeToken, Slot: 2}})
	if !bytes.Equal(body, want[4:]) || body[1] != OptionLimit|OptionReclaim {
		t.Fatalf("reclaim body %x, want %x", body, want[4:])
	}
	f.heartbeatsAfterReclaim(t, 1)
	if slot, ok := lock.Slot(); !ok || slot != 2 || lock.Reclaims() != 1 || lock.Err() != nil {
		t.Fatalf("slot %d %v, reclaims %d, err %v", slot, ok, lock.Reclaims(), lock.Err())
	}
	// The second stop's reclaim is answered with slot 1.
	f.set(func() {
		f.answer = func([]byte) ([]byte, bool) { return grantFrame(FlagReply|FlagReclaimable, fakeToken, 1), false }
	})
	f.stop(FlagReclaim)
	f.nextReclaim(t)
	if e := waitLost(t, lock); e.Why != "protocol" || !strings.Contains(e.Message, "slot 1 (held slot 2)") {
		t.Fatalf("error %+v", e)
	}
}

// Reclaimed twice (a second clean stop), then a release during a third reclaim ends it as a release.
func TestReclaimedTwiceAndReleasedWhileReclaiming(t *testing.T) {
	f := newReclaimFake(t, -1)
	lock := acquireFrom(t, &Client{Servers: f.addr}, Options{})
	for i := 1; i <= 2; i++ {
		f.stop(FlagReclaim)
		f.nextReclaim(t)
		f.heartbeatsAfterReclaim(t, 1)
		if lock.Reclaims() != i || lock.Err() != nil {
			t.Fatalf("stop %d: reclaims %d, err %v", i, lock.Reclaims(), lock.Err())
		}
	}
	f.set(func() { f.answer = func([]byte) ([]byte, bool) { return nil, false } })
	f.stop(FlagReclaim)
	f.nextReclaim(t)
	done := make(chan struct{})
	go func() { lock.Release(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Release during a reclaim did not return")
	}
	if e := lock.Err().(*Error); e.Why != "released" || lock.Reclaiming() {
		t.Fatalf("error %+v", e)
	}
}

// The reclaim goes through the address list with the pacing: after the stop
// of the first address it tries the next, which refuses, and comes back to
// the first, which has restarted on its port.
func TestReclaimThroughTheAddressListAndARestartOnThePort(t *testing.T) {
	f := newReclaimFake(t, -1)
	refused := refusedAddr(t)
	dials := make(chan string, 64)
	failed := make(chan string, 64)
	client := &Client{Servers: f.addr + "," + refused, Dial: func(ctx context.Context, address string) (net.Conn, error) {
		select {
		case dials <- address:
		default:
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", address)
		if err != nil {
			select {
			case failed <- address:
			default:
			}
		}
		return conn, err
	}}
	lock := acquireFrom(t, client, Options{Lease: 3 * time.Second})
	if a := <-dials; a != f.addr {
		t.Fatalf("first dial %s", a)
	}
	// The server stops and does not listen for a while: a restart on its port.
	f.ln.Close()
	f.stop(FlagReclaim)
	for want := 0; want < 2; {
		select {
		case a := <-failed:
			if want == 0 && a != refused {
				t.Fatalf("the reclaim's first connect went to %s, not the next address %s", a, refused)
			}
			want++ // the next address, then the stopped one
		case <-time.After(5 * time.Second):
			t.Fatalf("%d refused connects within 5 s; lock error %v", want, lock.Err())
		}
	}
	if lock.Err() != nil || !lock.Reclaiming() {
		t.Fatalf("not held while reclaiming: %v", lock.Err())
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	f.serve(ln) // the next run, on the same port
	f.nextReclaim(t)
	f.heartbeatsAfterReclaim(t, 1)
	if lock.Reclaims() != 1 || lock.Err() != nil {
		t.Fatalf("reclaims %d, err %v", lock.Reclaims(), lock.Err())
	}
}

// A server that does not come back: paced connects are refused until the
// deadline, and the lock is lost then, with what the last attempt met.
func TestReclaimOfAServerThatDoesNotComeBack(t *testing.T) {
	f := newReclaimFake(t, -1)
	lock := acquireFrom(t, &Client{Servers: f.addr}, Options{})
	f.ln.Close()
	f.stop(FlagReclaim)
	e := waitLost(t, lock)
	if e.Why != "unconfirmed" || !strings.Contains(e.Message, "not reclaimed within") || !strings.Contains(e.Error(), "cannot connect to "+f.addr) {
		t.Fatalf("error %v", e)
	}
}
