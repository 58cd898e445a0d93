package lockd

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Frame types and flags of protocol version 1 (docs/protocol.md sections 2 to 4).
const (
	ProtocolVersion = 1

	TypeAcquire   = 0x01
	TypeHeartbeat = 0x02
	TypeAcquired  = 0x81
	TypeWaiting   = 0x82
	TypeError     = 0xFF

	FlagReply = 0x01
	// FlagSlot (ACQUIRED): the body is the token and a u16 slot (10 bytes);
	// set on every ACQUIRED of a name with limit above 1, never else.
	FlagSlot = 0x02
	// FlagReclaimable (ACQUIRED): the grant may be reclaimed after a clean
	// restart of the server (docs/protocol.md section 14); set on every
	// ACQUIRED of such a grant.
	FlagReclaimable = 0x04
	// FlagReclaim (ERROR SHUTTING_DOWN): a clean stop that published this
	// holder's grant; its next run accepts a reclaim of it.
	FlagReclaim = 0x04

	OptionTry = 0x01
	// OptionShared (ACQUIRE): a shared (read) claim; limit 1 only.
	OptionShared = 0x02
	// OptionLimit (ACQUIRE): a u16 limit follows lease_ms, and name_length moves to body offset 8.
	OptionLimit = 0x04
	// OptionReclaim (ACQUIRE): a reclaim of a grant the claim holds: a u64
	// token (and, with OptionLimit, a u16 slot) follows lease_ms and limit.
	OptionReclaim = 0x08

	// MaxLimit is the highest limit (permits of a name); 1 is the exclusive lock.
	MaxLimit = 0xFFFF

	MaxNameLength  = 512
	MaxOwnerLength = 256
)

// Server ERROR codes (docs/protocol.md section 5).
const (
	CodeShuttingDown       = 0x01
	CodeOverloaded         = 0x02
	CodeLeaseExpired       = 0x10
	CodeForceReleased      = 0x11
	CodeKicked             = 0x12
	CodeLockBusy           = 0x13
	CodeLockDelayed        = 0x14 // a TRY while the name is held back by a lock-delay (after a failover or restart)
	CodeReclaimRefused     = 0x15 // a reclaim the server cannot grant (docs/protocol.md section 14): the holder's lock is lost
	CodeProtocolError      = 0x20
	CodeBadRequest         = 0x21
	CodeUnsupportedVersion = 0x22
	CodeIOTimeout          = 0x23
	CodeWrongShard         = 0x24
	CodeLimitMismatch      = 0x25 // the claim's limit differs from the limit of the name's live sessions (shared or exclusive counts as 1)
)

var codeNames = map[byte]string{
	CodeShuttingDown: "SHUTTING_DOWN", CodeOverloaded: "OVERLOADED", CodeLeaseExpired: "LEASE_EXPIRED",
	CodeForceReleased: "FORCE_RELEASED", CodeKicked: "KICKED", CodeLockBusy: "LOCK_BUSY", CodeLockDelayed: "LOCK_DELAYED",
	CodeReclaimRefused: "RECLAIM_REFUSED", CodeProtocolError: "PROTOCOL_ERROR", CodeBadRequest: "BAD_REQUEST", CodeUnsupportedVersion: "UNSUPPORTED_VERSION",
	CodeIOTimeout: "IO_TIMEOUT", CodeWrongShard: "WRONG_SHARD", CodeLimitMismatch: "LIMIT_MISMATCH",
}

// CodeName is the protocol's name of an ERROR code, or "UNKNOWN_0xNN".
func CodeName(code byte) string {
	if n, ok := codeNames[code]; ok {
		return n
	}
	return fmt.Sprintf("UNKNOWN_0x%02x", code)
}

// HeartbeatFrame is the whole HEARTBEAT frame.
var HeartbeatFrame = []byte{TypeHeartbeat, 0, 0, 0}

