package chaos_test

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
)

// minFailovers is how many failovers TestPostgresFailover makes however
// short the row, so that even `make test` fails over to a replica built
// from a promoted one.
const minFailovers = 2

// TestPostgresFailover fails the lease database over to an asynchronous
// streaming replica, again and again. The fences table and the values it
// guards live in the same database, as in a user's PostgreSQL setup, so
// they fail over with the leases. Each round the nemesis waits for the
// replica to catch up (recorded as chaos.KindReplicated); then, every
// other round, it cuts the replica's link to the primary, which the
// clients go on using for 0.5–1.5 TTL, while in the other rounds the link
// stays up for that long, so that the replica misses only what is in
// flight. Then it kills the primary with SIGKILL, promotes the replica
// (pg_promote), reads what the promoted server has, and points the
// clients' proxy at it. A replica of the new primary, a fresh
// pg_basebackup, serves the next round.
//
// Grants, renewals, releases and fenced writes acknowledged after the
// replica last caught up can be lost (the fault is marked as losing data,
// the fences' included). What must hold: no token is issued twice and
// tokens keep rising (the promoted server's clock, the same host's, is
// past every token of the lost primary), and every stale write is fenced
// out on the new primary: the model takes each resource back to a state it
// had since the replica caught up, and holds the promoted server to it.
// The row logs, per failover and in all, how many acknowledged operations
// the promoted server did not have (see lostWith); it asserts nothing on
// them.
func TestPostgresFailover(t *testing.T) {
	postgresFailoverRow(t, rowOptions{})
}

// postgresFailoverRow is TestPostgresFailover with the row's options o:
// with o.primitives the clients take permits and sets too (see
// TestPermitsAndSets), whose operations lostWith sees split per key
// (chaos.Expand), the pauses between failovers are 0.2–0.5 TTL instead
// of 1–2, and the row logs what was lost per primitive.
func postgresFailoverRow(t *testing.T, o rowOptions) {
	primary := testserver.StartPostgres(t)
	f := &failoverRig{t: t, dbURL: migrate(t, primary.NewDatabase(t)), primary: primary,
		repl: newProxy(t, primary.Addr()), front: newProxy(t, primary.Addr())}
	f.newReplica()
	r := startRun(t, chaos.Target{Kind: "postgres", URL: onServer(t, f.dbURL, f.front.Addr())}, o)
	var (
		after, before [2]lost                 // lost since and before the replica caught up, by whether the link was cut
		byPrimitive   = map[string]*[2]lost{} // lost since the replica caught up, by primitive and whether the link was cut
		rounds        [2]int
		lostGrants    = map[grantRef]int64{} // when the failover that lost each grant ended
		start         int64                  // when the clients were pointed at the primary
		firstEnd      int64                  // when the first failover ended
		kills         []int64                // when each primary was killed
		fastest       = time.Duration(math.MaxInt64)
		slowest       time.Duration
	)
	for n := 0; n < minFailovers || r.running() || o.handOffs && r.runningForHandOffs(); n++ {
		if f.replica == nil {
			f.newReplica()
		}
		if o.primitives || o.handOffs {
			r.pause(ttl/5, ttl/2) // as primitivesRow, to keep the short form within its time
		} else {
			r.pause(ttl, 2*ttl)
		}
		cut := n%2 == 0
		lag := (ttl/2 + time.Duration(r.rng.Int64N(int64(ttl)))).Round(time.Millisecond)
		fo := f.failOver(r, cut, lag)
		ops := chaos.Expand(r.rec.Ops())
		inSince := func(op chaos.Op) bool { return op.Return > fo.caughtUp && op.Call < fo.killed }
		since := lostWith(ops, fo.db, inSince)
		earlier := lostWith(ops, fo.db, func(op chaos.Op) bool { return op.Return > start && op.Return <= fo.caughtUp })
		for g := range since.grantRefs {
			lostGrants[g] = fo.end
		}
		i := 0
		if cut {
			i = 1
		}
		if o.primitives {
			for _, p := range primitives {
				if byPrimitive[p] == nil {
					byPrimitive[p] = &[2]lost{}
				}
				byPrimitive[p][i].add(lostWith(ops, fo.db, func(op chaos.Op) bool { return inSince(op) && primitiveOf(op) == p }))
			}
		}
		after[i].add(since)
		before[i].add(earlier)
		rounds[i]++
		fastest, slowest = min(fastest, fo.promotion), max(slowest, fo.promotion)
		kills = append(kills, fo.killed)
		if firstEnd == 0 {
			firstEnd = fo.end
		}
		t.Logf("failover %d (%s; killed to promoted in %v): the promoted server lacked %v acknowledged since the replica caught up, and %v before",
			n+1, fo.desc, fo.promotion.Round(time.Millisecond), since, earlier)
		start = fo.end
	}
	res := r.finish(o)
	r.withoutDataLoss()
	if o.primitives {
		late, stale := checkLateWrites(t, r.rec.Ops())
		t.Logf("%d late writes of the child, %d of them refused as stale", late, stale)
		requireWorkload(t, res)
		r.semaphoreBroken()
	}

	ops := chaos.Expand(r.rec.Ops())
	var accepted, refused int
	for _, op := range ops {
		key := op.Key
		if op.Fence == chaos.FenceSemaphore {
			key = op.Lease // the permit's key; Key is the semaphore's
		}
		if at, ok := lostGrants[grantRef{key, op.Token}]; ok && op.Kind == chaos.KindWrite && op.Call > at {
			switch op.Outcome {
			case chaos.OK:
				accepted++
			case chaos.Stale:
				refused++
			}
		}
	}
	stale := count(ops, func(op chaos.Op) bool {
		return op.Kind == chaos.KindWrite && op.Outcome == chaos.Stale && op.Call > firstEnd
	})
	for i, link := range []string{"up", "cut"} {
		t.Logf("%d failovers with the replica's link %s for 0.5–1.5 TTL: the promoted server lacked %v acknowledged since the replica caught up, and %v before",
			rounds[i], link, after[i], before[i])
		for _, p := range primitives {
			if l := byPrimitive[p]; l != nil {
				t.Logf("  of them %s: %v", p, l[i])
			}
		}
	}
	t.Logf("tokens: the first grant of a key after a failover was at least %v above the key's earlier tokens; kill to promotion took %v to %v",
		minTokenLead(ops, kills).Round(time.Millisecond), fastest.Round(time.Millisecond), slowest.Round(time.Millisecond))
	t.Logf("on the promoted servers %d writes were refused as stale; writes under grants the promoted server lacked: %d accepted (no newer holder had written), %d refused",
		stale, accepted, refused)
}

