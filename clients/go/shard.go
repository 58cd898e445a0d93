package lockd

// Shards (docs/protocol.md section 12): the server map string and the
// placement of lock names on shards by rendezvous hashing, exactly as the
// TypeScript and Python clients do (checked on test/conformance/placement.json).

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// MaxGeneration is the highest map generation: tokens are
// generation<<48 | counter and stay below 2^53.
const MaxGeneration = 31

var shardName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Shard is one shard of a map: its name ("" for a plain address list) and its servers, tried in order.
type Shard struct {
	Name      string
	Addresses []string
}

// ServerMap is a parsed server string: "[gen=N;]NAME=HOST:PORT[,...];..." or a plain address list.
type ServerMap struct {
	Generation int
	Shards     []Shard
}

// Weight is the placement weight of lock on shard: the first 8 bytes of
// SHA-256(UTF-8(shard) || 0x00 || UTF-8(lock)), big-endian.
func Weight(shard, lock string) [8]byte {
	h := sha256.New()
	h.Write([]byte(shard))
	h.Write([]byte{0})
	h.Write([]byte(lock))
	var w [8]byte
	copy(w[:], h.Sum(nil))
	return w
}

// PlaceIndex is the index in shards of the shard lock belongs to: the
// largest weight; on equal weights the name first in byte order.
func PlaceIndex(shards []string, lock string) int {
	best := -1
	var bestW [8]byte
	for i, s := range shards {
		w := Weight(s, lock)
		if best < 0 {
			best, bestW = i, w
			continue
		}
		c := bytes.Compare(w[:], bestW[:])
		if c > 0 || (c == 0 && s < shards[best]) {
			best, bestW = i, w
		}
	}
	return best
}

// Names are the shard names of the map, in the order given.
func (m *ServerMap) Names() []string {
	out := make([]string, len(m.Shards))
	for i, s := range m.Shards {
		out[i] = s.Name
	}
	return out
}

// ShardOf is the index of the shard name belongs to (0 for a plain list).
func (m *ServerMap) ShardOf(name string) int {
	if len(m.Shards) == 1 {
		return 0
	}
	return PlaceIndex(m.Names(), name)
}

// Describe is "alpha,beta (generation N)", as servers describe their map.
func (m *ServerMap) Describe() string {
	return fmt.Sprintf("%s (generation %d)", strings.Join(m.Names(), ","), m.Generation)
}

func badMap(format string, args ...interface{}) error {
	return &Error{Code: "BAD_REQUEST", Class: "client", Message: fmt.Sprintf(format, args...)}
}

func parseAddresses(list string) ([]string, error) {
	var out []string
	parts := strings.Split(list, ",")
	for i, part := range parts {
		part = strings.TrimSpace(part)
		if strings.HasPrefix(part, ":") {
			part = "127.0.0.1" + part
		}
		host, port, err := net.SplitHostPort(part)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return nil, badMap("element %d of %q (%q) is not HOST:PORT", i+1, list, part)
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return out, nil
}

// ParseServerMap reads a server string (the same grammar as the TypeScript
// client's, docs/client.md). Errors are *Error with Code BAD_REQUEST.
func ParseServerMap(s string) (*ServerMap, error) {
	parts := strings.Split(s, ";")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	for len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	m := &ServerMap{}
	if strings.HasPrefix(parts[0], "gen=") {
		g, err := strconv.Atoi(strings.TrimSpace(parts[0][4:]))
		if err != nil || g < 0 || g > MaxGeneration || strings.HasPrefix(strings.TrimSpace(parts[0][4:]), "-") {
			return nil, badMap("generation %q is not a whole number in 0..%d", parts[0][4:], MaxGeneration)
		}
		m.Generation = g
		parts = parts[1:]
		if len(parts) == 0 {
			return nil, badMap("%q has a generation but no servers", s)
		}
	}
	if len(parts) == 1 && !strings.Contains(parts[0], "=") {
		if parts[0] == "" {
			return nil, badMap("no address given")
		}
		addrs, err := parseAddresses(parts[0])
		if err != nil {
			return nil, err
		}
		m.Shards = []Shard{{Name: "", Addresses: addrs}}
		return m, nil
	}
	seen := map[string]string{}
	for i, part := range parts {
		eq := strings.Index(part, "=")
		if eq < 0 {
			return nil, badMap("shard %d of %q (%q) has no NAME=", i+1, s, part)
		}
		name := strings.TrimSpace(part[:eq])
		if name == "gen" {
			return nil, badMap("shard %d of %q: gen=N must come first, once", i+1, s)
		}
		if !shardName.MatchString(name) {
			return nil, badMap("shard name %q must be 1 to 63 of a-z 0-9 - _, starting with a letter or digit", name)
		}
		for _, sh := range m.Shards {
			if sh.Name == name {
				return nil, badMap("shard %q is named twice", name)
			}
		}
		addrs, err := parseAddresses(part[eq+1:])
		if err != nil {
			return nil, badMap("shard %q of the map: %s", name, err.(*Error).Message)
		}
		for _, a := range addrs {
			if other, ok := seen[a]; ok {
				return nil, badMap("%s is in two shards (%q and %q)", a, other, name)
			}
			seen[a] = name
		}
		m.Shards = append(m.Shards, Shard{Name: name, Addresses: addrs})
	}
	return m, nil
}
