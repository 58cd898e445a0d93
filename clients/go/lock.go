package lockd

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// Lock is a granted claim. Its Context is cancelled the moment ownership is
// no longer confirmed; Err then says why. Release closes the connection.
type Lock struct {
	name   string
	token  uint64
	slot   int // -1: none (limit 1)
	s      *session
	ctx    context.Context
	cancel context.CancelFunc
}

// Name of the lock.
func (l *Lock) Name() string { return l.name }

// Token is the fencing token of this grant: pass it to every write the lock guards.
func (l *Lock) Token() uint64 { return l.token }

// Slot is this grant's slot, 0 .. Limit-1, and true, for a claim with a
// Limit above 1; (0, false) for an exclusive or shared lock. The slot is the
// lowest one free at the grant. A resource guarded by a semaphore fences each
// slot like an exclusive lock: it keeps the highest token it has seen per
// slot and refuses a write for that slot carrying a lower one.
func (l *Lock) Slot() (int, bool) {
	if l.slot < 0 {
		return 0, false
	}
	return l.slot, true
}

// Context is cancelled the moment ownership is no longer confirmed.
func (l *Lock) Context() context.Context { return l.ctx }

// Reclaims is how many times this lock was reclaimed after a clean stop of
// the server or on its silence (docs/protocol.md section 14): the same grant
// and token, kept across the server's restart or a change of server. 0 when
// it never was.
func (l *Lock) Reclaims() int {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.reclaims
}

// Reclaiming is true while the lock is being reclaimed: the server stopped
// cleanly and the client is claiming the grant back from its next run, or
// the server has been silent for lease/4 and the client is claiming it on a
// second connection (false again once the silent connection answers). The
// lock is still held (Held is true until the deadline, the Context is not
// cancelled); the guarded work goes on.
func (l *Lock) Reclaiming() bool {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.reclaiming
}

// Held reports whether ownership is still confirmed, reading the clock
// (after a long pause it is false, and the Context is cancelled, even
// before the session's own timer has run). Ask it before each guarded write.
func (l *Lock) Held() bool {
	if l.ctx.Err() != nil {
		return false
	}
	if !l.s.confirmedUntil().After(time.Now()) {
		l.s.stopWith(l.s.lost("unconfirmed", 0, "", nil))
		return false
	}
	return true
}

// Err is nil while held, else the LOCK_LOST *Error (Why "released" after Release).
func (l *Lock) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.endErr
}

// Release closes the connection (the release) and waits for it to be
// closed; calling it again is harmless.
func (l *Lock) Release() error {
	l.s.stopWith(l.s.lost("released", 0, "", nil))
	<-l.s.done
	return nil
}

type event struct {
	frames []Frame
	err    error
	gen    int // the connection the reader read them from
}

type dialResult struct {
	conn net.Conn
	err  error
	addr string
}

// session is one claim, from ACQUIRE to its end: one connection, and when
// it reclaims the lock (after a clean stop of the server, or on its
// silence), the reclaim's connections, one at a time. One goroutine (run) owns the schedule and all writes; a
// reader goroutine per connection feeds it frames.
type session struct {
	c       *Client
	name    string
	lease   time.Duration
	limit   int // the claim's limit: above 1 every ACQUIRED must carry a slot below it, 1 none
	timeout time.Duration
	minHB   time.Duration
	addrs   []string
	idx     int // the address of the current (or next) connection
	// reclaimFrame is the ACQUIRE with RECLAIM for the grant's token and slot
	// (-1 without one); nil when reclaim is off for the claim.
	reclaimFrame func(token uint64, slot int) ([]byte, error)
	onReclaim    func(*Lock)
	conn         net.Conn
	rconn        net.Conn // the reclaim's connection while an attempt is open
	events       chan event
	stop         chan *Error
	done         chan struct{}
	granted      chan struct{}
	lock         *Lock
	holdCtx      context.Context
	mu           sync.Mutex
	endErr       *Error
	answered     bool
	// confirmedSend: send time of the last frame the server answered (the ACQUIRE's send until then).
	confirmedSend time.Time
	// pendingSend: send time of the frame in flight.
	pendingSend time.Time
	// reclaiming: held, and reclaiming after a clean stop of the server; reclaims: how many times it was.
	reclaiming bool
	reclaims   int
}

