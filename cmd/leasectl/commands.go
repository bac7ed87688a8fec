package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/golib/lease/lease"
)

// record is a lease record as leasectl prints it in JSON.
type record struct {
	Key         string      `json:"key"`
	State       string      `json:"state"` // "held" or "free"
	Owner       string      `json:"owner,omitempty"`
	Token       lease.Token `json:"token"`
	RemainingMS int64       `json:"remaining_ms"`
	// The history (kubectl's acquireTime, renewTime, leaseTransitions),
	// on the backend's clock; the times are left out when unknown.
	AcquiredAt  *time.Time `json:"acquired_at,omitempty"`
	RenewedAt   *time.Time `json:"renewed_at,omitempty"`
	Transitions uint64     `json:"transitions"`
}

func toRecord(r lease.Record) record {
	out := record{Key: r.Key, State: "free", Token: r.Token, Transitions: r.Transitions}
	if r.Held {
		out.State, out.Owner, out.RemainingMS = "held", r.Owner, r.Remaining.Milliseconds()
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

// recordHeader and recordRow are the table of list and inspect.
const recordHeader = "KEY\tSTATE\tOWNER\tTOKEN\tREMAINING\tACQUIRED\tRENEWED\tCHANGES"

func recordRow(r lease.Record, now time.Time) []string {
	return []string{r.Key, toRecord(r).State, orDash(r.Owner), r.Token.String(), remaining(r),
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

// remaining formats a remaining time for tables.
func remaining(r lease.Record) string {
	if !r.Held {
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
		octx, cancel := c.op(ctx)
		page, next, err := t.lister.List(octx, prefix, cursor, pageSize)
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
	slices.SortFunc(recs, func(a, b lease.Record) int { return strings.Compare(a.Key, b.Key) })
	if c.cfg.json {
		out := struct {
			Leases     []record `json:"leases"`
			NextCursor string   `json:"next_cursor"`
		}{Leases: []record{}, NextCursor: cursor}
		for _, r := range recs {
			out.Leases = append(out.Leases, toRecord(r))
		}
		return c.printJSON(out)
	}
	rows := make([][]string, 0, len(recs))
	now := time.Now()
	for _, r := range recs {
		rows = append(rows, recordRow(r, now))
	}
	if len(recs) == 0 && cursor == "" {
		fmt.Fprintf(c.errOut, "no lease records found in %s\n", t.scope)
	}
	if err := c.table(recordHeader, rows); err != nil {
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
	} else if err := c.table(recordHeader, [][]string{recordRow(r, time.Now())}); err != nil {
		return err
	}
	if !r.Held && r.Token == 0 {
		return &negative{fmt.Sprintf("no record of key %q in %s: never acquired, removed a retention after its last lease ended, or lost by the backend", key, t.scope)}
	}
	return nil
}

// watchEvent is one line of watch's output.
type watchEvent struct {
	Time  time.Time `json:"time"`
	Event string    `json:"event"` // held, free, acquired, released, expired, error
	record
	Previous *record `json:"previous,omitempty"`
	Error    string  `json:"error,omitempty"`
}

func (c *cli) emit(e watchEvent) {
	if c.cfg.json {
		c.printJSON(e)
		return
	}
	ts := e.Time.UTC().Format("2006-01-02T15:04:05.000Z")
	switch e.Event {
	case "error":
		fmt.Fprintf(c.out, "%s  error     %s\n", ts, e.Error)
	case "held", "acquired":
		fmt.Fprintf(c.out, "%s  %-8s  owner=%q token=%d remaining=%v\n", ts, e.Event, e.Owner, e.Token, time.Duration(e.RemainingMS)*time.Millisecond)
	default:
		line := fmt.Sprintf("%s  %-8s  token=%d", ts, e.Event, e.Token)
		if e.Previous != nil && e.Previous.Owner != "" {
			line += fmt.Sprintf(" (was owner=%q token=%d)", e.Previous.Owner, e.Previous.Token)
		}
		fmt.Fprintln(c.out, line)
	}
}

// watch reads key every interval and prints each change of holder until
// ctx ends (Ctrl-C), which is a normal end.
//
// A key seen held and then free was "expired" if its remaining time had
// run out by then, and "released" (by its holder or by force) otherwise.
func (c *cli) watch(ctx context.Context, t *target, key string, interval time.Duration) error {
	if err := lease.ValidateKey(key); err != nil {
		return err
	}
	var (
		last   *lease.Record
		seenAt time.Time
		failed bool
	)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		r, err := c.inspectOnce(ctx, t, key)
		now := time.Now()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if !failed {
				c.emit(watchEvent{Time: now, Event: "error", Error: err.Error()})
			}
			failed = true
		default:
			failed = false
			if ev, changed := change(last, r, now.Sub(seenAt)); changed {
				e := watchEvent{Time: now, Event: ev, record: toRecord(r)}
				if last != nil {
					p := toRecord(*last)
					e.Previous = &p
				}
				c.emit(e)
			}
			last, seenAt = &r, now
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// change names the change from prev (nil at first) to r, seen elapsed
// after prev.
func change(prev *lease.Record, r lease.Record, elapsed time.Duration) (string, bool) {
	switch {
	case prev == nil && r.Held:
		return "held", true
	case prev == nil:
		return "free", true
	case r.Held && (!prev.Held || prev.Token != r.Token || prev.Owner != r.Owner):
		return "acquired", true
	case !r.Held && prev.Held && elapsed >= prev.Remaining:
		return "expired", true
	case !r.Held && prev.Held:
		return "released", true
	}
	return "", false
}

func (c *cli) release(ctx context.Context, t *target, key string, token lease.Token, yes bool) error {
	if err := lease.ValidateKey(key); err != nil {
		return err
	}
	if !yes {
		r, err := c.inspectOnce(ctx, t, key)
		if err != nil {
			return err
		}
		if r.Held {
			fmt.Fprintf(c.errOut, "would expire the lease on %q held by %q (token %d, %v left)\n", key, r.Owner, r.Token, remaining(r))
		} else {
			fmt.Fprintf(c.errOut, "%q is not held now (last token %d)\n", key, r.Token)
		}
		return usagef("release --force changes the lease for everyone: add --yes to confirm (and --token %d to release only this holder)", r.Token)
	}
	octx, cancel := c.op(ctx)
	prev, err := t.forcer.ForceRelease(octx, key, token)
	cancel()
	var lost *lease.LostError
	released := err == nil && prev.Held
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
	} else if released {
		fmt.Fprintf(c.out, "expired the lease on %q held by %q (token %d, %v left): the key is free now.\n", key, prev.Owner, prev.Token, remaining(prev))
		fmt.Fprintf(c.out, "its token stays %d, so the next holder's token is higher and fences refuse writes below it;\n", prev.Token)
		fmt.Fprintf(c.out, "the old holder is not stopped: it learns of the loss at its next renewal.\n")
	}
	if !released {
		return &negative{notReleased(key, token, prev, lost)}
	}
	return nil
}

func notReleased(key string, token lease.Token, prev lease.Record, lost *lease.LostError) string {
	switch {
	case lost != nil && prev.Held:
		return fmt.Sprintf("nothing changed: %q is held by %q with token %d, not %d", key, prev.Owner, prev.Token, token)
	case lost != nil:
		return fmt.Sprintf("nothing changed: the acquisition with token %d of %q has already ended (last token %d)", token, key, prev.Token)
	}
	return fmt.Sprintf("nothing changed: %q is not held (last token %d)", key, prev.Token)
}

func (c *cli) fenceShow(ctx context.Context, t *target, resource string) error {
	octx, cancel := c.op(ctx)
	m, err := t.mark(octx, resource)
	cancel()
	if err != nil {
		return err
	}
	var cur *lease.Record
	if !m.IsZero() {
		r, err := c.inspectOnce(ctx, t, m.Key)
		if err != nil {
			return err
		}
		cur = &r
	}
	if c.cfg.json {
		out := struct {
			Resource string      `json:"resource"`
			Fenced   bool        `json:"fenced"`
			LeaseKey string      `json:"lease_key,omitempty"`
			Token    lease.Token `json:"token"`
			Lease    *record     `json:"lease,omitempty"`
		}{Resource: resource, Fenced: !m.IsZero(), LeaseKey: m.Key, Token: m.Token}
		if cur != nil {
			r := toRecord(*cur)
			out.Lease = &r
		}
		if err := c.printJSON(out); err != nil {
			return err
		}
	} else if cur != nil {
		if err := c.table("RESOURCE\tFENCED BY\tTOKEN\tLEASE STATE\tLEASE OWNER\tLEASE TOKEN",
			[][]string{{resource, m.Key, m.Token.String(), toRecord(*cur).State, orDash(cur.Owner), cur.Token.String()}}); err != nil {
			return err
		}
		switch {
		case cur.Token > m.Token:
			fmt.Fprintf(c.out, "the lease's token %d is above the fence's %d: its holder's next fenced write advances the fence, and writes with tokens below it are refused then\n", cur.Token, m.Token)
		case cur.Token == m.Token:
			fmt.Fprintf(c.out, "the fence holds the lease's current token: writes with any older token are refused\n")
		default:
			fmt.Fprintf(c.out, "the fence's token is above the lease's (the backend lost lease data?): writes under the lease are refused until a holder gets a token of at least %d\n", m.Token)
		}
	}
	if m.IsZero() {
		return &negative{fmt.Sprintf("resource %q has no fence: no fenced write has touched it", resource)}
	}
	return nil
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
