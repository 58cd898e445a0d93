package lockd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// wrongShardMessage is a lockd server's WRONG_SHARD message, in the words of
// src/shard/mismatch.ts (wrongShardMessage).
func wrongShardMessage(shard, shards string, generation int, owner string) string {
	return fmt.Sprintf("this server is shard %s of %s (generation %d), where this lock belongs to shard %s: "+
		"the client's server map differs from the servers'; fix the map (LOCKD_SERVER) and claim again", shard, shards, generation, owner)
}

// Swapped addresses (same shard names and generation): the claim for a name on
// alpha goes to the address the map lists under alpha, which serves beta. The
// error names that address and both shards, in the TypeScript client's words.
func TestWrongShardNamesTheSwappedAddress(t *testing.T) {
	beta, _ := scripted(t, errorFrame(CodeWrongShard, wrongShardMessage("beta", "alpha,beta", 1, "alpha")))
	alpha, _ := scripted(t, errorFrame(CodeWrongShard, wrongShardMessage("alpha", "alpha,beta", 1, "beta")))
	client := &Client{Servers: fmt.Sprintf("gen=1;alpha=%s;beta=%s", beta, alpha)}
	m, err := client.ServerMap()
	if err != nil {
		t.Fatal(err)
	}
	name := ""
	for i := 0; i < 1000 && name == ""; i++ {
		if n := fmt.Sprintf("jobs/%d", i); m.Shards[m.ShardOf(n)].Name == "alpha" {
			name = n
		}
	}
	if name == "" {
		t.Fatal("no name on alpha")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lock, err := client.Acquire(ctx, name, Options{Lease: 2 * time.Second})
	if lock != nil {
		lock.Release()
		t.Fatal("granted")
	}
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrWrongShard) || e.Class != "client" || e.ServerCode != CodeWrongShard {
		t.Fatalf("got %v, want WRONG_SHARD", err)
	}
	want := fmt.Sprintf("lockd: WRONG_SHARD (%s): the client's map alpha,beta (generation 1) places it on shard alpha and sent it to %s, "+
		"but the server there is shard beta of the same shards and generation: "+
		"what differs is the addresses: the client's map lists %s, a server of shard beta, under shard alpha; fix the map (LOCKD_SERVER) and claim again", name, beta, beta)
	if err.Error() != want {
		t.Fatalf("message\n %q\nwant\n %q", err.Error(), want)
	}
}

// The other cases of src/shard/mismatch.ts's test, word for word.
func TestDescribeMismatch(t *testing.T) {
	two := &ServerMap{Generation: 1, Shards: []Shard{{Name: "alpha"}, {Name: "beta"}}}
	if got, want := describeMismatch(two, "alpha", "10.0.0.2:7700", wrongShardMessage("beta", "beta,alpha", 1, "alpha")),
		"the client's map alpha,beta (generation 1) places it on shard alpha and sent it to 10.0.0.2:7700, but the server there is shard beta of the same shards and generation: "+
			"what differs is the addresses: the client's map lists 10.0.0.2:7700, a server of shard beta, under shard alpha; fix the map (LOCKD_SERVER) and claim again"; got != want {
		t.Errorf("names in another order:\n %q\nwant\n %q", got, want)
	}
	three := &ServerMap{Generation: 3, Shards: []Shard{{Name: "alpha"}, {Name: "beta"}, {Name: "gamma"}}}
	if got, want := describeMismatch(three, "alpha", "", wrongShardMessage("alpha", "alpha,beta", 2, "beta")),
		"the client's map alpha,beta,gamma (generation 3) places it on shard alpha, but the server is shard alpha of alpha,beta (generation 2), where it belongs to shard beta: "+
			"what differs is the shards (3 in the client's map, 2 in the server's; gamma only in the client's), and the generation (3 in the client's map, 2 in the server's); "+
			"fix the map (LOCKD_SERVER) and claim again"; got != want {
		t.Errorf("shards and generation:\n %q\nwant\n %q", got, want)
	}
	zero := &ServerMap{Generation: 0, Shards: []Shard{{Name: "alpha"}, {Name: "beta"}}}
	if got, want := describeMismatch(zero, "beta", "[::1]:7701", "not mine"),
		"the client's map alpha,beta (generation 0) places it on shard beta and sent it to [::1]:7701, but not mine"; got != want {
		t.Errorf("other words:\n %q\nwant\n %q", got, want)
	}
}
