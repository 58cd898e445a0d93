package lockd

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// silentAfterGrant is a scripted server on 127.0.0.1:0: it grants the first
// ACQUIRE with token 3 and then answers nothing. It reports how many
// HEARTBEATs arrived before the client closed the connection.
func silentAfterGrant(t *testing.T) (addr string, heartbeats <-chan int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	out := make(chan int, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		head := make([]byte, 4)
		count := -1 // the ACQUIRE is the first frame
		for {
			if _, err := io.ReadFull(conn, head); err != nil {
				out <- count
				return
			}
			body := make([]byte, int(head[2])<<8|int(head[3]))
			if _, err := io.ReadFull(conn, body); err != nil {
				out <- count
				return
			}
			if count == -1 {
				conn.Write([]byte{0x81, 0x01, 0, 8, 0, 0, 0, 0, 0, 0, 0, 3})
			}
			count++
		}
	}()
	return ln.Addr().String(), out
}

// testLease is long enough that the first HEARTBEAT (at lease/4) goes out before the
// loss (at 0.8 x lease) however this process is scheduled: with 200 ms, a loaded
// machine that held it up for over ~110 ms made it lose with no heartbeat sent.
const testLease = time.Second

func TestSilentServerLosesAtClientTimeoutWithOneHeartbeatInFlight(t *testing.T) {
	addr, heartbeats := silentAfterGrant(t)
	client := &Client{Servers: addr}
	lock, err := client.Acquire(context.Background(), "jobs/x", Options{Lease: testLease})
	if err != nil {
		t.Fatal(err)
	}
	if lock.Token() != 3 {
		t.Fatalf("token %d", lock.Token())
	}
	select {
	case <-lock.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the context was not cancelled")
	}
	if !errors.Is(lock.Err(), ErrLockLost) || lock.Err().(*Error).Why != "unconfirmed" {
		t.Fatalf("Err() = %v", lock.Err())
	}
	if lock.Held() {
		t.Fatal("Held() after the loss")
	}
	select {
	case n := <-heartbeats:
		if n != 1 {
			t.Fatalf("%d heartbeats sent without a reply; one in flight at most", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client did not close the connection")
	}
}

func TestWithLockCancelsTheWorkAndReportsTheLoss(t *testing.T) {
	addr, _ := silentAfterGrant(t)
	client := &Client{Servers: addr}
	var token uint64
	err := client.WithLock(context.Background(), "jobs/y", Options{Lease: testLease}, func(ctx context.Context, tok uint64) error {
		token = tok
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
			return errors.New("the work's context was not cancelled")
		}
	})
	if token != 3 || !errors.Is(err, ErrLockLost) {
		t.Fatalf("token %d, err %v", token, err)
	}
}

// refusedAddr is an address on 127.0.0.1 where nothing listens: a connect is refused.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	return addr
}

// Before any server has answered, a claim that may not wait (a Try, or one
// address without a Wait), or one that opted out, tries each address once.
func TestRefusedAddressesAreUnavailable(t *testing.T) {
	addr := refusedAddr(t)
	for _, c := range []struct {
		client *Client
		opts   Options
	}{
		{&Client{Servers: addr}, Options{}},
		{&Client{Servers: addr + "," + addr}, Options{Try: true}},
		{&Client{Servers: addr}, Options{Try: true, Wait: 20 * time.Second}},
		{&Client{Servers: addr + "," + addr, NoRetryFirstConnect: true}, Options{Wait: 20 * time.Second}},
	} {
		backoffs := 0
		c.opts.OnRetry = func(_ string, _ time.Duration, backoff bool) {
			if backoff {
				backoffs++
			}
		}
		_, err := c.client.Acquire(context.Background(), "x", c.opts)
		if !errors.Is(err, ErrServerUnavailable) || backoffs != 0 {
			t.Fatalf("%s %+v: err %v, %d backoffs", c.client.Servers, c.opts, err, backoffs)
		}
	}
	_, err := (&Client{Servers: addr, RetryFirstConnect: true, NoRetryFirstConnect: true}).Acquire(context.Background(), "x", Options{})
	if !errors.Is(err, ErrBadRequest) {
		t.Fatalf("both settings: err %v", err)
	}
}

// The rule of docs/clients.md, "Retrying the first connect".
func TestFirstConnectRule(t *testing.T) {
	for _, c := range []struct {
		retry, noRetry, try bool
		wait                time.Duration
		addresses           int
		want                bool
	}{
		{false, false, false, 20 * time.Second, 1, true},
		{false, false, false, 0, 2, true},
		{false, false, false, 20 * time.Second, 2, true},
		{false, false, false, 0, 1, false},
		{false, false, true, 0, 2, false},
		{false, false, true, 20 * time.Second, 1, false},
		{true, false, true, 0, 1, true},
		{true, false, false, 0, 1, true},
		{false, true, false, 20 * time.Second, 2, false},
	} {
		if got := firstConnectRetried(c.retry, c.noRetry, c.try, c.wait, c.addresses); got != c.want {
			t.Errorf("%+v: got %v", c, got)
		}
	}
}

// A claim with a Wait waits out a server that refuses connections (restarting,
// or failing over) by default, and is granted once it listens.
func TestAWaitOutlastsARefusingServer(t *testing.T) {
	addr := refusedAddr(t)
	backoff := make(chan string, 64)
	type result struct {
		lock *Lock
		err  error
	}
	done := make(chan result, 1)
	go func() {
		lock, err := (&Client{Servers: addr}).Acquire(context.Background(), "x", Options{Lease: 5 * time.Second, Wait: 20 * time.Second,
			OnRetry: func(detail string, _ time.Duration, b bool) {
				if b {
					select {
					case backoff <- detail:
					default:
					}
				}
			}})
		done <- result{lock, err}
	}()
	select {
	case <-backoff: // refused at least once, and waiting to try again
	case r := <-done:
		t.Fatalf("ended before the server came up: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no retry within 10 s")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		head := make([]byte, 4)
		if _, err := io.ReadFull(conn, head); err != nil {
			return
		}
		if _, err := io.ReadFull(conn, make([]byte, int(head[2])<<8|int(head[3]))); err != nil {
			return
		}
		conn.Write([]byte{0x81, 0x01, 0, 8, 0, 0, 0, 0, 0, 0, 0, 9})
		io.Copy(io.Discard, conn) // until the client closes (Release)
	}()
	select {
	case r := <-done:
		if r.err != nil || r.lock.Token() != 9 {
			t.Fatalf("err %v", r.err)
		}
		r.lock.Release()
	case <-time.After(10 * time.Second):
		t.Fatal("not granted within 10 s of the server coming up")
	}
}
