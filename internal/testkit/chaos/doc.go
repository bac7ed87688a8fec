// Package chaos runs lease clients against real servers while injecting
// faults, records every operation, and checks the recorded history against
// a model with porcupine. It is what docs/reliability.md reports on.
//
// # Harness
//
// A run has several clients. Most are goroutines of the test process; one
// or more are child processes (the test binary run again with LEASE_CHAOS_CHILD
// set, see RunChild), so that a nemesis can SIGSTOP a whole holder. Each
// client loops: acquire a random key, claim its resource through the fence,
// make fenced writes and reads while managed renewal keeps the lease, then
// release it (or, now and then, let it expire). With Options.Semaphore and
// Options.SetSize, a round may take a permit of a semaphore or a set of keys
// instead, and write through the fence per slot, per semaphore or by each
// key of the set. With Options.HandOffs a client ends some rounds with
// Handle.HandOff to other clients' owner strings instead of Release (its
// preferred candidate first, if any: every other client asks to be
// preferred), and with Options.Observers observer lanes record every state
// Client.Observe reports. A nemesis injects one kind of fault at random times and heals
// it at the end.
//
// Every backend call (from Client.Acquire's attempts, Managed's renewals,
// Release) goes through a recording lease.Backend, and every fenced write and
// read through a recording store, so the history holds exactly what the
// servers were asked and what they answered: the lane (client id), the
// input, the outcome, and the wall-clock times of call and return in
// microseconds. An outcome that is unknown (lease.ErrIndeterminate) is
// recorded as such, and the lane that issued it continues under a new id:
// as in Jepsen, a client whose request may still be in flight can't be
// said to have started its next one.
//
// # Model
//
// Check partitions the history by lease key and by resource and checks each
// partition for linearizability against a sequential model; Model's
// documentation says exactly what it refuses and why it is sound on a
// loaded machine. A permit is a lease on its permit key and a set holds
// each of its keys (see Expand); each semaphore's bound and the order of
// its tokens across slots are checked beside the model. Check also compares every client's sampled belief in its
// lease with the backend's expiry (see checkDeadlines). On a violation it
// writes porcupine's HTML visualisation and the history as JSON lines to
// OutDir.
//
// # Clocks
//
// The servers run on the same host as the test, so the backend's clock (Valkey
// TIME, PostgreSQL clock_timestamp()) and the wall clock the recorder reads are
// one clock. The checker relies on that, and on nothing else about timing: a
// backend operation happened, on the backend's clock, between the call and the
// return recorded around it, however late the recorder ran.
package chaos
