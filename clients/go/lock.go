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
}

// session is one connection: one claim, from ACQUIRE to its end. One
// goroutine (run) owns the schedule and all writes; a permanent reader
// goroutine feeds it frames.
type session struct {
	c        *Client
	name     string
	lease    time.Duration
	limit    int // the claim's limit: above 1 every ACQUIRED must carry a slot below it, 1 none
	timeout  time.Duration
	minHB    time.Duration
	conn     net.Conn
	events   chan event
	stop     chan *Error
	done     chan struct{}
	granted  chan struct{}
	lock     *Lock
	holdCtx  context.Context
	mu       sync.Mutex
	endErr   *Error
	answered bool
	// confirmedSend: send time of the last frame the server answered (the ACQUIRE's send until then).
	confirmedSend time.Time
	// pendingSend: send time of the frame in flight.
	pendingSend time.Time
}

func (c *Client) start(holdCtx, waitCtx context.Context, addr, name string, acquire []byte, opts Options) *session {
	min := c.MinHeartbeatInterval
	if min == 0 {
		min = DefaultMinHeartbeatInterval
	}
	s := &session{
		c: c, name: name, lease: opts.Lease, limit: opts.Limit, timeout: ClientTimeout(opts.Lease), minHB: min,
		events: make(chan event, 4), stop: make(chan *Error, 1), done: make(chan struct{}), granted: make(chan struct{}),
		holdCtx: holdCtx,
	}
	go s.run(waitCtx, addr, acquire)
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
	s.mu.Unlock()
	if s.lock != nil {
		s.lock.cancel() // the work is told first, then the connection closes
	}
	if s.conn != nil {
		s.conn.Close()
	}
	close(s.done)
}

func (s *session) run(waitCtx context.Context, addr string, acquire []byte) {
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
	go s.read()

	inFlight := true
	var rtt time.Duration = -1
	var token uint64
	slot := -1
	hb := time.NewTimer(time.Hour)
	hb.Stop()
	deadline := time.NewTimer(s.timeout)
	defer hb.Stop()
	defer deadline.Stop()
	var holdDone <-chan struct{}

	fail := func(why string, code byte, msg string, err error) {
		if s.lock != nil {
			s.end(s.lost(why, code, msg, err))
			return
		}
		switch why {
		case "server-error":
			s.end(&Error{Code: CodeName(code), Class: ClassOfCode(code), Lock: s.name, ServerCode: code, ServerMessage: msg, Message: msg})
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

	for {
		select {
		case ev := <-s.events:
			now := time.Now()
			for _, f := range ev.frames {
				if f.Type == TypeError {
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
				if f.Reply() {
					if !inFlight {
						violation("a reply with nothing in flight")
						return
					}
					inFlight = false
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
			if ev.err != nil {
				if ev.err == errSpeaksTLS && s.lock == nil {
					s.end(&Error{Code: "SERVER_UNAVAILABLE", Class: "server", Lock: s.name, Message: ev.err.Error()})
					return
				}
				if isViolation(ev.err) {
					violation(ev.err.Error())
					return
				}
				fail("closed", 0, "", ev.err)
				return
			}
		case <-hb.C:
			if inFlight {
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
			s.markSent(now)
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

// read is the permanent reader: every chunk's frames go to run, in order,
// until the connection fails or breaks the protocol.
func (s *session) read() {
	var r Reader
	buf := make([]byte, 4096)
	for {
		n, err := s.conn.Read(buf)
		var ev event
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
