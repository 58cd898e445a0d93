package lockd

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Reclaim on silence (docs/protocol.md section 14.3): a held, reclaimable
// lock whose HEARTBEAT goes unanswered for lease/4 keeps its connection and
// reclaims on a second one, against the scripted reclaimFake of
// reclaim_test.go over real sockets on 127.0.0.1. The Go client has no
// manual clock: every wait below ends on an event, and times are compared
// only as the client's own (a send it recorded) against the moment of a
// later event, never against a bound that a loaded machine could break.

// refuse answers a reclaim with RECLAIM_REFUSED and the close: a live server that serves the name.
func refuse([]byte) ([]byte, bool) {
	return errorFrame(CodeReclaimRefused, "not in a grace: the name is served"), true
}

// hang leaves a reclaim unanswered, its connection open.
func hang([]byte) ([]byte, bool) { return nil, false }

// answers answers the reclaims in turn, the last one for every reclaim after.
func answers(fns ...func([]byte) ([]byte, bool)) func([]byte) ([]byte, bool) {
	var mu sync.Mutex
	n := 0
	return func(body []byte) ([]byte, bool) {
		mu.Lock()
		fn := fns[n]
		if n < len(fns)-1 {
			n++
		}
		mu.Unlock()
		return fn(body)
	}
}

// heldConn is the fresh claim's connection, as the fake granted it.
func (f *reclaimFake) heldConn(t *testing.T) *fakeConn {
	t.Helper()
	select {
	case c := <-f.heldConns:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no claim granted within 5 s")
		return nil
	}
}

// goSilent stops answering the fresh claims' HEARTBEATs and waits for one to go unanswered.
func (f *reclaimFake) goSilent(t *testing.T) {
	t.Helper()
	f.set(func() { f.silent = true })
	select {
	case <-f.unanswered:
	case <-time.After(5 * time.Second):
		t.Fatal("no heartbeat within 5 s")
	}
}

// answerPending ends the silence: the unanswered HEARTBEATs get their ACQUIRED, and the next ones too.
func (f *reclaimFake) answerPending() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.silent = false
	for _, c := range f.pending {
		c.write(grantFrame(f.hbFlags, fakeToken, f.slot))
	}
	f.pending = nil
}

// endHeld ends the fresh claims' connections only (not a reclaim's): with
// this frame (nil: none, a bare EOF) and the close of the sending side.
func (f *reclaimFake) endHeld(last []byte) {
	f.mu.Lock()
	held := f.held
	f.held = nil
	f.mu.Unlock()
	for _, c := range held {
		c.mu.Lock()
		if last != nil {
			c.conn.Write(last)
		}
		c.conn.(*net.TCPConn).CloseWrite()
		c.mu.Unlock()
	}
}

func closedByClient(t *testing.T, c *fakeConn, what string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the client did not close %s within 5 s", what)
	}
}

// reclaimConns reports the fake's connections that began with a reclaim, as they are accepted by the fake's session.
func (f *reclaimFake) reclaimConnsNow() []*fakeConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := map[*fakeConn]bool{}
	for _, c := range f.held {
		held[c] = true
	}
	var out []*fakeConn
	for _, c := range f.all {
		if !held[c] {
			out = append(out, c)
		}
	}
	return out
}

// sendWatch is a Dial hook that records, for every connect after the
// first, how long the lock's in-flight HEARTBEAT had been unanswered then
// (by the client's own record of its send).
type sendWatch struct {
	mu    sync.Mutex
	lock  *Lock
	dials int
	ages  []time.Duration
	at    []time.Time // when each of those connects began
}

func (w *sendWatch) dial(ctx context.Context, address string) (net.Conn, error) {
	w.mu.Lock()
	w.dials++
	if w.lock != nil {
		w.lock.s.mu.Lock()
		w.ages = append(w.ages, time.Since(w.lock.s.pendingSend))
		w.at = append(w.at, time.Now())
		w.lock.s.mu.Unlock()
	}
	w.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, "tcp", address)
}

