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

// serverShardView is what a server that refused a name says about itself
// (its WRONG_SHARD message, docs/protocol.md section 12.2): its shard, its
// map's shard names and generation, and the shard the name belongs to.
type serverShardView struct {
	shard      string
	shards     []string
	generation int
	owner      string
}

var wrongShardWords = regexp.MustCompile(`^this server is shard ([a-z0-9][a-z0-9_-]*) of ([a-z0-9][a-z0-9_,-]*) \(generation (\d+)\), where this lock belongs to shard ([a-z0-9][a-z0-9_-]*):`)

// parseWrongShard reads a lockd server's WRONG_SHARD message; ok is false
// when the message is in other words.
func parseWrongShard(message string) (v serverShardView, ok bool) {
	m := wrongShardWords.FindStringSubmatch(message)
	if m == nil {
		return v, false
	}
	g, err := strconv.Atoi(m[3])
	if err != nil {
		return v, false
	}
	return serverShardView{shard: m[1], shards: strings.Split(m[2], ","), generation: g, owner: m[4]}, true
}

func describeShards(shards []string, generation int) string {
	return fmt.Sprintf("%s (generation %d)", strings.Join(shards, ","), generation)
}

// describeMismatch is a WRONG_SHARD refusal in the client's words (the same
// as the TypeScript client's): where the client sent the name (shard, and
// address when known), what the server there is, and what differs: the
// shard names (and counts), the generation, or the address the map lists
// under the wrong shard. A server message in other words is passed on.
func describeMismatch(m *ServerMap, shard, address, serverMessage string) string {
	names := m.Names()
	sentTo := ""
	if address != "" {
		sentTo = " and sent it to " + address
	}
	head := fmt.Sprintf("the client's map %s places it on shard %s%s", describeShards(names, m.Generation), shard, sentTo)
	server, ok := parseWrongShard(serverMessage)
	if !ok {
		if serverMessage == "" {
			serverMessage = "the server says it is another shard's"
		}
		return head + ", but " + serverMessage
	}
	in := func(list []string, name string) bool {
		for _, s := range list {
			if s == name {
				return true
			}
		}
		return false
	}
	var onlyOurs, onlyTheirs []string
	for _, n := range names {
		if !in(server.shards, n) {
			onlyOurs = append(onlyOurs, n)
		}
	}
	for _, n := range server.shards {
		if !in(names, n) {
			onlyTheirs = append(onlyTheirs, n)
		}
	}
	sameNames := len(onlyOurs) == 0 && len(onlyTheirs) == 0
	sameGeneration := server.generation == m.Generation
	var differs []string
	if !sameNames {
		var only []string
		if len(onlyOurs) > 0 {
			only = append(only, strings.Join(onlyOurs, ",")+" only in the client's")
		}
		if len(onlyTheirs) > 0 {
			only = append(only, strings.Join(onlyTheirs, ",")+" only in the server's")
		}
		differs = append(differs, fmt.Sprintf("the shards (%d in the client's map, %d in the server's; %s)", len(names), len(server.shards), strings.Join(only, "; ")))
	}
	if !sameGeneration {
		differs = append(differs, fmt.Sprintf("the generation (%d in the client's map, %d in the server's)", m.Generation, server.generation))
	}
	if server.shard != shard {
		at := address
		if at == "" {
			at = "the address it asked"
		}
		differs = append(differs, fmt.Sprintf("the addresses: the client's map lists %s, a server of shard %s, under shard %s", at, server.shard, shard))
	}
	there := "the server there"
	if address == "" {
		there = "the server"
	}
	serverMap := "of the same shards and generation"
	if !sameNames || !sameGeneration {
		serverMap = "of " + describeShards(server.shards, server.generation)
	}
	owner := ""
	if server.owner != shard {
		owner = ", where it belongs to shard " + server.owner
	}
	what := "the maps differ"
	if len(differs) > 0 {
		what = "what differs is " + strings.Join(differs, ", and ")
	}
	return fmt.Sprintf("%s, but %s is shard %s %s%s: %s; fix the map (LOCKD_SERVER) and claim again", head, there, server.shard, serverMap, owner, what)
}
