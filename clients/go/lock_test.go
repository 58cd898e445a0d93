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

func TestRefusedAddressesAreUnavailable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err := (&Client{Servers: addr + "," + addr}).Acquire(context.Background(), "x", Options{})
	if !errors.Is(err, ErrServerUnavailable) {
		t.Fatalf("err %v", err)
	}
}