func (w *sendWatch) set(l *Lock) {
	w.mu.Lock()
	w.lock = l
	w.mu.Unlock()
}

func (w *sendWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dials
}

// Silent and granted: the reclaim goes out only once a HEARTBEAT has been
// unanswered for lease/4, with the claim and its token; the lock is never
// lost, OnReclaim reports the same lock, the silent connection is closed,
// and the heartbeats go on on the reclaim's connection.
func TestSilenceReclaimedOnASecondConnection(t *testing.T) {
	const lease = 3 * time.Second
	f := newReclaimFake(t, -1)
	w := &sendWatch{}
	reclaimed := make(chan *Lock, 4)
	lock := acquireFrom(t, &Client{Servers: f.addr, Owner: "w-1", Dial: w.dial}, Options{Lease: lease, OnReclaim: func(l *Lock) { reclaimed <- l }})
	w.set(lock)
	held := f.heldConn(t)
	f.goSilent(t)
	deadline := lock.s.confirmedUntil()
	body := f.nextReclaim(t)
	want, _ := EncodeAcquireRequest(AcquireRequest{Name: "jobs/compaction", Owner: "w-1", LeaseMs: 3000, Reclaim: &Reclaim{Token: fakeToken}})
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
	w.mu.Lock()
	ages := append([]time.Duration(nil), w.ages...)
	w.mu.Unlock()
	if len(ages) != 1 || ages[0] < BaseInterval(lease) {
		t.Fatalf("reclaim connects after the heartbeat's send: %v (want one, at or after lease/4 = %v)", ages, BaseInterval(lease))
	}
	closedByClient(t, held, "the silent connection after the reclaim")
	f.heartbeatsAfterReclaim(t, 2)
	if lock.Context().Err() != nil || lock.Reclaims() != 1 || lock.Reclaiming() || !lock.Held() || !lock.s.confirmedUntil().After(deadline) {
		t.Fatalf("after the reclaim: ctx %v, reclaims %d, reclaiming %v, err %v", lock.Context().Err(), lock.Reclaims(), lock.Reclaiming(), lock.Err())
	}
}

// The next address, wrapping: held on a, silent; the reclaim goes to b,
// which refuses (a live server that serves the name), then to a again,
// which grants it on a new connection.
func TestSilenceReclaimGoesToTheNextAddressAndWraps(t *testing.T) {
	a, b := newReclaimFake(t, -1), newReclaimFake(t, -1)
	b.set(func() { b.answer = refuse })
	lock := acquireFrom(t, &Client{Servers: a.addr + "," + b.addr}, Options{Lease: 3 * time.Second})
	held := a.heldConn(t)
	a.goSilent(t)
	b.nextReclaim(t)
	a.nextReclaim(t)
	a.heartbeatsAfterReclaim(t, 1)
	closedByClient(t, held, "the silent connection after the reclaim")
	if lock.Reclaims() != 1 || lock.Err() != nil {
		t.Fatalf("reclaims %d, err %v", lock.Reclaims(), lock.Err())
	}
	if n := len(b.reclaims); n != 0 {
		t.Fatalf("%d more reclaims reached b", n)
	}
}

// Every other outcome of an attempt fails that attempt only: WAITING,
// another token, RECLAIM_REFUSED, a close without a word; the next attempt
// is granted and the lock was never lost.
func TestSilenceAttemptsThatFailAreRetried(t *testing.T) {
	f := newReclaimFake(t, -1)
	f.set(func() {
		f.answer = answers(
			func([]byte) ([]byte, bool) { return []byte{TypeWaiting, FlagReply, 0, 0}, false },
			func([]byte) ([]byte, bool) { return grantFrame(FlagReply|FlagReclaimable, 8, -1), false },
			refuse,
			func([]byte) ([]byte, bool) { return nil, true },
			f.grantBack)
	})
	// Two addresses of the one fake: the pauses within a round are 10-50 ms.
	lock := acquireFrom(t, &Client{Servers: f.addr + "," + f.addr}, Options{Lease: 4 * time.Second})
	f.goSilent(t)
	for i := 0; i < 5; i++ {
		f.nextReclaim(t)
	}
	f.heartbeatsAfterReclaim(t, 1)
	if lock.Reclaims() != 1 || lock.Err() != nil {
		t.Fatalf("reclaims %d, err %v", lock.Reclaims(), lock.Err())
	}
	for _, c := range f.reclaimConnsNow()[:4] {
		closedByClient(t, c, "a failed attempt's connection")
	}
}

