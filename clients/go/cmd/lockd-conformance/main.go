// Command lockd-conformance is the Go client's driver for the client
// conformance suite (test/conformance/README.md): commands as JSON lines on
// stdin, events as JSON lines on stdout.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"sync"
	"time"

	"lockd"
)

type command struct {
	Cmd     string `json:"cmd"`
	ID      string `json:"id"`
	Servers string `json:"servers"`
	Name    string `json:"name"`
	Lease   int64  `json:"lease"`
	Try     bool   `json:"try"`
	Wait    *int64 `json:"wait"`
	Owner   string `json:"owner"`
	// Limit (omitted: 1) and Shared: a semaphore's permits, a shared (read) claim.
	Limit  *int `json:"limit"`
	Shared bool `json:"shared"`
	// Reclaim false: do not reclaim the held lock after a clean stop of the server (absent or null: the default, on).
	Reclaim *bool `json:"reclaim"`
	// Reconnect (ms) and RetryFirstConnect: the claim's reconnect budget (protocol.md section 8.5)
	// and whether it retries before any server answered (absent or null: the client's default rule).
	Reconnect         *int64 `json:"reconnect"`
	RetryFirstConnect *bool  `json:"retryFirstConnect"`
	TLS               *struct {
		CA   string `json:"ca"`
		Cert string `json:"cert"`
		Key  string `json:"key"`
	} `json:"tls"`
}

func tlsConfig(c command) (*tls.Config, error) {
	if c.TLS == nil {
		return nil, nil
	}
	pem, err := os.ReadFile(c.TLS.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool}
	if c.TLS.Cert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLS.Cert, c.TLS.Key)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// since is this driver's monotonic clock in ms (the timing fields the bench reads).
var t0 = time.Now()

func since() float64 { return float64(time.Since(t0).Microseconds()) / 1000 }

var (
	outMu sync.Mutex
	enc   = json.NewEncoder(os.Stdout)
	mu    sync.Mutex
	locks = map[string]*lockd.Lock{}
)

func out(v map[string]interface{}) {
	outMu.Lock()
	defer outMu.Unlock()
	_ = enc.Encode(v)
}

func errorEvent(id string, err error) map[string]interface{} {
	var e *lockd.Error
	if errors.As(err, &e) {
		var code interface{}
		if e.ServerCode != 0 {
			code = lockd.CodeName(e.ServerCode)
		}
		return map[string]interface{}{"id": id, "event": "error", "code": e.Code, "class": e.Class, "serverCode": code, "message": e.Error()}
	}
	return map[string]interface{}{"id": id, "event": "error", "code": "INTERNAL", "class": "client", "serverCode": nil, "message": err.Error()}
}

// slotOf is the lock's slot for the events, nil (JSON null) for a lock of limit 1.
func slotOf(lock *lockd.Lock) interface{} {
	if k, ok := lock.Slot(); ok {
		return k
	}
	return nil
}

func acquire(c command) {
	cfg, err := tlsConfig(c)
	if err != nil {
		out(errorEvent(c.ID, err))
		return
	}
	client := &lockd.Client{Servers: c.Servers, Owner: c.Owner, TLS: cfg}
	if c.RetryFirstConnect != nil {
		client.RetryFirstConnect = *c.RetryFirstConnect
		client.NoRetryFirstConnect = !*c.RetryFirstConnect
	}
	if c.Reconnect != nil {
		client.Reconnect = time.Duration(*c.Reconnect) * time.Millisecond
	}
	opts := lockd.Options{Lease: time.Duration(c.Lease) * time.Millisecond, Try: c.Try, Shared: c.Shared,
		OnRetry: func(detail string, _ time.Duration, backoff bool) {
			out(map[string]interface{}{"id": c.ID, "event": "retry", "backoff": backoff, "detail": detail})
		}}
	if c.Reclaim != nil {
		opts.NoReclaim = !*c.Reclaim
	}
	opts.OnReclaim = func(lock *lockd.Lock) {
		out(map[string]interface{}{"id": c.ID, "event": "reclaimed", "token": strconv.FormatUint(lock.Token(), 10), "slot": slotOf(lock)})
	}
	if c.Limit != nil {
		if *c.Limit == 0 { // an explicit 0 is a bad limit (Options.Limit 0 is the default, 1)
			out(errorEvent(c.ID, &lockd.Error{Code: "BAD_REQUEST", Class: "client", Lock: c.Name, Message: "limit must be 1 .. 65535, got 0"}))
			return
		}
		opts.Limit = *c.Limit
	}
	if c.Wait != nil {
		opts.Wait = time.Duration(*c.Wait) * time.Millisecond
	}
	startedAt := since()
	lock, err := client.Acquire(context.Background(), c.Name, opts)
	at := since()
	if err != nil {
		out(errorEvent(c.ID, err))
		return
	}
	mu.Lock()
	locks[c.ID] = lock
	mu.Unlock()
	out(map[string]interface{}{"id": c.ID, "event": "acquired", "token": strconv.FormatUint(lock.Token(), 10), "slot": slotOf(lock), "startedAt": startedAt, "at": at})
	go func() {
		<-lock.Context().Done()
		var e *lockd.Error
		if errors.As(lock.Err(), &e) && e.Why != "released" {
			var code interface{}
			if e.ServerCode != 0 {
				code = lockd.CodeName(e.ServerCode)
			}
			out(map[string]interface{}{"id": c.ID, "event": "lost", "why": e.Why, "serverCode": code})
		}
	}()
}

func main() {
	out(map[string]interface{}{"event": "ready", "client": "go"})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var c command
		if len(in.Bytes()) == 0 {
			continue
		}
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			out(map[string]interface{}{"id": nil, "event": "error", "code": "BAD_COMMAND", "class": "client", "serverCode": nil, "message": err.Error()})
			continue
		}
		switch c.Cmd {
		case "acquire":
			go acquire(c)
		case "release":
			mu.Lock()
			lock := locks[c.ID]
			mu.Unlock()
			startedAt := since()
			if lock != nil {
				lock.Release()
			}
			out(map[string]interface{}{"id": c.ID, "event": "released", "startedAt": startedAt, "at": since()})
		case "held":
			mu.Lock()
			lock := locks[c.ID]
			mu.Unlock()
			out(map[string]interface{}{"id": c.ID, "event": "held", "held": lock != nil && lock.Held()})
		default:
			out(map[string]interface{}{"id": c.ID, "event": "error", "code": "BAD_COMMAND", "class": "client", "serverCode": nil, "message": "unknown command " + c.Cmd})
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range locks {
		l.Release()
	}
}
