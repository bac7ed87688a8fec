package chaos

import (
	"fmt"
	"slices"
)

// QueueItem is what a queue run left of one work item: its final state as
// the source reports it, the tokens of the claims that began an attempt
// at it (as their workers saw them), and the tokens recorded by the
// completions' own writes, made atomically with the completion
// (leasequeue's CompleteTx or CompleteClaimWith), as the store holds them.
type QueueItem struct {
	Queue, ID string
	// State is the item's state at the end ("done" when it was
	// completed).
	State string
	// Claims are the tokens of the claims that began an attempt.
	Claims []uint64
	// Completions are the tokens the completion writes recorded, one for
	// each completion that committed.
	Completions []uint64
}

// CheckQueue checks the outcome of a queue run that ended with every
// worker stopped and a final worker draining the queue: every item was
// completed exactly once (one completion write, state done: none stuck,
// none done twice), by a current claim: the completing token is the
// highest token that began an attempt, so no superseded claim completed
// it (a claim that began after the completion would have found it done).
// It returns the violations.
func CheckQueue(items []QueueItem) []string {
	var problems []string
	for _, it := range items {
		name := fmt.Sprintf("queue %q item %q", it.Queue, it.ID)
		switch {
		case len(it.Completions) == 0 && it.State == "done":
			problems = append(problems, fmt.Sprintf("%s: done, but no completion wrote anything (claims %v)", name, it.Claims))
		case len(it.Completions) == 0:
			problems = append(problems, fmt.Sprintf("%s: stuck in state %q, never completed (claims %v)", name, it.State, it.Claims))
		case len(it.Completions) > 1:
			problems = append(problems, fmt.Sprintf("%s: completed %d times, by tokens %v", name, len(it.Completions), it.Completions))
		case it.State != "done":
			problems = append(problems, fmt.Sprintf("%s: completed by token %d, but in state %q", name, it.Completions[0], it.State))
		case len(it.Claims) == 0:
			problems = append(problems, fmt.Sprintf("%s: completed by token %d, which no claim began", name, it.Completions[0]))
		case it.Completions[0] != slices.Max(it.Claims):
			problems = append(problems, fmt.Sprintf("%s: completed by token %d, superseded by the claim with token %d (claims %v)",
				name, it.Completions[0], slices.Max(it.Claims), it.Claims))
		}
	}
	return problems
}
