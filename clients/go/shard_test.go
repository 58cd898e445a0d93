package lockd

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// The placement vectors and map strings shared by all three clients.
type placementVectors struct {
	Weights []struct {
		Shard, Lock, Weight string
	}
	Placements []struct {
		Shards []string
		Lock   string
		Shard  string
	}
	Maps []struct {
		Servers    string
		Generation int
		Shards     []Shard
		Error      *string
	}
}

func loadVectors(t *testing.T) placementVectors {
	t.Helper()
	raw, err := os.ReadFile("../../test/conformance/placement.json")
	if err != nil {
		t.Fatal(err)
	}
	var v placementVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Weights) == 0 || len(v.Placements) == 0 || len(v.Maps) == 0 {
		t.Fatal("empty vector file")
	}
	return v
}

func TestPlacementVectors(t *testing.T) {
	v := loadVectors(t)
	for _, w := range v.Weights {
		got := Weight(w.Shard, w.Lock)
		if hex.EncodeToString(got[:]) != w.Weight {
			t.Errorf("weight(%q, %q) = %x, want %s", w.Shard, w.Lock, got, w.Weight)
		}
	}
	for _, p := range v.Placements {
		if got := p.Shards[PlaceIndex(p.Shards, p.Lock)]; got != p.Shard {
			t.Errorf("shard of %q in %v = %s, want %s", p.Lock, p.Shards, got, p.Shard)
		}
	}
}

func TestMapVectors(t *testing.T) {
	v := loadVectors(t)
	for _, m := range v.Maps {
		got, err := ParseServerMap(m.Servers)
		if m.Error != nil {
			if err == nil {
				t.Errorf("%q parsed (%+v); want an error (%s)", m.Servers, got, *m.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", m.Servers, err)
			continue
		}
		want := &ServerMap{Generation: m.Generation, Shards: m.Shards}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q = %+v, want %+v", m.Servers, got, want)
		}
	}
}