func (c *Client) start(holdCtx, waitCtx context.Context, addrs []string, idx int, name string, acquire []byte, opts Options, reclaimFrame func(uint64, int) ([]byte, error)) *session {
	min := c.MinHeartbeatInterval
	if min == 0 {
		min = DefaultMinHeartbeatInterval
	}
	s := &session{
		c: c, name: name, lease: opts.Lease, limit: opts.Limit, timeout: ClientTimeout(opts.Lease), minHB: min,
		addrs: addrs, idx: idx, reclaimFrame: reclaimFrame, onReclaim: opts.OnReclaim,
		events: make(chan event, 4), stop: make(chan *Error, 1), done: make(chan struct{}), granted: make(chan struct{}),
		holdCtx: holdCtx,
	}
	go s.run(waitCtx, acquire)
	return s
}

func (s *session) confirmedUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmedSend.Add(s.timeout)
}

func (s *session) lost(why string, code byte, msg string, err error) *Error {
	e := &Error{Code: "LOCK_LOST", Class: "lock", Why: why, Lock: s.name, ServerCode: code, ServerMessage: msg, Err: err}
	switch why {
	case "server-error":
		e.Class = ClassOfCode(code)
		e.Message = fmt.Sprintf("the server sent ERROR %s: %s", CodeName(code), msg)
	case "closed":
		e.Message = "the connection closed"
	case "unconfirmed":
		e.Message = fmt.Sprintf("no answer confirmed the claim for %v (0.8 x lease)", s.timeout)
	case "aborted":
		e.Class = "client"
		e.Message = "the context was cancelled"
	case "released":
		e.Class = "client"
		e.Message = "released"
	}
	return e
}

func (s *session) stopWith(e *Error) {
	select {
	case s.stop <- e:
	default:
	}
}

