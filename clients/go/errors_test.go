package lockd

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// One code per error line: a cause that is itself an *Error gives its message,
// not its code (a trial read "SERVER_UNAVAILABLE ...: lockd: CLOSED (x): ..." and
// "WAIT_TIMEOUT ...: lockd: ABORTED (x): wait ended" as two failures).
func TestErrorTextNamesOneCode(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err := (&Client{Servers: addr, Reconnect: 200 * time.Millisecond}).Acquire(context.Background(), "x", Options{})
	if !errors.Is(err, ErrServerUnavailable) {
		t.Fatalf("err %v", err)
	}
	text := err.Error()
	if !strings.HasPrefix(text, "lockd: SERVER_UNAVAILABLE (x): ") || strings.Contains(text, "CLOSED") || !strings.Contains(text, "cannot connect to "+addr) {
		t.Fatalf("text %q", text)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("not an *Error: %v", err)
	}
	// The chain is still there for errors.As and errors.Is.
	var inner *Error
	if !errors.As(e.Err, &inner) || inner.Code != "CLOSED" {
		t.Fatalf("cause %v", e.Err)
	}
}

func TestWaitTimeoutDoesNotNameTheEndedWaitAsACause(t *testing.T) {
	// A server that answers every ACQUIRE with WAITING and then nothing.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func(conn net.Conn) {
				defer conn.Close()
				head := make([]byte, 4)
				for {
					if _, err := io.ReadFull(conn, head); err != nil {
						return
					}
					if _, err := io.ReadFull(conn, make([]byte, int(head[2])<<8|int(head[3]))); err != nil {
						return
					}
					conn.Write([]byte{0x82, 0x01, 0, 0})
				}
			}(conn)
		}
	}()
	_, err = (&Client{Servers: ln.Addr().String()}).Acquire(context.Background(), "x", Options{Lease: 5 * time.Second, Wait: 300 * time.Millisecond})
	if !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("err %v", err)
	}
	if text := err.Error(); text != "lockd: WAIT_TIMEOUT (x): not granted within 300ms" {
		t.Fatalf("text %q", text)
	}
}

// scripted is a server on 127.0.0.1:0 that answers every ACQUIRE with answer and
// then closes; it reports each ACQUIRE's options byte (bit 0: TRY).
func scripted(t *testing.T, answer []byte) (addr string, options <-chan byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	out := make(chan byte, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func(conn net.Conn) {
				defer conn.Close()
				head := make([]byte, 4)
				if _, err := io.ReadFull(conn, head); err != nil {
					return
				}
				body := make([]byte, int(head[2])<<8|int(head[3]))
				if _, err := io.ReadFull(conn, body); err != nil || len(body) < 2 {
					return
				}
				out <- body[1]
				conn.Write(answer)
			}(conn)
		}
	}()
	return ln.Addr().String(), out
}

func errorFrame(code byte, msg string) []byte {
	return append([]byte{TypeError, 0, byte((1 + len(msg)) >> 8), byte(1 + len(msg)), code}, msg...)
}

// A TRY claim answered with ERROR LOCK_DELAYED (0x14) ends with ErrLockDelayed, the
// server's message in it, and is not retried on the next address of the list.
func TestLockDelayedEndsATryClaim(t *testing.T) {
	const msg = "lock-delay: an earlier server's holder may still believe it holds this lock; no grant for another 1800 ms"
	delayed, options := scripted(t, errorFrame(CodeLockDelayed, msg))
	granting, _ := scripted(t, []byte{0x81, 0x01, 0, 8, 0, 0, 0, 0, 0, 0, 0, 9})
	client := &Client{Servers: delayed + "," + granting, RetryFirstConnect: true}
	lock, err := client.Acquire(context.Background(), "jobs/delayed", Options{Lease: 2 * time.Second, Try: true})
	if lock != nil {
		lock.Release()
		t.Fatal("granted: the claim moved on to the next address")
	}
	if !errors.Is(err, ErrLockDelayed) || errors.Is(err, ErrLockBusy) {
		t.Fatalf("err %v", err)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("not an *Error: %v", err)
	}
	if e.Code != "LOCK_DELAYED" || e.Class != "lock" || e.ServerCode != CodeLockDelayed || e.ServerMessage != msg || e.Lock != "jobs/delayed" {
		t.Fatalf("error %+v", e)
	}
	if text := err.Error(); text != "lockd: LOCK_DELAYED (jobs/delayed): "+msg {
		t.Fatalf("text %q", text)
	}
	if opt := <-options; opt&OptionTry == 0 {
		t.Fatalf("the ACQUIRE was not a TRY: options %#x", opt)
	}
	if CodeName(0x14) != "LOCK_DELAYED" || ClassOfCode(CodeLockDelayed) != "lock" {
		t.Fatalf("name %s class %s", CodeName(0x14), ClassOfCode(CodeLockDelayed))
	}
}
