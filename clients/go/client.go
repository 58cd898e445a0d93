// Package lockd is a client for the lockd lock server (protocol version 1,
// docs/protocol.md). One claim is one TCP connection: Acquire returns a
// *Lock once the server grants it, and Lock.Context() is cancelled the
// moment ownership is no longer confirmed (an ERROR, the connection closing,
// or 0.8 x lease since the send of the last frame the server answered). A
// clean stop of a server with reclaim on is the exception: the lock stays
// held while the client reclaims it, with its token, from the server's next
// run; so is a server gone silent (a heartbeat unanswered for lease/4), from
// which the client reclaims on a second connection while it keeps the first
// (docs/protocol.md section 14; Options.NoReclaim, Options.OnReclaim).
package lockd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Defaults, the same as the TypeScript client's.
const (
	DefaultServer    = "127.0.0.1:7700"
	DefaultLease     = 5 * time.Second
	DefaultReconnect = 30 * time.Second
)

// Client holds the settings shared by claims. The zero value is usable:
// LOCKD_SERVER, else 127.0.0.1:7700.
type Client struct {
	// Servers is an address list ("a:7700,b:7700" or one address), or a map
	// of shards ("gen=1;alpha=a:7700,b:7700;beta=c:7700": each lock name goes
	// to its shard's list); empty: LOCKD_SERVER, else DefaultServer.
	Servers string
	// Owner is the label operators see; default "HOST/pid-PID".
	Owner string
	// TLS, when set, wraps every connection (set Certificates for mutual TLS).
	TLS *tls.Config
	// Reconnect bounds how long a claim that is not held yet keeps reconnecting through server trouble (default 30 s).
	Reconnect time.Duration
	// RetryFirstConnect and NoRetryFirstConnect decide whether a claim retries
	// (within Reconnect, never past its Wait) before any server has answered
	// it: a server that refuses connections while it restarts, or a failover
	// group between a crash and the take-over. Neither set (the default): a
	// claim that may wait retries when it has a Wait or its list has two or
	// more addresses; a Try claim, or one address without a Wait, fails at
	// once with SERVER_UNAVAILABLE. RetryFirstConnect: always (also a Try
	// claim). NoRetryFirstConnect: never, each address is tried once. Both:
	// BAD_REQUEST.
	RetryFirstConnect   bool
	NoRetryFirstConnect bool
	// MinHeartbeatInterval is the floor of the heartbeat interval (default 1 ms).
	MinHeartbeatInterval time.Duration
	// Dial replaces the TCP dialer (tests, proxies).
	Dial func(ctx context.Context, address string) (net.Conn, error)
}

// Options of one claim.
type Options struct {
	Lease time.Duration // default 5 s; heartbeats go every ~Lease/4
	Wait  time.Duration // > 0: give up waiting after this (WAIT_TIMEOUT); 0: no limit
	Try   bool          // do not queue: LOCK_BUSY if held, LOCK_DELAYED if held back by a lock-delay
	Owner string        // overrides the client's owner
	// Limit makes the name a semaphore of Limit permits (1 .. 65,535; 0 means
	// 1, the exclusive lock): the first Limit claims hold at once, each with
	// a slot 0 .. Limit-1 (Lock.Slot). Every live claim of a name must ask
	// for the same limit, else LIMIT_MISMATCH.
	Limit int
	// Shared is a shared (read) claim: shared claims of a name hold together,
	// an exclusive one alone. Limit 1 only.
	Shared bool
	// OnRetry, when set, is called before each reconnect of the claim while
	// it is not held yet (refused, SHUTTING_DOWN, a dropped connection):
	// what failed, the pause before the next address is tried, and backoff:
	// true when every address of the list has failed in this round and the
	// pause is the backoff (the claim waits), false when it moves on to the
	// list's next address. For logging; it decides nothing. It runs on the
	// goroutine that called Acquire.
	OnRetry func(detail string, pause time.Duration, backoff bool)
	// NoReclaim turns reclaim off for this claim. By default a held lock
	// whose grant the server flagged reclaimable rides out a clean stop of
	// the server (ERROR SHUTTING_DOWN with the RECLAIM flag, docs/protocol.md
	// section 14): the client connects again and reclaims the grant with its
	// token, and the lock stays held (its Context alive) unless that fails by
	// the holder's deadline (0.8 x lease after the last answered send). It
	// also rides out a server gone silent (a HEARTBEAT unanswered for
	// lease/4, the connection still open): the client keeps that connection
	// and reclaims on a second one, to the next address of the list, until
	// the old one answers again, a reclaim is granted, or the deadline. With
	// NoReclaim such a stop loses the lock, like any SHUTTING_DOWN, and
	// silence loses it at the deadline.
	NoReclaim bool
	// OnReclaim, when set, is called each time the held lock was reclaimed
	// (after a clean stop of the server, or on its silence): the same Lock,
	// token and slot, confirmed again by a server. For logging; it decides
	// nothing. It runs on the lock's own goroutine before the heartbeats go
	// on: keep it short, and do not wait for Release in it (go lock.Release()).
	OnReclaim func(lock *Lock)
}