// primitives names the primitives of a row's workload, as primitiveOf
// does.
var primitives = []string{"leases", "permits", "sets"}

// primitiveOf names the primitive op is about: "permits" for a permit's
// operations and writes fenced by one (per slot or per semaphore), "sets"
// for a set's (expanded or not) and writes fenced by a set's key,
// "leases" otherwise.
func primitiveOf(op chaos.Op) string {
	switch {
	case op.Fence == chaos.FenceSlot || op.Fence == chaos.FenceSemaphore || op.Fence == "" && op.Sem != "":
		return "permits"
	case op.Fence == chaos.FenceSet || op.Fence == "" && op.Keys != nil:
		return "sets"
	}
	return "leases"
}

// failoverRig is the primary and the replica of TestPostgresFailover and
// the proxies in front of the primary.
type failoverRig struct {
	t                *testing.T
	dbURL            string // the row's database on the first primary
	primary, replica *testserver.PostgresServer
	repl             *chaos.Proxy // the replica's link to the primary
	front            *chaos.Proxy // the clients'
}

// newReplica starts a replica of the primary that streams through repl.
func (f *failoverRig) newReplica() {
	f.t.Helper()
	if err := f.repl.SetUpstream(f.primary.Addr()); err != nil {
		f.t.Fatal(err)
	}
	f.replica = f.primary.StartReplica(f.t, testserver.ReplicaOptions{Via: f.repl.Addr()})
}

// failedOver says how one failover went. Times are the recorder's.
type failedOver struct {
	desc      string
	caughtUp  int64 // when CatchUp began: the replica had what was acknowledged before
	killed    int64 // when the primary was killed
	end       int64 // when the clients were pointed at the promoted server
	promotion time.Duration
	db        dbState // what the promoted server had
}

