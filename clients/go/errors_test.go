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