// firstConnectRetried is the rule all three clients and lockd run share
// (docs/clients.md, "Retrying the first connect"): whether a claim retries
// before any server has answered it. An explicit setting wins; by default a
// claim that may wait retries when it has a wait or two or more addresses.
func firstConnectRetried(retry, noRetry, try bool, wait time.Duration, addresses int) bool {
	switch {
	case retry:
		return true
	case noRetry, try:
		return false
	}
	return wait > 0 || addresses > 1
}

// Dial returns a client for an address list (see Client.Servers).
func Dial(servers string) *Client { return &Client{Servers: servers} }

// ServerMap parses Servers (else LOCKD_SERVER, else DefaultServer): a plain
// address list (one shard) or a map of shards, "[gen=N;]NAME=LIST;NAME=LIST".
func (c *Client) ServerMap() (*ServerMap, error) {
	s := c.Servers
	if s == "" {
		s = os.Getenv("LOCKD_SERVER")
	}
	if s == "" {
		s = DefaultServer
	}
	return ParseServerMap(s)
}

func (c *Client) owner(o Options) string {
	if o.Owner != "" {
		return o.Owner
	}
	if c.Owner != "" {
		return c.Owner
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/pid-%d", host, os.Getpid())
}

// Acquire claims the lock name and returns once it is granted. ctx cancels
// the wait (ABORTED) and, once held, ends holding (the lock is released and
// its Context cancelled). Errors are *Error.
func (c *Client) Acquire(ctx context.Context, name string, opts Options) (*Lock, error) {
	m, err := c.ServerMap()
	if err != nil {
		return nil, err
	}
	shard := m.ShardOf(name)
	lock, err := c.acquire(ctx, name, opts, m.Shards[shard].Addresses)
	if e, ok := err.(*Error); ok && e.Code == "WRONG_SHARD" {
		e.Message = describeMismatch(m, m.Shards[shard].Name, e.server, e.ServerMessage)
	}
	return lock, err
}

func (c *Client) acquire(ctx context.Context, name string, opts Options, addrs []string) (*Lock, error) {
	if opts.Lease == 0 {
		opts.Lease = DefaultLease
	}
	leaseMs := uint64(opts.Lease / time.Millisecond)
	if opts.Limit == 0 {
		opts.Limit = 1
	}
	req := AcquireRequest{Name: name, Owner: c.owner(opts), LeaseMs: leaseMs, Try: opts.Try, Limit: opts.Limit, Shared: opts.Shared}
	frame, err := EncodeAcquireRequest(req)
	if err != nil {
		return nil, &Error{Code: "BAD_REQUEST", Class: "client", Lock: name, Message: err.Error()}
	}
	// The reclaim (docs/protocol.md section 14.3): the same claim, with RECLAIM and the grant's token and slot.
	var reclaimFrame func(token uint64, slot int) ([]byte, error)
	if !opts.NoReclaim {
		reclaimFrame = func(token uint64, slot int) ([]byte, error) {
			r := req
			r.Reclaim = &Reclaim{Token: token, Slot: slot}
			return EncodeAcquireRequest(r)
		}
	}
	if c.RetryFirstConnect && c.NoRetryFirstConnect {
		return nil, &Error{Code: "BAD_REQUEST", Class: "client", Lock: name, Message: "RetryFirstConnect and NoRetryFirstConnect exclude each other"}
	}
	retryFirst := firstConnectRetried(c.RetryFirstConnect, c.NoRetryFirstConnect, opts.Try, opts.Wait, len(addrs))
	reconnect := c.Reconnect
	if reconnect == 0 {
		reconnect = DefaultReconnect
	}
	waitCtx := ctx
	if opts.Wait > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, opts.Wait)
		defer cancel()
	}
	waitErr := func(last error) error {
		if ctx.Err() != nil {
			return &Error{Code: "ABORTED", Class: "client", Lock: name, Message: "the context was cancelled while waiting", Err: ctx.Err()}
		}
		// The claim that was waiting ends ABORTED ("wait ended") because the wait did: not a cause worth naming.
		if e, ok := last.(*Error); ok && e.Code == "ABORTED" {
			last = nil
		}
		return &Error{Code: "WAIT_TIMEOUT", Class: "lock", Lock: name, Message: fmt.Sprintf("not granted within %v", opts.Wait), Err: last}
	}

	idx, failures := 0, 0
	answeredEver := false
	var troubleSince time.Time
	for {
		s := c.start(ctx, waitCtx, addrs, idx, name, frame, opts, reclaimFrame)
		granted, answered, lastErr := s.awaitGrant(waitCtx)
		if granted {
			return s.lock, nil
		}
		if waitCtx.Err() != nil {
			return nil, waitErr(lastErr)
		}
		var le *Error
		if errors.As(lastErr, &le) && !retryable(le) {
			return nil, le
		}
		now := time.Now()
		if answered {
			answeredEver = true
			failures = 0
			troubleSince = now
		}
		if troubleSince.IsZero() {
			troubleSince = now
		}
		failures++
		unavailable := func() error {
			return &Error{Code: "SERVER_UNAVAILABLE", Class: "server", Lock: name, Message: fmt.Sprintf("no server of %s could take the claim", strings.Join(addrs, ",")), Err: lastErr}
		}
		if !answeredEver && !retryFirst && failures >= len(addrs) {
			return nil, unavailable()
		}
		if now.Sub(troubleSince) >= reconnect {
			return nil, unavailable()
		}
		idx = (idx + 1) % len(addrs)
		var pause time.Duration // the first round, before any answer, tries each address once without pauses
		if answeredEver || retryFirst {
			pause = ReconnectPause(failures, len(addrs), draw(), DefaultPauseBounds)
		}
		if opts.OnRetry != nil {
			detail := "connection failed"
			if lastErr != nil {
				detail = lastErr.Error()
			}
			opts.OnRetry(detail, pause, failures%len(addrs) == 0)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-waitCtx.Done():
			t.Stop()
			return nil, waitErr(lastErr)
		}
	}
}

