package lockd

import "fmt"

// Error is every error of this package. Code is stable (the same names as
// the TypeScript and Python clients); Class says whose problem it is:
// "server" (a server condition; later may work), "lock" (the lock rules
// said no), "client" (the request is wrong, or the caller cancelled).
type Error struct {
	Code  string // LOCK_BUSY, LOCK_DELAYED, WAIT_TIMEOUT, LOCK_LOST, SERVER_UNAVAILABLE, ABORTED, PROTOCOL_VIOLATION, or a server code name (KICKED, BAD_REQUEST, ...)
	Class string // "server", "lock", "client"
	// Why the lock was lost (Code LOCK_LOST): "server-error", "closed", "unconfirmed", "protocol" (the server broke the protocol), "aborted", "released".
	Why string
	// ServerCode is the ERROR frame's code when the server sent one, else 0; ServerMessage its message.
	ServerCode    byte
	ServerMessage string
	Lock          string
	Message       string
	Err           error  // the underlying error, if any
	server        string // the address (HOST:PORT) whose ERROR frame this is, "" otherwise
}

func (e *Error) Error() string {
	return fmt.Sprintf("lockd: %s (%s): %s", e.Code, e.Lock, e.detail())
}

// detail is the message with its causes; a cause that is an *Error gives its
// message only: its code is an internal step (a connection CLOSED on the way
// to SERVER_UNAVAILABLE), and one code per error line is what users read.
func (e *Error) detail() string {
	if e.Err == nil {
		return e.Message
	}
	if inner, ok := e.Err.(*Error); ok {
		return e.Message + ": " + inner.detail()
	}
	return e.Message + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches on Code, so errors.Is(err, lockd.ErrLockBusy) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Why == "" || t.Why == e.Why)
}

// Sentinels for errors.Is.
var (
	ErrLockBusy          = &Error{Code: "LOCK_BUSY"}
	ErrWaitTimeout       = &Error{Code: "WAIT_TIMEOUT"}
	ErrLockLost          = &Error{Code: "LOCK_LOST"}
	ErrServerUnavailable = &Error{Code: "SERVER_UNAVAILABLE"}
	ErrAborted           = &Error{Code: "ABORTED"}
	ErrKicked            = &Error{Code: "KICKED"}
	ErrBadRequest        = &Error{Code: "BAD_REQUEST"}
	// ErrWrongShard: the server serves another shard than this client's map says; the message names what differs (shards, generation, or the address listed under the wrong shard). Fix the map, do not retry.
	ErrWrongShard = &Error{Code: "WRONG_SHARD"}
	// ErrLockDelayed: Try, and the server holds the name back by a lock-delay (it started
	// serving after a failover or a restart, and a holder an earlier server granted may still
	// believe it holds the lock). ServerMessage says how many ms remain; trying again after
	// that can succeed. Class "lock"; not retried.
	ErrLockDelayed = &Error{Code: "LOCK_DELAYED"}
	// ErrLimitMismatch: the claim's Limit differs from the limit of the name's live
	// claims (a shared or exclusive claim counts as limit 1); ServerMessage names
	// both. Class "client"; not retried.
	ErrLimitMismatch = &Error{Code: "LIMIT_MISMATCH"}
)

// ClassOfCode maps an ERROR code to its class by the high nibble; classes
// above 0x2_ (undefined) are treated like 0x2_: the request will not work as is.
func ClassOfCode(code byte) string {
	switch code >> 4 {
	case 0:
		return "server"
	case 1:
		return "lock"
	default:
		return "client"
	}
}
