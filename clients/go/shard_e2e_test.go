package lockd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// Run by test/shards/clients.test.ts against real shard servers (alpha and
// beta of the map alpha,beta,gamma at generation 1; gamma not started):
// LOCKD_TEST_SHARD_MAP is the servers' map, LOCKD_TEST_STALE_MAP an older
// one (alpha,beta at generation 0). Skipped otherwise.
func TestShardsAgainstRealServers(t *testing.T) {
	current, stale := os.Getenv("LOCKD_TEST_SHARD_MAP"), os.Getenv("LOCKD_TEST_STALE_MAP")
	if current == "" || stale == "" {
		t.Skip("needs real shard servers: run by test/shards/clients.test.ts")
	}
	c := &Client{Servers: current}
	m, err := c.ServerMap()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nameOn := func(m *ServerMap, shard string, also func(string) bool) string {
		for i := 0; i < 100000; i++ {
			name := fmt.Sprintf("go/%d", i)
			if m.Shards[m.ShardOf(name)].Name == shard && also(name) {
				return name
			}
		}
		t.Fatalf("no name on %s", shard)
		return ""
	}
	// One client, locks on both running shards at once.
	var locks []*Lock
	for _, shard := range []string{"alpha", "beta", "alpha", "beta"} {
		name := nameOn(m, shard, func(n string) bool {
			for _, l := range locks {
				if l.Name() == n {
					return false
				}
			}
			return true
		})
		l, err := c.Acquire(ctx, name, Options{Lease: 5 * time.Second})
		if err != nil {
			t.Fatalf("%s on %s: %v", name, shard, err)
		}
		locks = append(locks, l)
	}
	for _, l := range locks {
		if !l.Held() {
			t.Fatalf("%s not held", l.Name())
		}
		_ = l.Release()
	}
	// A client with the stale map: a name it puts on alpha that the servers put on gamma.
	old := &Client{Servers: stale}
	om, _ := old.ServerMap()
	moved := nameOn(om, "alpha", func(n string) bool { return m.Shards[m.ShardOf(n)].Name == "gamma" })
	_, err = old.Acquire(ctx, moved, Options{Lease: 5 * time.Second})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrWrongShard) || e.Class != "client" || e.ServerCode != CodeWrongShard {
		t.Fatalf("stale map: got %v, want WRONG_SHARD", err)
	}
	want := "the client's map alpha,beta (generation 0) places it on shard alpha and sent it to " + om.Shards[0].Addresses[0] +
		", but the server there is shard alpha of alpha,beta,gamma (generation 1), where it belongs to shard gamma: " +
		"what differs is the shards (2 in the client's map, 3 in the server's; gamma only in the server's), and the generation (0 in the client's map, 1 in the server's); " +
		"fix the map (LOCKD_SERVER) and claim again"
	if e.Message != want {
		t.Fatalf("message %q, want %q", e.Message, want)
	}
}