// failOver records the replica catching up, then fails over to it as a
// fault of r: the replica's link cut (or not) for lag, the primary
// killed, the replica promoted and read, the clients' proxy pointed at
// it. The replica becomes the primary; there is none after it.
func (f *failoverRig) failOver(r *run, cut bool, lag time.Duration) failedOver {
	t := f.t
	t.Helper()
	fo := failedOver{desc: fmt.Sprintf("the replica's link up, %v later kill -9 the primary, promote the replica", lag)}
	if cut {
		fo.desc = fmt.Sprintf("cut the replica's link, %v later kill -9 the primary, promote the replica", lag)
	}
	fo.caughtUp = r.rec.Now()
	f.replica.CatchUp()
	r.rec.Add(chaos.Op{Kind: chaos.KindReplicated, Outcome: chaos.OK, Call: fo.caughtUp, Return: r.rec.Now()})
	r.h.FaultOp(chaos.Op{Fault: fo.desc, LostData: true, LostFences: true}, func() {
		if cut {
			if err := f.repl.SetUpstream("127.0.0.1:1"); err != nil { // nothing listens there
				t.Fatal(err)
			}
		}
		time.Sleep(lag)
		fo.killed = r.rec.Now()
		f.primary.Kill()
		f.replica.Promote()
		fo.promotion = time.Duration(r.rec.Now()-fo.killed) * time.Microsecond
		fo.db = readDB(t, f.replica.DatabaseURL(f.dbURL))
		if err := f.front.SetUpstream(f.replica.Addr()); err != nil {
			t.Fatal(err)
		}
	})
	fo.end = r.rec.Now()
	f.primary, f.replica = f.replica, nil
	return fo
}

// grantRef names one grant: a key and its token.
type grantRef struct {
	key   string
	token uint64
}

// lost counts the acknowledged operations of one primary that the replica
// promoted in its place did not have.
type lost struct {
	grants, renewals, releases, writes tally
	// grantRefs are the grants lost.
	grantRefs map[grantRef]bool
}

// tally is how many operations of a kind were lost, of how many.
type tally struct{ lost, of int }

func (t *tally) count(lost bool) {
	t.of++
	if lost {
		t.lost++
	}
}

func (t *tally) add(o tally) { t.lost, t.of = t.lost+o.lost, t.of+o.of }

func (l *lost) add(o lost) {
	l.grants.add(o.grants)
	l.renewals.add(o.renewals)
	l.releases.add(o.releases)
	l.writes.add(o.writes)
}

func (l lost) String() string {
	return fmt.Sprintf("%d of %d acknowledged grants, %d of %d renewals, %d of %d releases, %d of %d fenced writes",
		l.grants.lost, l.grants.of, l.renewals.lost, l.renewals.of, l.releases.lost, l.releases.of, l.writes.lost, l.writes.of)
}

// dbState is what a database holds of the row's leases and resources.
type dbState struct {
	leases map[string]leaseRow // by key
	marks  map[string]uint64   // fence marks by resource
	values map[string]string   // by resource
}

// leaseRow is one row of the lease table.
type leaseRow struct {
	acq     string // chaos.AcqID of the nonce
	token   uint64
	expires int64 // µs since the Unix epoch; negative once released
}

// released reports whether the row's acquisition was released: a release
// sets the expiry a thousand years back.
func (l leaseRow) released() bool { return l.expires < 0 }

// readDB reads the leases, fences and values of the database at dbURL.
func readDB(t *testing.T, dbURL string) dbState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	s := dbState{leases: map[string]leaseRow{}, marks: map[string]uint64{}, values: map[string]string{}}
	var (
		key, nonce, resource, value string
		token, expires              int64
	)
	each := func(sql string, dest []any, row func()) {
		t.Helper()
		rows, err := conn.Query(ctx, sql)
		if err == nil {
			_, err = pgx.ForEachRow(rows, dest, func() error { row(); return nil })
		}
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// A watched key's placeholder row (token 0, nothing held) expires at
	// -infinity: read as -1, like a released row.
	each(`SELECT key, nonce, token, CASE WHEN isfinite(expires_at) THEN (extract(epoch FROM expires_at) * 1000000)::bigint ELSE -1 END FROM public.leases`,
		[]any{&key, &nonce, &token, &expires}, func() {
			s.leases[key] = leaseRow{acq: chaos.AcqID(nonce), token: uint64(token), expires: expires}
		})
	each(`SELECT resource, token FROM public.lease_fences`, []any{&resource, &token},
		func() { s.marks[resource] = uint64(token) })
	each(`SELECT resource, value FROM chaos_values`, []any{&resource, &value},
		func() { s.values[resource] = value })
	return s
}