// awaitGrant waits for the grant or the end of the session before it.
func (s *session) awaitGrant(waitCtx context.Context) (granted, answered bool, err error) {
	select {
	case <-s.granted:
		return true, true, nil
	case <-s.done:
	case <-waitCtx.Done():
		s.stopWith(&Error{Code: "ABORTED", Class: "client", Lock: s.name, Message: "wait ended"})
		<-s.done
		select {
		case <-s.granted:
			// Granted in the same moment: the grant wins only if it is still held.
			if s.lock.ctx.Err() == nil {
				return true, true, nil
			}
		default:
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return false, s.answered, s.endErr
}

func (s *session) end(e *Error) {
	s.mu.Lock()
	if s.endErr == nil {
		s.endErr = e
	}
	s.reclaiming = false
	s.mu.Unlock()
	if s.lock != nil {
		s.lock.cancel() // the work is told first, then the connection closes
	}
	if s.conn != nil {
		s.conn.Close()
	}
	if s.rconn != nil {
		s.rconn.Close()
	}
	close(s.done)
}

// run is the claim's one goroutine. A held lock is never claimed again,
// with one exception, the reclaim (docs/protocol.md section 14.3), which
// starts in one of two ways when the latest ACQUIRED of the grant had
// FlagReclaimable and reclaim is on for the claim:
//
//   - after a clean stop: the server sends SHUTTING_DOWN with FlagReclaim.
//     The held connection is closed, and the reclaim's connects go to the
//     next address of the list with the usual pacing.
//   - on silence: a HEARTBEAT has gone unanswered for lease/4 (the next one
//     would be due). The held connection stays open, its heartbeat still
//     awaited, and the reclaim's first connect goes at once to the next
//     address of the list (the same one with a list of one). An answer on
//     the held connection ends the silence: the reclaim's connection, if
//     any, is closed and nothing else changes. Any other outcome of an
//     attempt (RECLAIM_REFUSED, another ERROR, WAITING, another token, a
//     connect refused, a connection that breaks, no answer within lease/4
//     of the attempt's start) fails that attempt only, and the next one
//     follows, after the pause of the reconnect pacing, to the next
//     address. SHUTTING_DOWN with FlagReclaim on the held connection turns
//     it into the reclaim after a clean stop (the attempt under way goes
//     on as its first); any other ERROR, an EOF or a reset of the held
//     connection is a loss, and the reclaim's connection is closed.
//
// Either way the lock stays held (its Context alive) and the deadline does
// not move: confirmedSend stays the send of the last answered frame, and at
// 0.8 x lease after it the lock is lost ("unconfirmed"), whatever the
// reclaim is doing. ACQUIRED with REPLY and the same token (and slot) on
// the reclaim's connection confirms the lock up to the reclaim's send: the
// held connection, if still open, is closed, and the heartbeats go on on
// the reclaim's. After a clean stop any other answer, or a reclaim's
// connection that breaks once open, loses the lock.
func (s *session) run(waitCtx context.Context, acquire []byte) {
	addr := s.addrs[s.idx]
	cur := s.idx // the held connection's address
	sent := time.Now()
	s.mu.Lock()
	s.confirmedSend = sent
	s.mu.Unlock()
	conn, err := s.c.dial(waitCtx, addr, s.timeout)
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Lock = s.name
			s.end(e)
		} else {
			s.end(&Error{Code: "CLOSED", Class: "server", Lock: s.name, Message: "cannot connect to " + addr, Err: err})
		}
		return
	}
	s.conn = conn
	sent = time.Now()
	s.mu.Lock()
	s.confirmedSend = sent
	s.pendingSend = sent
	s.mu.Unlock()
	_ = conn.SetWriteDeadline(sent.Add(s.timeout))
	if _, err := conn.Write(acquire); err != nil {
		s.end(&Error{Code: "CLOSED", Class: "server", Lock: s.name, Message: "cannot send ACQUIRE to " + addr, Err: err})
		return
	}
	// Every connection has its own gen (1, 2, ...): gen is the held
	// connection's, rgen the reclaim's (0: none). A frame of any other is
	// from a connection this claim has left.
	gens := 1
	gen, rgen := 1, 0
	go s.read(conn, gen)

	inFlight := true // a frame on the held connection awaits its answer
	var hbSent time.Time
	var rtt time.Duration = -1
	var token uint64
	slot := -1
	reclaimable := false // the latest ACQUIRED of the grant had FlagReclaimable
	hb := time.NewTimer(time.Hour)
	hb.Stop()
	deadline := time.NewTimer(s.timeout)
	silence := time.NewTimer(time.Hour) // lease/4 after a HEARTBEAT's send
	silence.Stop()
	retry := time.NewTimer(time.Hour) // the reclaim's next connect
	retry.Stop()
	var retryAt time.Time
	attempt := time.NewTimer(time.Hour) // on silence, the end of an attempt's lease/4
	attempt.Stop()
	var attemptDue time.Time // zero: the attempt has no bound of its own (after a clean stop)
	defer attempt.Stop()
	defer hb.Stop()
	defer deadline.Stop()
	defer silence.Stop()
	defer retry.Stop()
	var holdDone <-chan struct{}
	// The reclaim: its ACQUIRE, whether it is under way, its connect in flight
	// (nil when none) and how to cancel it, its connection's address and
	// send, the failed attempts since it started, and what the last one met.
	var reclaimAcquire []byte
	reclaiming := false
	var dialed chan dialResult
	dialCancel := context.CancelFunc(func() {})
	defer func() { dialCancel() }()
	var raddr string
	var rSent time.Time
	failures := 0
	var trouble error
	// silent: reclaiming while the held connection is still open (a reclaim on silence).
	silent := func() bool { return reclaiming && s.conn != nil }

	fail := func(why string, code byte, msg string, err error) {
		if s.lock != nil {
			e := s.lost(why, code, msg, err)
			if reclaiming {
				switch why {
				case "unconfirmed":
					e.Message = fmt.Sprintf("not reclaimed within %v (0.8 x lease) of the last answered send", s.timeout)
					if e.Err == nil {
						e.Err = trouble
					}
				case "closed":
					if s.conn == nil {
						e.Message = "the connection of the reclaim to " + raddr + " closed"
					}
				}
			}
			s.end(e)
			return
		}
		switch why {
		case "server-error":
			s.end(&Error{Code: CodeName(code), Class: ClassOfCode(code), Lock: s.name, ServerCode: code, ServerMessage: msg, Message: msg, server: addr})
		case "closed":
			s.end(&Error{Code: "CLOSED", Class: "server", Lock: s.name, Message: "the connection to " + addr + " closed", Err: err})
		case "unconfirmed":
			s.end(&Error{Code: "UNCONFIRMED", Class: "server", Lock: s.name, Message: fmt.Sprintf("%s did not answer within %v", addr, s.timeout)})
		case "violation":
			s.end(&Error{Code: "PROTOCOL_VIOLATION", Class: "client", Lock: s.name, Message: msg, Err: err})
		}
	}
	violation := func(msg string) {
		if s.lock != nil {
			s.end(&Error{Code: "LOCK_LOST", Class: "lock", Why: "protocol", Lock: s.name, Message: "the server broke the protocol: " + msg})
		} else {
			fail("violation", 0, "broken server: "+msg, nil)
		}
	}
	// reclaimAfter schedules the reclaim's next connect: the next address,
	// after the pause of the pacing for one more failure.
	reclaimAfter := func(cause error) {
		failures++
		trouble = cause
		s.idx = (s.idx + 1) % len(s.addrs)
		pause := ReconnectPause(failures, len(s.addrs), draw(), DefaultPauseBounds)
		retryAt = time.Now().Add(pause)
		retry.Reset(pause)
	}
	// closeReclaimConn closes the reclaim's connection, if one is open.
	closeReclaimConn := func() {
		if s.rconn != nil {
			s.rconn.Close()
			s.rconn = nil
		}
		rgen = 0
		attempt.Stop()
		attemptDue = time.Time{}
	}
	// connectReclaim starts the reclaim's connect to the address at s.idx:
	// false when the deadline has passed (the lock is then lost). On silence
	// one attempt, its connect and its answer, gets lease/4: a server that
	// does not answer is not waited for until the deadline.
	connectReclaim := func() bool {
		left := time.Until(s.confirmedUntil())
		if left <= 0 {
			fail("unconfirmed", 0, "", nil)
			return false
		}
		timeout := left
		attemptDue = time.Time{}
		if silent() {
			if q := BaseInterval(s.lease); q < timeout {
				timeout = q
			}
			attemptDue = time.Now().Add(BaseInterval(s.lease))
			attempt.Reset(BaseInterval(s.lease))
		}
		dialCancel()
		dctx, cancel := context.WithCancel(s.holdCtx)
		dialCancel = cancel
		dialed = make(chan dialResult)
		go func(ch chan<- dialResult, ctx context.Context, addr string, timeout time.Duration) {
			conn, err := s.c.dial(ctx, addr, timeout)
			select {
			case ch <- dialResult{conn, err, addr}:
			case <-s.done:
				if conn != nil {
					conn.Close()
				}
			}
		}(dialed, dctx, s.addrs[s.idx], timeout)
		return true
	}
	// attemptFailed: on silence, one attempt of the reclaim failed; the next follows.
	attemptFailed := func(cause error) {
		closeReclaimConn()
		reclaimAfter(cause)
	}
	// beginReclaim starts a reclaim of the held grant: false when reclaim is
	// off for the claim or the grant's latest ACQUIRED was not flagged.
	beginReclaim := func() bool {
		if s.reclaimFrame == nil || !reclaimable || token == 0 {
			return false
		}
		frame, err := s.reclaimFrame(token, slot)
		if err != nil {
			return false
		}
		reclaimAcquire = frame
		reclaiming = true
		s.mu.Lock()
		s.reclaiming = true
		s.mu.Unlock()
		failures = 0
		s.idx = cur
		return true
	}
	// dropHeld closes the held connection (a clean stop ended it).
	dropHeld := func() {
		s.conn.Close()
		s.conn = nil
		gen = 0
		hb.Stop()
		silence.Stop()
		inFlight = false
		attempt.Stop()
		attemptDue = time.Time{} // the attempt under way has the deadline only, as after any clean stop
	}
	// startReclaim, on SHUTTING_DOWN with FlagReclaim to a held, reclaimable
	// grant: false when reclaim is off for the claim (the stop is then a loss).
	startReclaim := func(f Frame) bool {
		if silent() {
			// The reclaim on silence under way is now the reclaim after a clean stop:
			// the attempt under way goes on as its first.
			dropHeld()
			failures = 0
			trouble = s.lost("server-error", f.Code, f.Message, nil)
			return true
		}
		if !beginReclaim() {
			return false
		}
		dropHeld()
		reclaimAfter(s.lost("server-error", f.Code, f.Message, nil))
		return true
	}
	// endSilence: the held connection answered; the reclaim on silence stops.
	endSilence := func() {
		closeReclaimConn()
		dialCancel()
		if dialed != nil {
			// The cancelled connect's result is not wanted: closed when it comes.
			go func(ch <-chan dialResult) {
				select {
				case r := <-ch:
					if r.conn != nil {
						r.conn.Close()
					}
				case <-s.done:
				}
			}(dialed)
			dialed = nil
		}
		retry.Stop()
		attempt.Stop()
		attemptDue = time.Time{}
		reclaiming = false
		reclaimAcquire = nil
		s.mu.Lock()
		s.reclaiming = false
		s.mu.Unlock()
		s.idx = cur
		failures = 0
		trouble = nil
	}

	for {
		select {
		case ev := <-s.events:
			if ev.gen != gen && ev.gen != rgen {
				continue // read from a connection this claim has left
			}
			now := time.Now()
			for _, f := range ev.frames {
				if ev.gen == rgen {
					// The answer to the reclaim's ACQUIRE.
					refusal, problem := "", ""
					switch {
					case f.Type == TypeError:
						refusal = "ERROR " + CodeName(f.Code)
					case f.Type != TypeAcquired:
						problem = "WAITING in answer to a reclaim (a reclaim is granted at once or refused)"
					case !f.Reply():
						problem = "ACQUIRED without REPLY to a reclaim (a reclaim is answered at once)"
					case !now.Before(s.confirmedUntil()):
						// Read after the deadline (this process was paused): it confirms nothing.
						fail("unconfirmed", 0, "", fmt.Errorf("the reclaim was answered too late"))
						return
					case f.Token != token:
						problem = fmt.Sprintf("the reclaim of token %d was answered with token %d", token, f.Token)
					default:
						problem = s.checkSlot(f, token, slot)
					}
					if refusal != "" || problem != "" {
						if !silent() {
							// After a clean stop the reclaim's answer decides.
							if refusal != "" {
								fail("server-error", f.Code, f.Message, nil)
							} else {
								violation(problem)
							}
							return
						}
						if refusal != "" {
							attemptFailed(s.lost("server-error", f.Code, f.Message, nil))
						} else {
							attemptFailed(fmt.Errorf("%s broke the protocol: %s", raddr, problem))
						}
						break // the rest of the attempt's bytes are not read
					}
					// Reclaimed: the reclaim's connection is the held one from now on.
					if s.conn != nil {
						s.conn.Close() // the silent one
					}
					s.conn, s.rconn = s.rconn, nil
					gen, rgen = rgen, 0
					addr, cur = raddr, s.idx
					reclaiming = false
					reclaimAcquire = nil
					inFlight = false
					silence.Stop()
					attempt.Stop()
					attemptDue = time.Time{}
					reclaimable = f.Reclaimable()
					s.mu.Lock()
					sample := now.Sub(rSent)
					s.confirmedSend = rSent // the reclaim's send is the last answered send
					s.reclaiming = false
					s.reclaims++
					s.mu.Unlock()
					failures, trouble = 0, nil
					rtt = SmoothRTT(-1, sample) // a new connection: its own round trip
					hb.Reset(HeartbeatInterval(s.lease, rtt, s.minHB))
					deadline.Reset(time.Until(s.confirmedUntil()))
					if s.onReclaim != nil {
						s.onReclaim(s.lock)
					}
					continue
				}
				if ev.gen != gen {
					break // the held connection was left (a clean stop) or replaced
				}
				if f.Type == TypeError {
					if s.lock != nil && f.Code == CodeShuttingDown && f.Flags&FlagReclaim != 0 {
						if !now.Before(s.confirmedUntil()) {
							fail("unconfirmed", 0, "", nil)
							return
						}
						if startReclaim(f) {
							break // the rest of the stopped connection's bytes are not read
						}
					}
					fail("server-error", f.Code, f.Message, nil)
					return
				}
				if f.Type == TypeWaiting && (token != 0 || !f.Reply()) {
					violation("WAITING after ACQUIRED, or without REPLY")
					return
				}
				if f.Type == TypeAcquired && (f.Token == 0 || (token != 0 && f.Token != token)) {
					violation(fmt.Sprintf("ACQUIRED with token %d (held token %d)", f.Token, token))
					return
				}
				if f.Type == TypeAcquired {
					if msg := s.checkSlot(f, token, slot); msg != "" {
						violation(msg)
						return
					}
				}
				answered := false
				if f.Reply() {
					if !inFlight {
						violation("a reply with nothing in flight")
						return
					}
					inFlight = false
					answered = true
					silence.Stop()
					s.mu.Lock()
					sample := now.Sub(s.pendingSend)
					s.answered = true
					s.confirmedSend = s.pendingSend // count from the send of the frame just answered
					s.mu.Unlock()
					rtt = SmoothRTT(rtt, sample)
					hb.Reset(HeartbeatInterval(s.lease, rtt, s.minHB))
				}
				until := s.confirmedUntil()
				if !now.Before(until) {
					// Read after the deadline (this process was paused): it confirms nothing,
					// and the server may have expired this session already.
					fail("unconfirmed", 0, "", nil)
					return
				}
				deadline.Reset(until.Sub(now))
				if f.Type == TypeAcquired {
					reclaimable = f.Reclaimable()
				}
				if answered && silent() {
					endSilence() // the held connection answered: the silence is over
				}
				if f.Type == TypeAcquired && token == 0 {
					token = f.Token
					if f.HasSlot() {
						slot = int(f.Slot)
					}
					hctx, cancel := context.WithCancel(s.holdCtx)
					s.lock = &Lock{name: s.name, token: token, slot: slot, s: s, ctx: hctx, cancel: cancel}
					holdDone = s.holdCtx.Done()
					close(s.granted)
				}
			}
			if ev.err == nil {
				continue
			}
			switch {
			case ev.gen == rgen && rgen != 0:
				// The reclaim's connection broke before its answer.
				if silent() {
					attemptFailed(fmt.Errorf("the connection of the reclaim to %s: %w", raddr, ev.err))
					continue
				}
				if isViolation(ev.err) {
					violation(ev.err.Error())
					return
				}
				fail("closed", 0, "", ev.err)
				return
			case ev.gen == gen && gen != 0:
				if ev.err == errSpeaksTLS && s.lock == nil {
					s.end(&Error{Code: "SERVER_UNAVAILABLE", Class: "server", Lock: s.name, Message: ev.err.Error()})
					return
				}
				if isViolation(ev.err) {
					violation(ev.err.Error())
					return
				}
				fail("closed", 0, "", ev.err) // also ends a reclaim on silence: never reclaim after only an EOF or a reset
				return
			}
		case <-retry.C:
			if !reclaiming || dialed != nil || s.rconn != nil {
				continue
			}
			if early := time.Until(retryAt); early > 0 {
				retry.Reset(early) // a stale tick of an earlier schedule
				continue
			}
			if !connectReclaim() {
				return
			}
		case r := <-dialed:
			dialed = nil
			if r.err != nil {
				reclaimAfter(fmt.Errorf("cannot connect to %s: %w", r.addr, r.err))
				continue
			}
			now := time.Now()
			if !now.Before(s.confirmedUntil()) {
				r.conn.Close()
				fail("unconfirmed", 0, "", nil)
				return
			}
			if silent() && !attemptDue.IsZero() && !now.Before(attemptDue) {
				r.conn.Close()
				reclaimAfter(fmt.Errorf("cannot connect to %s within lease/4 (%v)", r.addr, BaseInterval(s.lease)))
				continue
			}
			s.rconn, raddr = r.conn, r.addr
			gens++
			rgen = gens
			rSent = now
			_ = s.rconn.SetWriteDeadline(s.confirmedUntil())
			if _, err := s.rconn.Write(reclaimAcquire); err != nil {
				if silent() {
					attemptFailed(fmt.Errorf("cannot send the reclaim to %s: %w", raddr, err))
					continue
				}
				fail("closed", 0, "", err)
				return
			}
			go s.read(s.rconn, rgen)
		case <-hb.C:
			if inFlight || reclaiming {
				continue
			}
			// The heartbeat's send time becomes the confirmed moment once it is answered;
			// until then the previous one stands.
			now := time.Now()
			if !now.Before(s.confirmedUntil()) {
				fail("unconfirmed", 0, "", nil)
				return
			}
			_ = s.conn.SetWriteDeadline(s.confirmedUntil())
			if _, err := s.conn.Write(HeartbeatFrame); err != nil {
				fail("closed", 0, "", err)
				return
			}
			inFlight = true
			hbSent = now
			s.markSent(now)
			silence.Reset(BaseInterval(s.lease))
		case <-silence.C:
			if !inFlight || reclaiming || s.conn == nil || token == 0 || hbSent.IsZero() {
				continue
			}
			if early := BaseInterval(s.lease) - time.Since(hbSent); early > 0 {
				silence.Reset(early) // a stale tick of an earlier heartbeat's
				continue
			}
			if !beginReclaim() {
				continue // no reclaim for this grant: the deadline decides
			}
			// The first attempt goes at once, to the next address; the pacing is between attempts.
			trouble = fmt.Errorf("%s did not answer a heartbeat for %v (lease/4)", addr, BaseInterval(s.lease))
			s.idx = (cur + 1) % len(s.addrs)
			if !connectReclaim() {
				return
			}
		case <-attempt.C:
			if !silent() || s.rconn == nil || attemptDue.IsZero() {
				continue // a connect under way ends by its own timeout (lease/4)
			}
			if early := time.Until(attemptDue); early > 0 {
				attempt.Reset(early) // a stale tick of an earlier attempt's
				continue
			}
			attemptFailed(fmt.Errorf("the reclaim at %s was not answered within lease/4 (%v)", raddr, BaseInterval(s.lease)))
		case <-deadline.C:
			if left := time.Until(s.confirmedUntil()); left > 0 {
				deadline.Reset(left)
				continue
			}
			fail("unconfirmed", 0, "", nil)
			return
		case <-holdDone:
			s.end(s.lost("aborted", 0, "", s.holdCtx.Err()))
			return
		case e := <-s.stop:
			s.end(e)
			return
		}
	}
}

