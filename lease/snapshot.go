package lease

import (
	"strconv"
	"time"
)

// Token is a fencing token: a number issued by the backend for one
// acquisition of one key, strictly greater than every token issued for that
// key before (also after the backend lost its data, as long as the
// backend's clock does not step back). Renewal keeps the token. Tokens of
// different keys are unrelated. Tokens issued by the backends of this module
// stay below 2^53, so they survive Lua numbers and JSON exactly.
type Token uint64

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// Snapshot is an immutable copy of the coordinates of one acquisition: what
// middleware (fences, guards) needs to make a write conditional on it. It
// carries no secret and no way to renew or release the lease.
type Snapshot struct {
	// Key names the leased resource.
	Key string
	// Owner is the owner string of the client that acquired the lease.
	Owner string
	// Token is the acquisition's fencing token.
	Token Token
	// Deadline is the local deadline when the snapshot was taken: the
	// monotonic instant after which the holder must assume the lease is
	// gone. It is later extended by renewals; take a new snapshot to see it.
	Deadline time.Time
}

// Valid reports whether s names an acquisition at all (non-empty key and a
// non-zero token). It does not ask the backend.
func (s Snapshot) Valid() bool { return s.Key != "" && s.Token != 0 }