// The held connection answers again: the silence is over. The reclaim's
// open connection is closed, the lock is kept (never lost, not reclaimed),
// and its heartbeats go on on the old connection.
func TestSilenceEndsWhenTheHeldConnectionAnswers(t *testing.T) {
	f := newReclaimFake(t, -1)
	f.set(func() { f.answer = answers(refuse, hang) })
	reclaimed := 0
	lock := acquireFrom(t, &Client{Servers: f.addr}, Options{Lease: 4 * time.Second, OnReclaim: func(*Lock) { reclaimed++ }})
	held := f.heldConn(t)
	f.goSilent(t)
	f.nextReclaim(t) // refused
	f.nextReclaim(t) // open, unanswered
	if !lock.Reclaiming() || lock.Err() != nil {
		t.Fatalf("during the silence: reclaiming %v, err %v", lock.Reclaiming(), lock.Err())
	}
	open := f.reclaimConnsNow()
	for len(f.heartbeats) > 0 {
		<-f.heartbeats // answered before the silence
	}
	f.answerPending()
	for _, c := range open {
		closedByClient(t, c, "the reclaim's connection once the silence ended")
	}
	for i := 0; i < 2; i++ {
		select {
		case <-f.heartbeats:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d heartbeats answered on the old connection after the silence", i)
		}
	}
	select {
	case <-held.done:
		t.Fatal("the old connection was closed")
	default:
	}
	if lock.Err() != nil || !lock.Held() || lock.Reclaiming() || lock.Reclaims() != 0 || reclaimed != 0 {
		t.Fatalf("after the silence: err %v, reclaiming %v, reclaims %d", lock.Err(), lock.Reclaiming(), lock.Reclaims())
	}
	if n := len(f.reclaims); n != 0 {
		t.Fatalf("%d reclaims after the silence ended", n)
	}
}

// Silent, and every reclaim refused: lost at the deadline that did not
// move (0.8 x lease after the last answered send), not before, with what
// the last attempt met; attempts were retried meanwhile.
func TestSilenceEveryReclaimRefusedIsLostAtTheDeadline(t *testing.T) {
	f := newReclaimFake(t, -1)
	f.set(func() { f.answer = refuse })
	lock := acquireFrom(t, &Client{Servers: f.addr}, Options{Lease: 4 * time.Second})
	f.goSilent(t)
	deadline := lock.s.confirmedUntil()
	f.nextReclaim(t)
	e := waitLost(t, lock)
	if now := time.Now(); now.Before(deadline) {
		t.Fatalf("lost %v before the deadline", deadline.Sub(now))
	}
	var last *Error
	if e.Why != "unconfirmed" || !strings.Contains(e.Message, "not reclaimed within") || !errors.As(e.Err, &last) || last.ServerCode != CodeReclaimRefused {
		t.Fatalf("error %+v (last attempt %v)", e, e.Err)
	}
	if n := 1 + len(f.reclaims); n < 2 {
		t.Fatalf("%d reclaim attempts before the deadline", n)
	}
}

