package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// QueueItem is what a queue run left of one work item: its final state as
// the source reports it, the tokens of the claims that began an attempt
// at it (as their workers saw them), and the tokens recorded by the
// completions' own writes, made atomically with the completion
// (leasequeue's CompleteTx or CompleteClaimWith), as the store holds them.
// In a run that prunes the source, it also holds what is known of the
// item's removal and of the completion calls made for it.
type QueueItem struct {
	Queue, ID string
	// State is the item's state at the end ("done" when it was
	// completed; "" when Gone).
	State string
	// Gone is set when the source no longer has the item: its Item
	// lookup found nothing.
	Gone bool
	// Claims are the tokens of the claims that began an attempt.
	Claims []uint64
	// Completions are the tokens the completion writes recorded, one for
	// each completion that committed. They outlive the item: the store
	// keeps them where a removal of the item does not reach.
	Completions []uint64
	// Calls are the completion calls the workers made for the item.
	Calls []CompletionCall

	// Removals counts the removals of the item that the store itself
	// recorded (a trigger on PostgreSQL, keyspace events on Valkey),
	// whatever request made them; RemovedIn are the states the item was
	// in when removed, where the store records them (PostgreSQL).
	Removals  int
	RemovedIn []string
	// Listed counts the times a pruner's Sweep listed the item as
	// removed in its reply.
	Listed int
	// LostSweeps counts the sweeps of the item's queue whose outcome is
	// unknown (the request may have been applied, its reply was lost): one
	// of them may have removed the item without anyone seeing it listed.
	LostSweeps int
	// RemovedBy is a time by which the item had been removed: when the
	// first reply or record of its removal reached the test. Zero if
	// none did.
	RemovedBy time.Time
}

// CompletionCall is one call that completes a claim of an item.
type CompletionCall struct {
	// Token is the claim's token.
	Token uint64
	// Began is when the call was made.
	Began time.Time
	// Accepted is set if the call returned no error.
	Accepted bool
}

// states describes the states an item was removed in, if known.
func states(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return fmt.Sprintf(" (while %s)", strings.Join(s, ", then "))
}

// finished reports whether state is one that a sweep may remove.
func finished(state string) bool { return state == "done" || state == "dead" }

// CheckQueue checks the outcome of a queue run that ended with every
// worker stopped and a final worker draining the queue: every item was
// completed exactly once (one completion write, state done: none stuck,
// none done twice), by a current claim: the completing token is the
// highest token that began an attempt, so no superseded claim completed
// it (a claim that began after the completion would have found it done).
//
// An item the source no longer has (Gone) passes only as an item pruned
// after its completion: the store recorded exactly one removal of it, in
// a finished state where the store records states, and a pruner's Sweep
// listed it as removed (or a sweep of its queue lost its reply); it has
// exactly one completion write, by the highest token, as above; and no
// completion call that began after its removal was accepted or left a
// write. An item removed must not be there again, as nothing enqueues it
// twice. It returns the violations.
func CheckQueue(items []QueueItem) []string {
	var problems []string
	for _, it := range items {
		name := fmt.Sprintf("queue %q item %q", it.Queue, it.ID)
		switch {
		case len(it.Completions) == 0 && it.Gone:
			problems = append(problems, fmt.Sprintf("%s: removed%s, never completed (claims %v)", name, states(it.RemovedIn), it.Claims))
		case len(it.Completions) == 0 && it.State == "done":
			problems = append(problems, fmt.Sprintf("%s: done, but no completion wrote anything (claims %v)", name, it.Claims))
		case len(it.Completions) == 0:
			problems = append(problems, fmt.Sprintf("%s: stuck in state %q, never completed (claims %v)", name, it.State, it.Claims))
		case len(it.Completions) > 1:
			problems = append(problems, fmt.Sprintf("%s: completed %d times, by tokens %v", name, len(it.Completions), it.Completions))
		case !it.Gone && it.State != "done":
			problems = append(problems, fmt.Sprintf("%s: completed by token %d, but in state %q", name, it.Completions[0], it.State))
		case len(it.Claims) == 0:
			problems = append(problems, fmt.Sprintf("%s: completed by token %d, which no claim began", name, it.Completions[0]))
		case it.Completions[0] != slices.Max(it.Claims):
			problems = append(problems, fmt.Sprintf("%s: completed by token %d, superseded by the claim with token %d (claims %v)",
				name, it.Completions[0], slices.Max(it.Claims), it.Claims))
		}
		problems = append(problems, checkRemoval(name, it)...)
	}
	return problems
}

// checkRemoval checks what is known of the removal of item it, named name.
func checkRemoval(name string, it QueueItem) []string {
	var problems []string
	switch {
	case it.Gone && it.Removals == 0:
		problems = append(problems, fmt.Sprintf("%s: gone, but no removal of it was recorded", name))
	case it.Gone && it.Listed == 0 && it.LostSweeps == 0:
		problems = append(problems, fmt.Sprintf("%s: gone, but no pruner's sweep listed it and none lost its reply", name))
	case !it.Gone && it.Removals > 0:
		problems = append(problems, fmt.Sprintf("%s: removed, but the source has it again, in state %q", name, it.State))
	}
	if it.Removals > 1 {
		problems = append(problems, fmt.Sprintf("%s: removed %d times: it was there again after a removal", name, it.Removals))
	}
	if it.Listed > it.Removals {
		problems = append(problems, fmt.Sprintf("%s: listed as removed %d times, but the store recorded %d removals", name, it.Listed, it.Removals))
	}
	for _, s := range it.RemovedIn {
		if !finished(s) {
			problems = append(problems, fmt.Sprintf("%s: removed while %s (claims %v, completions %v)", name, s, it.Claims, it.Completions))
		}
	}
	if it.RemovedBy.IsZero() {
		return problems
	}
	for _, c := range it.Calls {
		if !c.Began.After(it.RemovedBy) {
			continue
		}
		late := c.Began.Sub(it.RemovedBy)
		if c.Accepted {
			problems = append(problems, fmt.Sprintf("%s: the completion by token %d began %v after the item was removed, and was accepted", name, c.Token, late))
		} else if slices.Contains(it.Completions, c.Token) {
			problems = append(problems, fmt.Sprintf("%s: the completion by token %d began %v after the item was removed, and its write committed", name, c.Token, late))
		}
	}
	return problems
}

// LateRefused counts the completion calls of it that began after it was
// removed and were refused.
func (it QueueItem) LateRefused() int {
	n := 0
	for _, c := range it.Calls {
		if !it.RemovedBy.IsZero() && c.Began.After(it.RemovedBy) && !c.Accepted {
			n++
		}
	}
	return n
}
