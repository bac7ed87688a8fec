package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golib/lease/lease"
)

// What leasectl shows of semaphores and sets. Neither has a record of its
// own: each permit of a semaphore is the lease on its permit key
// (lease.PermitKey), and each key of a set a lease held by the set's
// acquisition. leasectl reads permits from their keys' form
// (lease.ParsePermitKey) and infers sets from the records: held keys with
// one owner and one token.

// table is a listing of records as leasectl prints it: the columns of
// recordHeader, preceded by SLOT for inspect --permits, and followed by
// ENDED when a free record says how its last acquisition ended,
// CANDIDATES when a record is a hand-off's standing offer, PREFERRED when
// a record has a preferred candidate, SEMAPHORE and SLOT when a record is
// a permit, and SET when records form a set. A listing of a backend that
// knows none of these keeps the plain columns.
type table struct {
	recs    []lease.Record
	ended   bool        // some record says how it ended
	offers  bool        // some record is a standing offer
	prefer  bool        // some record has a preferred candidate
	permits bool        // some record is a permit
	sets    []inferred  // the sets the records form, numbered from 1
	setOf   map[int]int // index in recs → number of its set
	bySlot  bool        // inspect --permits: SLOT first, no SEMAPHORE
}

// inferred is a set of keys that leasectl infers from the records: held by
// one owner with one token. Records never say which acquisition holds
// them (they never return the secret), so two leases that one owner took
// one by one and happened to get the same token would read as a set too;
// tokens are drawn from the backend's clock in microseconds, which makes
// that unlikely, not impossible.
type inferred struct {
	Set   int         `json:"set"`
	Owner string      `json:"owner"`
	Token lease.Token `json:"token"`
	Keys  []string    `json:"keys"`
}

// newTable returns the table of recs, sorted by key, with the sets among
// them inferred.
func newTable(recs []lease.Record) *table {
	slices.SortFunc(recs, func(a, b lease.Record) int { return strings.Compare(a.Key, b.Key) })
	t := &table{recs: recs, setOf: map[int]int{}}
	type holder struct {
		owner string
		token lease.Token
	}
	members := map[holder][]int{}
	var order []holder
	for i, r := range recs {
		t.note(r)
		if _, _, ok := lease.ParsePermitKey(r.Key); ok {
			t.permits = true
		}
		if !r.Held {
			continue
		}
		h := holder{r.Owner, r.Token}
		if members[h] == nil {
			order = append(order, h)
		}
		members[h] = append(members[h], i)
	}
	for _, h := range order {
		idx := members[h]
		if len(idx) < 2 {
			continue
		}
		s := inferred{Set: len(t.sets) + 1, Owner: h.owner, Token: h.token}
		for _, i := range idx {
			s.Keys = append(s.Keys, recs[i].Key)
			t.setOf[i] = s.Set
		}
		t.sets = append(t.sets, s)
	}
	return t
}

// note sets the optional columns that r needs.
func (t *table) note(r lease.Record) {
	t.ended = t.ended || !r.Held && r.Ending != lease.EndUnknown
	t.offers = t.offers || offered(r)
	t.prefer = t.prefer || r.Preferred != ""
}

// header returns the table's header line.
func (t *table) header() string {
	h := recordHeader
	if t.ended {
		h += "\tENDED"
	}
	if t.offers {
		h += "\tCANDIDATES"
	}
	if t.prefer {
		h += "\tPREFERRED"
	}
	switch {
	case t.bySlot:
		h = "SLOT\t" + h
	case t.permits:
		h += "\tSEMAPHORE\tSLOT"
	}
	if len(t.sets) > 0 {
		h += "\tSET"
	}
	return h
}