// No reclaim on silence without its conditions: a grant without
// RECLAIMABLE, or reclaim off for the claim. Lost at the deadline, and no
// second connection.
func TestSilenceWithoutReclaimIsLostAtTheDeadline(t *testing.T) {
	cases := []struct {
		name  string
		flags byte
		opts  Options
	}{
		{"grant not flagged", FlagReply, Options{}},
		{"NoReclaim", FlagReply | FlagReclaimable, Options{NoReclaim: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newReclaimFake(t, -1)
			f.set(func() {
				f.grantFlags, f.hbFlags = c.flags, c.flags
				f.answer = func([]byte) ([]byte, bool) { t.Error("a reclaim was sent"); return nil, true }
			})
			w := &sendWatch{}
			c.opts.Lease = 2 * time.Second
			lock := acquireFrom(t, &Client{Servers: f.addr, Dial: w.dial}, c.opts)
			f.goSilent(t)
			deadline := lock.s.confirmedUntil()
			e := waitLost(t, lock)
			if now := time.Now(); now.Before(deadline) {
				t.Fatalf("lost %v before the deadline", deadline.Sub(now))
			}
			if e.Why != "unconfirmed" || strings.Contains(e.Message, "reclaim") || lock.Reclaiming() {
				t.Fatalf("error %+v", e)
			}
			if n := w.count(); n != 1 {
				t.Fatalf("%d connects (want the claim's one)", n)
			}
		})
	}
}

// The held connection ends while the reclaim on silence goes on: a bare EOF
// or an ERROR other than SHUTTING_DOWN with RECLAIM is a loss at once, and
// the reclaim's open connection is closed; nothing is tried after it.
func TestSilenceThenTheHeldConnectionEnds(t *testing.T) {
	cases := []struct {
		name string
		last []byte
		why  string
		code byte
	}{
		{"EOF", nil, "closed", 0},
		{"ERROR", errorFrame(CodeLeaseExpired, "lease expired"), "server-error", CodeLeaseExpired},
		{"SHUTTING_DOWN without RECLAIM", errorFrameFlags(CodeShuttingDown, 0, "stopping"), "server-error", CodeShuttingDown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newReclaimFake(t, -1)
			f.set(func() { f.answer = answers(refuse, hang) })
			w := &sendWatch{}
			lock := acquireFrom(t, &Client{Servers: f.addr, Dial: w.dial}, Options{Lease: 4 * time.Second})
			f.goSilent(t)
			deadline := lock.s.confirmedUntil()
			f.nextReclaim(t)
			f.nextReclaim(t)
			open := f.reclaimConnsNow()
			f.set(func() { f.answer = f.grantBack })
			f.endHeld(c.last)
			e := waitLost(t, lock)
			if !time.Now().Before(deadline) {
				t.Fatal("not lost before the deadline")
			}
			if e.Why != c.why || e.ServerCode != c.code || lock.Reclaims() != 0 || lock.Reclaiming() {
				t.Fatalf("error %+v", e)
			}
			for _, rc := range open {
				closedByClient(t, rc, "the reclaim's connection after the loss")
			}
			lock.Release() // returns once the claim's goroutine has ended: no connect after it
			if n := w.count(); n != 3 {
				t.Fatalf("%d connects (want the claim's and two attempts')", n)
			}
		})
	}
}

// SHUTTING_DOWN with RECLAIM on the held connection during the silence is
// the reclaim after a clean stop, and the attempt under way goes on as its
// first: granted, the lock is reclaimed once; refused, it is lost, as any
// refused reclaim after a clean stop.
func TestSilenceThenACleanStop(t *testing.T) {
	for _, granted := range []bool{true, false} {
		name := "granted"
		if !granted {
			name = "refused"
		}
		t.Run(name, func(t *testing.T) {
			f := newReclaimFake(t, -1)
			release := make(chan struct{})
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the fake's close, which waits for its sessions
			f.set(func() {
				f.answer = func(body []byte) ([]byte, bool) {
					<-release // the attempt is under way until the stop has been read
					if granted {
						return f.grantBack(body)
					}
					return refuse(body)
				}
			})
			lock := acquireFrom(t, &Client{Servers: f.addr}, Options{Lease: 4 * time.Second})
			held := f.heldConn(t)
			f.goSilent(t)
			f.nextReclaim(t)
			f.endHeld(errorFrameFlags(CodeShuttingDown, FlagReclaim, "the server is stopping"))
			closedByClient(t, held, "the stopped connection")
			if lock.Err() != nil || !lock.Reclaiming() {
				t.Fatalf("after the stop: reclaiming %v, err %v", lock.Reclaiming(), lock.Err())
			}
			once.Do(func() { close(release) })
			if granted {
				f.heartbeatsAfterReclaim(t, 1)
				if lock.Reclaims() != 1 || lock.Err() != nil {
					t.Fatalf("reclaims %d, err %v", lock.Reclaims(), lock.Err())
				}
			} else {
				e := waitLost(t, lock)
				if e.Why != "server-error" || e.ServerCode != CodeReclaimRefused {
					t.Fatalf("error %+v", e)
				}
			}
			if n := len(f.reclaims); n != 0 {
				t.Fatalf("%d more reclaims: the stop started another attempt", n)
			}
		})
	}
}

