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
	OptionTry = 0x01

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
	CodeProtocolError      = 0x20
	CodeBadRequest         = 0x21
	CodeUnsupportedVersion = 0x22
	CodeIOTimeout          = 0x23
	CodeWrongShard         = 0x24
)

var codeNames = map[byte]string{
	CodeShuttingDown: "SHUTTING_DOWN", CodeOverloaded: "OVERLOADED", CodeLeaseExpired: "LEASE_EXPIRED",
	CodeForceReleased: "FORCE_RELEASED", CodeKicked: "KICKED", CodeLockBusy: "LOCK_BUSY", CodeLockDelayed: "LOCK_DELAYED",
	CodeProtocolError: "PROTOCOL_ERROR", CodeBadRequest: "BAD_REQUEST", CodeUnsupportedVersion: "UNSUPPORTED_VERSION",
	CodeIOTimeout: "IO_TIMEOUT", CodeWrongShard: "WRONG_SHARD",
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

// EncodeAcquire returns the ACQUIRE frame. It refuses only what the frame
// cannot carry (a body over 65,535 bytes, lease 0 or over 2^32-1); the
// server judges everything else and answers BAD_REQUEST.
func EncodeAcquire(name, owner string, leaseMs uint64, try bool) ([]byte, error) {
	if leaseMs == 0 || leaseMs > 0xFFFFFFFF {
		return nil, fmt.Errorf("lease must be 1 .. 4294967295 ms, got %d", leaseMs)
	}
	bodyLen := 8 + len(name) + len(owner)
	if len(name) > 0xFFFF || bodyLen > 0xFFFF {
		return nil, fmt.Errorf("name and owner are too long for one frame (%d bytes)", bodyLen)
	}
	f := make([]byte, 4+bodyLen)
	f[0] = TypeAcquire
	binary.BigEndian.PutUint16(f[2:], uint16(bodyLen))
	f[4] = ProtocolVersion
	if try {
		f[5] = OptionTry
	}
	binary.BigEndian.PutUint32(f[6:], uint32(leaseMs))
	binary.BigEndian.PutUint16(f[10:], uint16(len(name)))
	copy(f[12:], name)
	copy(f[12+len(name):], owner)
	return f, nil
}

// Frame is one decoded server frame.
type Frame struct {
	Type    byte
	Flags   byte
	Token   uint64 // ACQUIRED
	Code    byte   // ERROR
	Message string // ERROR
}

// Reply reports whether the REPLY flag is set.
func (f Frame) Reply() bool { return f.Flags&FlagReply != 0 }

// Reader decodes server frames from a byte stream: frames split across
// pushes and several frames in one push are both handled. A frame type
// other than ACQUIRED, WAITING, ERROR, or a body length outside its type's
// range, is an error (the connection is broken).
type Reader struct {
	buf []byte
}

// Push appends bytes and returns the complete frames now available.
func (r *Reader) Push(chunk []byte) ([]Frame, error) {
	r.buf = append(r.buf, chunk...)
	var out []Frame
	for len(r.buf) >= 4 {
		t, flags, n := r.buf[0], r.buf[1], int(binary.BigEndian.Uint16(r.buf[2:]))
		if err := checkHeader(r.buf, t, n); err != nil {
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

func checkHeader(buf []byte, t byte, n int) error {
	switch t {
	case TypeAcquired:
		if n == 8 {
			return nil
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