// rows returns the table's rows.
func (t *table) rows(now time.Time) [][]string {
	rows := make([][]string, 0, len(t.recs))
	for i, r := range t.recs {
		row := recordRow(r, now)
		if t.ended {
			e := "-"
			if !r.Held && r.Ending != lease.EndUnknown {
				e = ending(r.Ending)
			}
			row = append(row, e)
		}
		if t.offers {
			row = append(row, candidates(r))
		}
		if t.prefer {
			row = append(row, orDash(r.Preferred))
		}
		sem, slot, ok := lease.ParsePermitKey(r.Key)
		switch {
		case t.bySlot:
			row = append([]string{strconv.Itoa(slot)}, row...)
		case t.permits && ok:
			row = append(row, sem, strconv.Itoa(slot))
		case t.permits:
			row = append(row, "-", "-")
		}
		if len(t.sets) > 0 {
			set := "-"
			if n := t.setOf[i]; n > 0 {
				set = "set" + strconv.Itoa(n)
			}
			row = append(row, set)
		}
		rows = append(rows, row)
	}
	return rows
}

// records returns the table's records as leasectl prints them in JSON.
func (t *table) records() []record {
	out := make([]record, 0, len(t.recs))
	for i, r := range t.recs {
		rec := toRecord(r)
		rec.Set = t.setOf[i]
		out = append(out, rec)
	}
	return out
}

// printTable prints the table, and a note saying how its sets were found.
func (c *cli) printTable(t *table) error {
	if err := c.table(t.header(), t.rows(time.Now())); err != nil {
		return err
	}
	if len(t.sets) > 0 {
		fmt.Fprintln(c.out, "SET: keys held by one owner with one token, as AcquireSet holds them (inferred from the records, which do not name the acquisition)")
	}
	return nil
}

// describe names key for an operator: a permit as its slot of its
// semaphore, any other key quoted.
func describe(key string) string {
	if sem, slot, ok := lease.ParsePermitKey(key); ok {
		return fmt.Sprintf("permit %d of semaphore %q (key %q)", slot, sem, key)
	}
	return strconv.Quote(key)
}

// inspectPermits prints the record of each of the first permits permits
// of the semaphore sem, and how many are held. It is negative when none
// of them has a record.
func (c *cli) inspectPermits(ctx context.Context, t *target, sem string, permits int) error {
	if err := lease.ValidateKey(sem); err != nil {
		return err
	}
	if err := lease.ValidateKey(lease.PermitKey(sem, permits-1)); err != nil {
		return usagef("inspect: the permit keys of %q are too long: %v", sem, err)
	}
	recs := make([]lease.Record, 0, permits)
	held, recorded := 0, 0
	for slot := range permits {
		key := lease.PermitKey(sem, slot)
		r, err := c.inspectOnce(ctx, t, key)
		if err != nil {
			return err
		}
		r.Key = key
		recs = append(recs, r)
		if r.Held {
			held++
		}
		if r.Held || r.Token != 0 {
			recorded++
		}
	}
	summary := fmt.Sprintf("%d of %d permits of semaphore %q held", held, permits, sem)
	if c.cfg.json {
		out := struct {
			Semaphore string   `json:"semaphore"`
			Permits   int      `json:"permits"`
			Held      int      `json:"held"`
			Slots     []record `json:"slots"`
		}{Semaphore: sem, Permits: permits, Held: held, Slots: []record{}}
		for _, r := range recs {
			out.Slots = append(out.Slots, toRecord(r))
		}
		if err := c.printJSON(out); err != nil {
			return err
		}
	} else {
		// Slots in order, not keys in byte order ("10" before "2").
		tab := &table{recs: recs, setOf: map[int]int{}, bySlot: true}
		for _, r := range recs {
			tab.note(r)
		}
		if err := c.printTable(tab); err != nil {
			return err
		}
		fmt.Fprintln(c.out, summary)
	}
	if recorded == 0 {
		return &negative{fmt.Sprintf("no permit of semaphore %q below %d has a record in %s: never acquired with these names, removed a retention after its last permit ended, or lost by the backend", sem, permits, t.scope)}
	}
	return nil
}