// AcquireRequest is what one ACQUIRE asks for.
type AcquireRequest struct {
	Name    string
	Owner   string
	LeaseMs uint64
	Try     bool
	// Limit is the permits of the name, 1 .. 65,535; 0 means 1 (an exclusive
	// or shared lock). Above 1 the name is a semaphore of Limit holders.
	Limit int
	// Shared is a shared (read) claim: it holds beside other shared claims of the name. Limit 1 only.
	Shared bool
	// Reclaim, when set, makes this ACQUIRE a reclaim of the grant it names
	// (OptionReclaim, docs/protocol.md section 14).
	Reclaim *Reclaim
}

// Reclaim names the grant an ACQUIRE with OptionReclaim reclaims: its token,
// and for a limit above 1 its slot (0 .. Limit-1; ignored for limit 1).
type Reclaim struct {
	Token uint64
	Slot  int
}

// EncodeAcquire returns the ACQUIRE frame of an exclusive claim (limit 1).
func EncodeAcquire(name, owner string, leaseMs uint64, try bool) ([]byte, error) {
	return EncodeAcquireRequest(AcquireRequest{Name: name, Owner: owner, LeaseMs: leaseMs, Try: try})
}

// EncodeAcquireRequest returns the ACQUIRE frame. Limit 1 is sent without
// OptionLimit, so an exclusive or shared claim's bytes keep the layout of
// name_length at body offset 6; with a limit above 1 the u16 limit sits at
// offset 6 and name_length at 8. It refuses what the frame cannot carry (a
// body over 65,535 bytes, lease 0 or over 2^32-1, a limit outside 1 .. 65,535,
// a reclaim's slot outside 0 .. limit-1) and a shared claim with a limit
// above 1; the server judges everything else and answers BAD_REQUEST. With
// Reclaim the token (u64) follows the limit (or lease_ms), then with a limit
// above 1 the slot (u16), then name_length.
func EncodeAcquireRequest(r AcquireRequest) ([]byte, error) {
	if r.LeaseMs == 0 || r.LeaseMs > 0xFFFFFFFF {
		return nil, fmt.Errorf("lease must be 1 .. 4294967295 ms, got %d", r.LeaseMs)
	}
	limit := r.Limit
	if limit == 0 {
		limit = 1
	}
	if limit < 1 || limit > MaxLimit {
		return nil, fmt.Errorf("limit must be 1 .. %d, got %d", MaxLimit, r.Limit)
	}
	if r.Shared && limit != 1 {
		return nil, fmt.Errorf("a shared claim has limit 1, got %d (a name is a read/write lock or a semaphore, not both)", limit)
	}
	fixed := 8
	if limit != 1 {
		fixed = 10
	}
	if r.Reclaim != nil {
		fixed += 8
		if limit != 1 {
			if r.Reclaim.Slot < 0 || r.Reclaim.Slot >= limit {
				return nil, fmt.Errorf("a reclaim of a semaphore's grant names its slot 0 .. %d, got %d", limit-1, r.Reclaim.Slot)
			}
			fixed += 2
		}
	}
	bodyLen := fixed + len(r.Name) + len(r.Owner)
	if len(r.Name) > 0xFFFF || bodyLen > 0xFFFF {
		return nil, fmt.Errorf("name and owner are too long for one frame (%d bytes)", bodyLen)
	}
	f := make([]byte, 4+bodyLen)
	f[0] = TypeAcquire
	binary.BigEndian.PutUint16(f[2:], uint16(bodyLen))
	f[4] = ProtocolVersion
	var options byte
	if r.Try {
		options |= OptionTry
	}
	if r.Shared {
		options |= OptionShared
	}
	if limit != 1 {
		options |= OptionLimit
		binary.BigEndian.PutUint16(f[10:], uint16(limit))
	}
	if r.Reclaim != nil {
		options |= OptionReclaim
		at := 10
		if limit != 1 {
			at = 12
			binary.BigEndian.PutUint16(f[at+8:], uint16(r.Reclaim.Slot))
		}
		binary.BigEndian.PutUint64(f[at:], r.Reclaim.Token)
	}
	f[5] = options
	binary.BigEndian.PutUint32(f[6:], uint32(r.LeaseMs))
	binary.BigEndian.PutUint16(f[4+fixed-2:], uint16(len(r.Name)))
	copy(f[4+fixed:], r.Name)
	copy(f[4+fixed+len(r.Name):], r.Owner)
	return f, nil
}