// retryable: what a claim that is not held yet reconnects on (class 0x0_,
// a closed, refused or silent connection, LEASE_EXPIRED of a stalled waiter).
// Class 0x2_ (BAD_REQUEST, WRONG_SHARD, LIMIT_MISMATCH, ...) is not: the next
// address would answer the same.
func retryable(e *Error) bool {
	switch e.Code {
	case "CLOSED", "UNCONFIRMED", "SHUTTING_DOWN", "OVERLOADED", "LEASE_EXPIRED":
		return true
	}
	return e.ServerCode != 0 && e.ServerCode>>4 == 0
}

// WithLock acquires name, runs fn with a context cancelled on loss and the
// fencing token, releases, and returns fn's error. If the lock is lost
// while fn runs, fn's context is cancelled at once and WithLock returns the
// LOCK_LOST *Error when fn returns. fn is never run twice.
func (c *Client) WithLock(ctx context.Context, name string, opts Options, fn func(ctx context.Context, token uint64) error) error {
	lock, err := c.Acquire(ctx, name, opts)
	if err != nil {
		return err
	}
	defer lock.Release()
	ferr := fn(lock.Context(), lock.Token())
	if lost := lock.Err(); lost != nil {
		return lost
	}
	return ferr
}

func (c *Client) dial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if c.Dial != nil {
		return c.Dial(dctx, addr)
	}
	var d net.Dialer
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if c.TLS == nil {
		return conn, nil
	}
	cfg := c.TLS.Clone()
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host
	}
	tconn := tls.Client(conn, cfg)
	if err := tconn.HandshakeContext(dctx); err != nil {
		conn.Close()
		return nil, &Error{Code: "SERVER_UNAVAILABLE", Class: "server", Message: "TLS handshake with " + addr + " failed", Err: err}
	}
	return tconn, nil
}