// lostWith counts the operations of ops (expanded: a set's operations
// split per key, see chaos.Expand) that returned OK (acknowledged by
// one primary) and that in selects, and those of them whose effect the
// replica promoted in that primary's place did not have (db):
//   - a grant of token T for key k: db's token for k is below T;
//   - a renewal: its grant is lost, or db shows its acquisition, not
//     released, with an expiry before the renewal's call + TTL (a renewal
//     applied at or after its call sets at least that);
//   - a release: db shows its acquisition not released;
//   - a fenced write of token T to resource r: db's mark for r is below T,
//     or it is T and the write set a value after the write whose value db
//     has (the writes under one token come from one holder in turn) or
//     after the claim when db has no value of that token.
//
// Operations whose effect was superseded by a later one that db has (a
// newer grant, a release) are not lost.
func lostWith(ops []chaos.Op, db dbState, in func(chaos.Op) bool) lost {
	l := lost{grantRefs: map[grantRef]bool{}}
	wroteValue := map[string]chaos.Op{} // by value: the write that wrote it
	for _, op := range ops {
		if op.Kind == chaos.KindWrite && op.Value != "" {
			wroteValue[op.Value] = op
		}
	}
	grantLost := func(key string, token uint64) bool { return db.leases[key].token < token }
	seen := map[grantRef]bool{}
	for _, op := range ops {
		if op.Outcome != chaos.OK || !in(op) {
			continue
		}
		row := db.leases[op.Key]
		same := row.acq == op.Acq && (op.Token == 0 || row.token == op.Token)
		switch op.Kind {
		case chaos.KindAcquire:
			g := grantRef{op.Key, op.Token}
			if seen[g] {
				continue // an idempotent re-grant
			}
			seen[g] = true
			l.grants.count(grantLost(op.Key, op.Token))
			if grantLost(op.Key, op.Token) {
				l.grantRefs[g] = true
			}
		case chaos.KindRenew:
			l.renewals.count(op.Token != 0 && grantLost(op.Key, op.Token) ||
				same && !row.released() && row.expires < op.Call+op.TTL)
		case chaos.KindRelease:
			l.releases.count(same && !row.released())
		case chaos.KindWrite:
			mark := db.marks[op.Resource]
			kept, ok := wroteValue[db.values[op.Resource]]
			l.writes.count(mark < op.Token ||
				mark == op.Token && !op.Claim && (!ok || kept.Token != op.Token || op.Call > kept.Return))
		}
	}
	return l
}

// minTokenLead returns, over the failovers whose primaries were killed at
// the times given and the keys granted on both sides, the least
// difference between the first token the promoted server granted and the
// highest one the killed primary (or an earlier one) had granted, as a
// duration: tokens are microseconds of the server's clock.
func minTokenLead(ops []chaos.Op, kills []int64) time.Duration {
	lead := int64(math.MaxInt64)
	for _, killed := range kills {
		before, after := map[string]uint64{}, map[string]uint64{}
		for _, op := range ops {
			if op.Kind != chaos.KindAcquire || op.Outcome != chaos.OK {
				continue
			}
			switch {
			case op.Call < killed:
				before[op.Key] = max(before[op.Key], op.Token)
			case after[op.Key] == 0 || op.Token < after[op.Key]:
				after[op.Key] = op.Token
			}
		}
		for k, first := range after {
			if b, ok := before[k]; ok {
				lead = min(lead, int64(first)-int64(b))
			}
		}
	}
	if lead == math.MaxInt64 {
		return 0 // no key granted both before and after a failover
	}
	return time.Duration(lead) * time.Microsecond
}

// onServer returns dbURL with its host:port replaced by addr.
func onServer(t *testing.T, dbURL, addr string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}
