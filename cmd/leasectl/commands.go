package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// record is a lease record as leasectl prints it in JSON.
type record struct {
	Key string `json:"key"`
	// State is "held", "free", or "offered": a hand-off offers the key to
	// Candidates, and nobody else can take it until the offer's window
	// has passed.
	State string      `json:"state"`
	Owner string      `json:"owner,omitempty"`
	Token lease.Token `json:"token"`
	// RemainingMS is the holder's remaining time, or what is left of an
	// offer's window.
	RemainingMS int64 `json:"remaining_ms"`
	// The history (kubectl's acquireTime, renewTime, leaseTransitions),
	// on the backend's clock; the times are left out when unknown.
	AcquiredAt  *time.Time `json:"acquired_at,omitempty"`
	RenewedAt   *time.Time `json:"renewed_at,omitempty"`
	Transitions uint64     `json:"transitions"`
	// Ended says how the last acquisition ended, when the key is not
	// held and the backend knows: released, expired, force_released or
	// handed_off.
	Ended string `json:"ended,omitempty"`
	// Candidates and OfferedBy describe a standing offer (State
	// "offered"): the owners it is offered to, and the owner who handed
	// the key off. Token is then the token the first candidate to acquire
	// gets.
	Candidates []string `json:"candidates,omitempty"`
	OfferedBy  string   `json:"offered_by,omitempty"`
	// Preferred is the owner waiting for the key as its preferred
	// candidate, if any.
	Preferred string `json:"preferred,omitempty"`
	// Semaphore and Slot say which permit the key is, if it has the form
	// of a permit key (lease.PermitKey).
	Semaphore string `json:"semaphore,omitempty"`
	Slot      *int   `json:"slot,omitempty"`
	// Set is the number of the set that list inferred the key is part of
	// (see inferred); 0 for none.
	Set int `json:"set,omitempty"`
}

func toRecord(r lease.Record) record {
	out := record{Key: r.Key, State: state(r), Token: r.Token, Transitions: r.Transitions, Preferred: r.Preferred}
	if sem, slot, ok := lease.ParsePermitKey(r.Key); ok {
		out.Semaphore, out.Slot = sem, &slot
	}
	switch {
	case r.Held:
		out.Owner, out.RemainingMS = r.Owner, r.Remaining.Milliseconds()
	case offered(r):
		out.Candidates, out.OfferedBy, out.RemainingMS = r.Candidates, r.Owner, r.Remaining.Milliseconds()
	}
	if !r.Held && r.Ending != lease.EndUnknown {
		out.Ended = strings.ReplaceAll(ending(r.Ending), "-", "_")
	}
	if !r.AcquiredAt.IsZero() {
		at := r.AcquiredAt.UTC()
		out.AcquiredAt = &at
	}
	if !r.RenewedAt.IsZero() {
		at := r.RenewedAt.UTC()
		out.RenewedAt = &at
	}
	return out
}

// offered reports whether r is a standing offer of a hand-off.
func offered(r lease.Record) bool { return !r.Held && len(r.Candidates) > 0 }

// state is a record's STATE: held, free or offered.
func state(r lease.Record) string {
	switch {
	case r.Held:
		return "held"
	case offered(r):
		return "offered"
	}
	return "free"
}

// ending names how an acquisition ended, as one word for tables and
// watch lines: released, expired, force-released or handed-off.
func ending(e lease.Ending) string {
	return strings.ReplaceAll(e.String(), " ", "-")
}

// candidates lists the owners an offer is offered to, for tables.
func candidates(r lease.Record) string {
	if !offered(r) {
		return "-"
	}
	return strings.Join(r.Candidates, ",")
}

// recordHeader and recordRow are the table of list and inspect, before
// the columns that only some listings have (see table).
const recordHeader = "KEY\tSTATE\tOWNER\tTOKEN\tREMAINING\tACQUIRED\tRENEWED\tCHANGES"