// An attempt gets lease/4: a reclaim the server leaves unanswered is given
// up then (its connection closed by the client) and the next address is
// tried, before the deadline; the first attempt went at once, on silence.
func TestSilenceUnansweredAttemptIsGivenUpAfterLeaseOverFour(t *testing.T) {
	const lease = 8 * time.Second
	a, b := newReclaimFake(t, -1), newReclaimFake(t, -1)
	b.set(func() { b.answer = hang })
	w := &sendWatch{}
	lock := acquireFrom(t, &Client{Servers: a.addr + "," + b.addr, Dial: w.dial}, Options{Lease: lease})
	w.set(lock)
	a.goSilent(t)
	b.nextReclaim(t)
	hung := b.reclaimConnsNow()
	if len(hung) != 1 {
		t.Fatalf("%d reclaim connections on b", len(hung))
	}
	closedByClient(t, hung[0], "the unanswered reclaim's connection")
	a.nextReclaim(t)
	a.heartbeatsAfterReclaim(t, 1)
	if lock.Reclaims() != 1 || lock.Err() != nil {
		t.Fatalf("reclaims %d, err %v", lock.Reclaims(), lock.Err())
	}
	w.mu.Lock()
	ages, at := append([]time.Duration(nil), w.ages...), append([]time.Time(nil), w.at...)
	w.mu.Unlock()
	// The second connect follows the first by lease/4 and a pause, less the first's own start-up (a
	// goroutine's): half of lease/4 is a bound no scheduling delay reaches, and no early give-up passes.
	if len(at) != 2 || ages[0] < BaseInterval(lease) || at[1].Sub(at[0]) < BaseInterval(lease)/2 {
		t.Fatalf("reclaim connects %v after the heartbeat's send, at %v (want two, the second lease/4 = %v after the first)", ages, at, BaseInterval(lease))
	}
}

// The silence ends while the reclaim's connect is under way: the connect is
// cancelled, nothing is sent, and the lock goes on on its connection.
func TestSilenceEndsWhileTheReclaimConnects(t *testing.T) {
	a := newReclaimFake(t, -1)
	hanging := refusedAddr(t) // never dialed for real: the hook below holds its connect
	connecting, cancelled := make(chan struct{}, 4), make(chan struct{}, 4)
	client := &Client{Servers: a.addr + "," + hanging, Dial: func(ctx context.Context, address string) (net.Conn, error) {
		if address == hanging {
			connecting <- struct{}{}
			<-ctx.Done() // a connect that neither succeeds nor fails until it is cancelled (or times out)
			cancelled <- struct{}{}
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", address)
	}}
	lock := acquireFrom(t, client, Options{Lease: 4 * time.Second})
	a.goSilent(t)
	select {
	case <-connecting:
	case <-time.After(5 * time.Second):
		t.Fatal("no reclaim connect within 5 s")
	}
	for len(a.heartbeats) > 0 {
		<-a.heartbeats
	}
	a.answerPending()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the reclaim's connect was not cancelled when the silence ended")
	}
	for i := 0; i < 2; i++ {
		select {
		case <-a.heartbeats:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d heartbeats answered after the silence", i)
		}
	}
	if lock.Err() != nil || lock.Reclaiming() || lock.Reclaims() != 0 || len(a.reclaims) != 0 {
		t.Fatalf("after the silence: err %v, reclaiming %v, reclaims %d, %d reclaims at a", lock.Err(), lock.Reclaiming(), lock.Reclaims(), len(a.reclaims))
	}
}