// Frame is one decoded server frame.
type Frame struct {
	Type    byte
	Flags   byte
	Token   uint64 // ACQUIRED
	Slot    uint16 // ACQUIRED with FlagSlot
	Code    byte   // ERROR
	Message string // ERROR
}

// Reply reports whether the REPLY flag is set.
func (f Frame) Reply() bool { return f.Flags&FlagReply != 0 }

// Reclaimable reports whether an ACQUIRED carries FlagReclaimable.
func (f Frame) Reclaimable() bool { return f.Type == TypeAcquired && f.Flags&FlagReclaimable != 0 }

// HasSlot reports whether an ACQUIRED carries a slot (FlagSlot, a 10-byte body).
func (f Frame) HasSlot() bool { return f.Type == TypeAcquired && f.Flags&FlagSlot != 0 }

// Reader decodes server frames from a byte stream: frames split across
// pushes and several frames in one push are both handled. A frame type
// other than ACQUIRED, WAITING, ERROR, or a body length outside its type's
// range, or an ACQUIRED whose FlagSlot and body length disagree (FlagSlot
// with 10 bytes, no flag with 8), is an error (the connection is broken).
type Reader struct {
	buf []byte
}

// Push appends bytes and returns the complete frames now available.
func (r *Reader) Push(chunk []byte) ([]Frame, error) {
	r.buf = append(r.buf, chunk...)
	var out []Frame
	for len(r.buf) >= 4 {
		t, flags, n := r.buf[0], r.buf[1], int(binary.BigEndian.Uint16(r.buf[2:]))
		if err := checkHeader(r.buf, t, flags, n); err != nil {
			if err == errSpeaksTLS {
				return out, err
			}
			return out, violationError{err}
		}
		if len(r.buf) < 4+n {
			break
		}
		body := r.buf[4 : 4+n]
		f := Frame{Type: t, Flags: flags}
		switch t {
		case TypeAcquired:
			f.Token = binary.BigEndian.Uint64(body)
			if n == 10 {
				f.Slot = binary.BigEndian.Uint16(body[8:])
			}
		case TypeError:
			f.Code = body[0]
			f.Message = string(body[1:])
			if !utf8.ValidString(f.Message) {
				f.Message = fmt.Sprintf("%q", f.Message)
			}
		}
		out = append(out, f)
		r.buf = r.buf[4+n:]
	}
	if len(r.buf) == 0 {
		r.buf = nil
	}
	return out, nil
}

func checkHeader(buf []byte, t, flags byte, n int) error {
	switch t {
	case TypeAcquired:
		if n == 8 && flags&FlagSlot == 0 || n == 10 && flags&FlagSlot != 0 {
			return nil
		}
		if n == 8 || n == 10 {
			return fmt.Errorf("ACQUIRED with flags 0x%02x and a %d-byte body (FLAG_SLOT goes with 10 bytes, its absence with 8)", flags, n)
		}
	case TypeWaiting:
		if n == 0 {
			return nil
		}
	case TypeError:
		if n >= 1 && n <= 1025 {
			return nil
		}
	case 0x15, 0x16:
		return errSpeaksTLS
	case 'H':
		if string(buf[:4]) == "HTTP" {
			return errSpeaksHTTP
		}
		return fmt.Errorf("unknown server frame type 0x%02x", t)
	default:
		return fmt.Errorf("unknown server frame type 0x%02x", t)
	}
	return fmt.Errorf("server frame type 0x%02x with body length %d out of range", t, n)
}

var (
	errSpeaksTLS  = fmt.Errorf("the server speaks TLS (a TLS record arrived): set TLS in the client options")
	errSpeaksHTTP = fmt.Errorf("the server answered with HTTP: this is an HTTP port (the ops port, most likely), not the lock port")
)