func recordRow(r lease.Record, now time.Time) []string {
	return []string{r.Key, state(r), orDash(r.Owner), r.Token.String(), remaining(r),
		ago(r.AcquiredAt, now), ago(r.RenewedAt, now), strconv.FormatUint(r.Transitions, 10)}
}

// ago formats how long before now t was, as kubectl's AGE does, or "-"
// when t is unknown.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now" // the backend's clock is ahead of this machine's
	case d < time.Minute:
		return d.Round(time.Millisecond).String() + " ago"
	}
	return d.Round(time.Second).String() + " ago"
}

// remaining formats a remaining time for tables: the holder's, or what
// is left of an offer's window.
func remaining(r lease.Record) string {
	if !r.Held && !offered(r) {
		return "-"
	}
	return r.Remaining.Round(time.Millisecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func (c *cli) table(header string, rows [][]string) error {
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	return w.Flush()
}

// pageSize is the page size leasectl asks List for.
const pageSize = 500

func (c *cli) list(ctx context.Context, t *target, prefix, cursor string, heldOnly bool, limit int) error {
	var (
		recs []lease.Record
		seen = map[string]bool{}
	)
	for {
		// Lister.List's limit bounds a page: asking for what is missing
		// makes --limit a hard limit, and the cursor continues after it.
		n := pageSize
		if limit > 0 {
			n = min(n, limit-len(recs))
		}
		octx, cancel := c.op(ctx)
		page, next, err := t.lister.List(octx, prefix, cursor, n)
		cancel()
		if err != nil {
			return err
		}
		for _, r := range page {
			if !seen[r.Key] && (r.Held || !heldOnly) {
				seen[r.Key] = true
				recs = append(recs, r)
			}
		}
		cursor = next
		if cursor == "" || limit > 0 && len(recs) >= limit {
			break
		}
	}
	tab := newTable(recs)
	if c.cfg.json {
		out := struct {
			Leases []record `json:"leases"`
			// Sets are the sets inferred from the records listed (see
			// inferred): a set whose keys span pages is seen in part.
			Sets       []inferred `json:"sets"`
			NextCursor string     `json:"next_cursor"`
		}{Leases: tab.records(), Sets: append([]inferred{}, tab.sets...), NextCursor: cursor}
		return c.printJSON(out)
	}
	if len(recs) == 0 && cursor == "" {
		fmt.Fprintf(c.errOut, "no lease records found in %s\n", t.scope)
	}
	if err := c.printTable(tab); err != nil {
		return err
	}
	if cursor != "" {
		fmt.Fprintf(c.out, "more: continue with --cursor %s\n", strconv.Quote(cursor))
	}
	return nil
}

func (c *cli) inspectOnce(ctx context.Context, t *target, key string) (lease.Record, error) {
	octx, cancel := c.op(ctx)
	defer cancel()
	return t.backend.Inspect(octx, key)
}

func (c *cli) inspect(ctx context.Context, t *target, key string) error {
	if err := lease.ValidateKey(key); err != nil {
		return err
	}
	r, err := c.inspectOnce(ctx, t, key)
	if err != nil {
		return err
	}
	if c.cfg.json {
		if err := c.printJSON(toRecord(r)); err != nil {
			return err
		}
	} else if err := c.printTable(newTable([]lease.Record{r})); err != nil {
		return err
	}
	if !r.Held && r.Token == 0 {
		return &negative{fmt.Sprintf("no record of key %q in %s: never acquired, removed a retention after its last lease ended, or lost by the backend", key, t.scope)}
	}
	return nil
}

// watchEvent is one line of watch's output.
type watchEvent struct {
	Time time.Time `json:"time"`
	// Event is held, offered or free first; then acquired, released,
	// expired, force_released, handed_off, preferred, lost, token_down;
	// or error.
	Event string `json:"event"`
	record
	Previous *record `json:"previous,omitempty"`
	// HighestToken is, for token_down, the highest token seen before.
	HighestToken lease.Token `json:"highest_token,omitempty"`
	Error        string      `json:"error,omitempty"`
}

func (c *cli) emit(e watchEvent) {
	if c.cfg.json {
		c.printJSON(e)
		return
	}
	ts := e.Time.UTC().Format("2006-01-02T15:04:05.000Z")
	name := strings.ReplaceAll(e.Event, "_", "-")
	var line string
	switch e.Event {
	case "error":
		line = e.Error
	case "held", "acquired":
		line = fmt.Sprintf("owner=%q token=%d remaining=%v", e.Owner, e.Token, ms(e.RemainingMS))
		if e.Preferred != "" {
			line += fmt.Sprintf(" preferred=%q", e.Preferred)
		}
	case "offered", "handed_off":
		// The offered token is the one the first candidate to acquire gets.
		p := e.Previous
		switch {
		case e.State == "offered":
			line = fmt.Sprintf("token=%d offered to %s for %v, by owner=%q", e.Token, quoted(e.Candidates), ms(e.RemainingMS), e.OfferedBy)
			if p != nil && p.State == "held" {
				line += fmt.Sprintf(" (was token=%d)", p.Token)
			}
		default:
			// Seen only once the offer had lapsed, between two reads.
			line = fmt.Sprintf("token=%d: its offer lapsed with no candidate taking it; anyone may acquire the key", e.Token)
			if p != nil && p.State == "held" {
				line += fmt.Sprintf(" (was owner=%q token=%d)", p.Owner, p.Token)
			}
		}
	case "preferred":
		if e.Preferred == "" {
			line = "no preferred candidate now"
		} else {
			line = fmt.Sprintf("preferred=%q waits for the key", e.Preferred)
		}
		if e.State == "held" {
			line += fmt.Sprintf(" (held by owner=%q token=%d)", e.Owner, e.Token)
		}
	case "lost":
		line = "record lost (was"
		if e.Previous.State == "held" {
			line += fmt.Sprintf(" owner=%q", e.Previous.Owner)
		}
		line += fmt.Sprintf(" token=%d): the backend has no record of the key", e.Previous.Token)
		if e.Previous.State == "held" {
			line += " while it was held: it lost data (a restart without persistence, a failover, an eviction); the holder learns it at its next renewal"
		} else {
			line += ": removed after its retention, or lost by the backend"
		}
	case "token_down":
		line = fmt.Sprintf("token went DOWN from %d to %d", e.HighestToken, e.Token)
		if e.State == "held" {
			line += fmt.Sprintf(" (owner=%q)", e.Owner)
		}
		line += ": the backend lost data and issued a lower token (a restored backup, a clock that stepped back); fences refuse its holder's writes until a token of at least " + e.HighestToken.String()
	default: // free, released, expired, force_released
		line = fmt.Sprintf("token=%d", e.Token)
		switch p := e.Previous; {
		case p != nil && p.State == "offered" && e.Event == "expired":
			line += fmt.Sprintf(" (the offer to %s lapsed: anyone may acquire the key)", quoted(p.Candidates))
		case p != nil && p.Owner != "":
			line += fmt.Sprintf(" (was owner=%q token=%d)", p.Owner, p.Token)
		}
	}
	fmt.Fprintf(c.out, "%s  %-14s  %s\n", ts, name, line)
}

// ms converts milliseconds of JSON to a duration for text.
func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// quoted quotes each of s and joins them with ", ".
func quoted(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// watch prints the state of key, then one line for each change of holder
// or state, until ctx ends (Ctrl-C), which is a normal end. It follows the
// key with lease.Client.Observe: a change is seen at once where the
// backend announces changes, and at most interval late where it does not.
// The first read must succeed: its error is watch's (a bad start); later
// errors are printed once each, and watching goes on.
func (c *cli) watch(ctx context.Context, t *target, key string, interval time.Duration) error {
	if err := lease.ValidateKey(key); err != nil {
		return err
	}
	client, err := lease.NewClient(t.backend, lease.ClientOptions{Owner: owner(c.getenv), SweepEvery: -1})
	if err != nil {
		return err
	}
	var (
		last    *lease.Record
		high    lease.Token // the highest token seen
		lastErr error       // the error of the last read, if it failed
	)
	for o, err := range client.Observe(ctx, key, lease.ObserveOptions{Poll: interval, OperationTimeout: c.cfg.timeout}) {
		switch {
		case err != nil && last == nil:
			return watchError(key, err)
		case err != nil:
			if lastErr == nil {
				c.emit(watchEvent{Time: time.Now(), Event: "error", Error: err.Error()})
			}
			lastErr = err
			continue
		}
		lastErr = nil
		e := watchEvent{Time: o.At, Event: event(o, high), record: toRecord(o.Record)}
		if last != nil {
			p := toRecord(*last)
			e.Previous = &p
		}
		if e.Event == "token_down" {
			e.HighestToken = high
		}
		c.emit(e)
		last, high = &o.Record, max(high, o.Token)
	}
	if ctx.Err() != nil || lastErr == nil {
		return nil
	}
	// Observe ended by itself after an error no retry can cure (a
	// misconfiguration, such as a privilege revoked while watching).
	return watchError(key, lastErr)
}

// watchError is watch's error for err, which Observe yielded: it names
// the key once.
func watchError(key string, err error) error {
	if cause := errors.Unwrap(err); cause != nil {
		err = cause // Observe's error names the key too
	}
	return fmt.Errorf("watch %q: %w", key, err)
}

// event names the change o reports, high being the highest token seen
// before: lease.Change as watch prints it, except that a token below one
// seen before is token_down, whatever Observe made of it (after a lost
// record, a record with a lower token reads to it as a new one).
func event(o lease.Observation, high lease.Token) string {
	if o.Change != lease.ChangeInitial && o.Token != 0 && o.Token < high {
		return "token_down"
	}
	switch o.Change {
	case lease.ChangeInitial:
		return state(o.Record)
	case lease.ChangeAcquired:
		return "acquired"
	case lease.ChangeReleased:
		return "released"
	case lease.ChangeExpired:
		return "expired"
	case lease.ChangeForceReleased:
		return "force_released"
	case lease.ChangeHandedOff:
		return "handed_off"
	case lease.ChangePreferred:
		return "preferred"
	case lease.ChangeRecordLost:
		return "lost"
	}
	return strings.ReplaceAll(o.Change.String(), " ", "_")
}

func (c *cli) release(ctx context.Context, t *target, key string, token lease.Token, yes bool) error {
	if err := lease.ValidateKey(key); err != nil {
		return err
	}
	if !yes {
		return c.releaseDryRun(ctx, t, key, token)
	}
	octx, cancel := c.op(ctx)
	prev, err := t.forcer.ForceRelease(octx, key, token)
	cancel()
	var lost *lease.LostError
	// A standing offer of a hand-off ends as a lease does.
	released := err == nil && (prev.Held || offered(prev))
	if err != nil && !errors.As(err, &lost) {
		return err
	}
	if c.cfg.json {
		out := struct {
			Key      string `json:"key"`
			Released bool   `json:"released"`
			Previous record `json:"previous"`
			Reason   string `json:"reason,omitempty"`
		}{Key: key, Released: released, Previous: toRecord(prev)}
		if !released {
			out.Reason = notReleased(key, token, prev, lost)
		}
		if err := c.printJSON(out); err != nil {
			return err
		}
	} else if released && offered(prev) {
		fmt.Fprintf(c.out, "ended the offer of %s to %s (token %d, %v of its window left): the key is free now.\n", describe(key), quoted(prev.Candidates), prev.Token, remaining(prev))
		fmt.Fprintf(c.out, "its token stays %d, so the next holder's token is higher and fences refuse writes below it.\n", prev.Token)
	} else if released {
		fmt.Fprintf(c.out, "expired the lease on %s held by %q (token %d, %v left): the key is free now.\n", describe(key), prev.Owner, prev.Token, remaining(prev))
		fmt.Fprintf(c.out, "its token stays %d, so the next holder's token is higher and fences refuse writes below it;\n", prev.Token)
		fmt.Fprintf(c.out, "the old holder is not stopped: it learns of the loss at its next renewal.\n")
	}
	if !released {
		return &negative{notReleased(key, token, prev, lost)}
	}
	return nil
}

// releaseDryRun says what release --force would do, changing nothing: it
// succeeds if release would release, and is negative otherwise, as
// release would be.
func (c *cli) releaseDryRun(ctx context.Context, t *target, key string, token lease.Token) error {
	r, err := c.inspectOnce(ctx, t, key)
	if err != nil {
		return err
	}
	would := (r.Held || offered(r)) && (token == 0 || r.Token == token)
	reason := ""
	switch {
	case would:
	case r.Held:
		reason = fmt.Sprintf("nothing would change: %q is held by %q with token %d, not %d", key, r.Owner, r.Token, token)
	case offered(r):
		reason = fmt.Sprintf("nothing would change: %q is offered to %s with token %d, not %d", key, quoted(r.Candidates), r.Token, token)
	case token != 0 && r.Token == token:
		reason = fmt.Sprintf("nothing would change: the acquisition with token %d of %q has already ended", token, key)
	default:
		reason = fmt.Sprintf("nothing would change: %q is not held (last token %d)", key, r.Token)
	}
	if c.cfg.json {
		if err := c.printJSON(struct {
			Key          string `json:"key"`
			DryRun       bool   `json:"dry_run"`
			WouldRelease bool   `json:"would_release"`
			Current      record `json:"current"`
			Reason       string `json:"reason,omitempty"`
		}{key, true, would, toRecord(r), reason}); err != nil {
			return err
		}
	} else if would && offered(r) {
		fmt.Fprintf(c.out, "dry run: would end the offer of %s to %s (token %d, %v of its window left); nothing changed.\n", describe(key), quoted(r.Candidates), r.Token, remaining(r))
		fmt.Fprintf(c.out, "to do it: leasectl release --force --yes --token %d %s\n", r.Token, strconv.Quote(key))
	} else if would {
		fmt.Fprintf(c.out, "dry run: would expire the lease on %s held by %q (token %d, %v left); nothing changed.\n", describe(key), r.Owner, r.Token, remaining(r))
		fmt.Fprintf(c.out, "to do it: leasectl release --force --yes --token %d %s\n", r.Token, strconv.Quote(key))
	} else {
		fmt.Fprintf(c.out, "dry run: %s.\n", reason)
	}
	if !would {
		return &negative{reason}
	}
	return nil
}

func notReleased(key string, token lease.Token, prev lease.Record, lost *lease.LostError) string {
	switch {
	case lost != nil && prev.Held:
		return fmt.Sprintf("nothing changed: %q is held by %q with token %d, not %d", key, prev.Owner, prev.Token, token)
	case lost != nil && offered(prev):
		return fmt.Sprintf("nothing changed: %q is offered to %s with token %d, not %d", key, quoted(prev.Candidates), prev.Token, token)
	case lost != nil:
		return fmt.Sprintf("nothing changed: the acquisition with token %d of %q has already ended (last token %d)", token, key, prev.Token)
	}
	return fmt.Sprintf("nothing changed: %q is not held (last token %d)", key, prev.Token)
}

// fenceShow prints the fence of resource next to the record of the lease
// it is fenced by; leaseKey, if not "", names that lease for when the
// fence is missing.
func (c *cli) fenceShow(ctx context.Context, t *target, resource, leaseKey string) error {
	if leaseKey != "" {
		if err := lease.ValidateKey(leaseKey); err != nil {
			return err
		}
	}
	octx, cancel := c.op(ctx)
	m, err := t.mark(octx, resource)
	cancel()
	if err != nil {
		return err
	}
	key := m.Key
	if m.IsZero() {
		key = leaseKey
	}
	var cur *lease.Record
	if key != "" {
		r, err := c.inspectOnce(ctx, t, key)
		if err != nil {
			return err
		}
		if r.Held || r.Token != 0 {
			cur = &r
		}
	}
	note := fenceNote(t, resource, key, m, cur)
	if c.cfg.json {
		out := struct {
			Resource   string      `json:"resource"`
			Fenced     bool        `json:"fenced"`
			LeaseKey   string      `json:"lease_key,omitempty"`
			Token      lease.Token `json:"token"`
			Lease      *record     `json:"lease,omitempty"`
			Note       string      `json:"note"`
			FenceStore string      `json:"fence_store"`
			LeaseStore string      `json:"lease_store"`
		}{Resource: resource, Fenced: !m.IsZero(), LeaseKey: key, Token: m.Token, Note: note, FenceStore: t.fenceWhere, LeaseStore: t.where}
		if cur != nil {
			r := toRecord(*cur)
			out.Lease = &r
		}
		if err := c.printJSON(out); err != nil {
			return err
		}
	} else if !m.IsZero() {
		state, owner, token := "no record", "-", "-"
		if cur != nil {
			state, owner, token = toRecord(*cur).State, orDash(cur.Owner), cur.Token.String()
		}
		if err := c.table("RESOURCE\tFENCED BY\tTOKEN\tLEASE STATE\tLEASE OWNER\tLEASE TOKEN",
			[][]string{{resource, m.Key, m.Token.String(), state, owner, token}}); err != nil {
			return err
		}
		fmt.Fprintln(c.out, note)
	}
	if m.IsZero() {
		return &negative{note}
	}
	return nil
}

// fenceNote explains the fence m of resource next to the record cur (nil
// if none) of the lease key: the fence's own, or the one --lease named.
func fenceNote(t *target, resource, key string, m fence.Mark, cur *lease.Record) string {
	switch {
	case m.IsZero() && key == "":
		return fmt.Sprintf("resource %q has no fence in %s: no fenced write has touched it, its fence retired after its retention, "+
			"or the store lost it (an eviction, a restart without persistence); --lease KEY compares it with its lease", resource, t.fenceWhere)
	case m.IsZero() && cur != nil:
		return fmt.Sprintf("resource %q has no fence in %s, though lease %q has issued tokens (the last %d): if a fenced write under it "+
			"touched the resource, its fence record is gone: retired after its retention (its lease key's floor still refuses older tokens), "+
			"or lost by the store (evicted under an allkeys-* policy, a restart without persistence, a restore); leasectl check shows the store's risks",
			resource, t.fenceWhere, key, cur.Token)
	case m.IsZero():
		return fmt.Sprintf("resource %q has no fence in %s, and lease %q has no record in %s either: no fenced write under it touched the resource, "+
			"or both records are gone", resource, t.fenceWhere, key, t.where)
	case cur == nil:
		return fmt.Sprintf("the lease store (%s) has no record of %q: the lease lives in another store (point --valkey or --postgres at it, "+
			"or --fence-valkey or --fence-postgres at the fences' store), or its record was removed after its retention or lost; "+
			"the fence refuses writes with tokens below %d", t.where, key, m.Token)
	case cur.Token > m.Token:
		return fmt.Sprintf("the lease's token %d is above the fence's %d: its holder's next fenced write advances the fence, and writes with tokens below it are refused then", cur.Token, m.Token)
	case cur.Token == m.Token:
		return "the fence holds the lease's current token: writes with any older token are refused"
	}
	return fmt.Sprintf("the fence's token is above the lease's (the lease store lost data?): writes under the lease are refused until a holder gets a token of at least %d", m.Token)
}

func (c *cli) check(ctx context.Context, t *target) error {
	octx, cancel := context.WithTimeout(ctx, 3*c.cfg.timeout)
	problems, advice := t.diagnose(octx)
	cancel()
	if c.cfg.json {
		out := struct {
			Backend  string   `json:"backend"`
			Target   string   `json:"target"`
			OK       bool     `json:"ok"`
			Problems []string `json:"problems"`
			Advice   []string `json:"advice"`
		}{Backend: t.kind, Target: t.where, OK: len(problems) == 0, Problems: []string{}, Advice: append([]string{}, advice...)}
		for _, p := range problems {
			out.Problems = append(out.Problems, p.Error())
		}
		if err := c.printJSON(out); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(c.out, t.where)
		for _, p := range problems {
			fmt.Fprintf(c.out, "problem: %v\n", p)
		}
		for _, a := range advice {
			fmt.Fprintf(c.out, "advice:  %s\n", a)
		}
		if len(problems) == 0 {
			fmt.Fprintln(c.out, "ok: no problem found")
		}
	}
	if len(problems) > 0 {
		return &negative{fmt.Sprintf("check found %d problem(s)", len(problems))}
	}
	return nil
}

// gc removes the records past their retention: with dryRun, it lists them.
// It sweeps under the lease lease.SweepKey, as the services' clients do in
// the background, so it never runs alongside one of them.
func (c *cli) gc(ctx context.Context, t *target, dryRun bool) error {
	all := t.sweepers
	if s, ok := t.backend.(lease.Sweeper); ok {
		all = append([]named{{"lease", s}}, all...)
	}
	if len(all) == 0 {
		return fmt.Errorf("%s keeps no records that end", t.where)
	}
	if !dryRun {
		extra := make([]lease.Sweeper, 0, len(t.sweepers))
		for _, n := range t.sweepers {
			extra = append(extra, n.s)
		}
		client, err := lease.NewClient(t.backend, lease.ClientOptions{Owner: owner(c.getenv), SweepEvery: -1, Sweepers: extra})
		if err != nil {
			return err
		}
		n, err := client.Sweep(ctx)
		if errors.Is(err, lease.ErrNotAcquired) {
			return &negative{fmt.Sprintf("another process is sweeping (it holds %q): try again later", lease.SweepKey)}
		}
		if c.cfg.json {
			if jerr := c.printJSON(struct {
				Removed int  `json:"removed"`
				DryRun  bool `json:"dry_run"`
			}{n, false}); jerr != nil && err == nil {
				err = jerr
			}
		} else {
			fmt.Fprintf(c.out, "removed %d records past their retention\n", n)
		}
		return err
	}
	type item struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	}
	items := []item{}
	for _, n := range all {
		cursor := ""
		for {
			octx, cancel := c.op(ctx)
			page, err := n.s.Sweep(octx, lease.SweepOptions{Cursor: cursor, Limit: 1000, DryRun: true})
			cancel()
			if err != nil {
				return err
			}
			for _, r := range page.Removed {
				items = append(items, item{n.what, r})
				if !c.cfg.json {
					fmt.Fprintf(c.out, "%s\t%s\n", n.what, r)
				}
			}
			if page.Next == "" {
				break
			}
			cursor = page.Next
		}
	}
	if c.cfg.json {
		return c.printJSON(struct {
			WouldRemove []item `json:"would_remove"`
			DryRun      bool   `json:"dry_run"`
		}{items, true})
	}
	fmt.Fprintf(c.out, "would remove %d records past their retention (dry run: nothing removed)\n", len(items))
	return nil
}

// owner names leasectl to other holders of lease.SweepKey.
func owner(getenv func(string) string) string {
	host, err := os.Hostname()
	if err != nil || lease.ValidateOwner("leasectl/"+host) != nil {
		host = "unknown"
	}
	if u := getenv("USER"); u != "" && lease.ValidateOwner("leasectl/"+u+"@"+host) == nil {
		return "leasectl/" + u + "@" + host
	}
	return "leasectl/" + host
}