// checkSlot is "" when an ACQUIRED's slot fits the claim: for a limit above
// 1, a slot below the limit, and once held the held slot (every heartbeat's
// answer repeats it); for limit 1, no slot. Else it says what is wrong.
func (s *session) checkSlot(f Frame, token uint64, slot int) string {
	if s.limit <= 1 {
		if f.HasSlot() {
			return fmt.Sprintf("ACQUIRED with slot %d for a claim of limit 1", f.Slot)
		}
		return ""
	}
	switch {
	case !f.HasSlot():
		return fmt.Sprintf("ACQUIRED without a slot for a claim of limit %d", s.limit)
	case int(f.Slot) >= s.limit:
		return fmt.Sprintf("ACQUIRED with slot %d for a claim of limit %d", f.Slot, s.limit)
	case token != 0 && int(f.Slot) != slot:
		return fmt.Sprintf("ACQUIRED with slot %d (held slot %d)", f.Slot, slot)
	}
	return ""
}

func (s *session) markSent(t time.Time) {
	s.mu.Lock()
	s.pendingSend = t
	s.mu.Unlock()
}

// read is a connection's reader: every chunk's frames go to run, in order
// and marked with the connection's gen, until the connection fails or
// breaks the protocol.
func (s *session) read(conn net.Conn, gen int) {
	var r Reader
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		ev := event{gen: gen}
		if n > 0 {
			ev.frames, ev.err = r.Push(buf[:n])
		}
		if ev.err == nil && err != nil {
			ev.err = err
		}
		if len(ev.frames) > 0 || ev.err != nil {
			select {
			case s.events <- ev:
			case <-s.done:
				return
			}
		}
		if ev.err != nil {
			return
		}
	}
}

// violationError marks a Reader error: the server broke the protocol.
type violationError struct{ error }

func isViolation(err error) bool {
	_, ok := err.(violationError)
	return ok
}
