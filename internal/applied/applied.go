// Package applied names the three answers to the question every safety
// claim of this module rests on: was a request applied, not applied, or is
// its outcome unknown? Each store's home (internal/pgplumbing,
// internal/valkeyplumbing) answers it for its own errors with Classify.
package applied

import "github.com/golib/lease/lease"

// Outcome says what became of a request.
type Outcome int

const (
	// Yes: the server ran the request and answered; its error was nil.
	Yes Outcome = iota
	// No: the request provably changed nothing. It was never sent, or the
	// server refused it (and rolled back what it had begun).
	No
	// Unknown: the request may or may not have been applied.
	Unknown
)

// String returns "applied", "not applied" or "unknown".
func (o Outcome) String() string {
	switch o {
	case Yes:
		return "applied"
	case No:
		return "not applied"
	case Unknown:
		return "unknown"
	}
	return "Outcome(?)"
}

// Mark returns err matching lease.ErrIndeterminate if o is Unknown, and err
// as it is otherwise.
func (o Outcome) Mark(err error) error {
	if o == Unknown && err != nil {
		return lease.Indeterminate(err)
	}
	return err
}
