// Package fence makes storage refuse writes from a lease holder that has
// been superseded. A lease cannot stop a paused process from carrying on
// with a write after its lease expired; a fence can: every fenced write
// carries the lease's key and fencing token (a [lease.Snapshot]), and the
// storage applies it only if the resource's fence admits them, atomically
// with the write. A fence keeps working long after the lease is gone.
//
// Fenced writes take a lease.Snapshot, never a *lease.Handle, so they cannot
// renew or release a lease. The package imports no lease backend: a lease
// kept in Valkey can fence data in PostgreSQL and the other way round.
//
// This package holds the rule, its errors and an in-memory fence, and
// imports no database driver. The fenced writes of each store are in a
// package of their own, so a program links only the drivers it uses:
//
//   - fence/fencepostgres: [fencepostgres.Tx], a transaction fenced by a
//     fences table in PostgreSQL (pgx);
//   - fence/fencecolumn: [fencecolumn.Update] and [fencecolumn.Upsert], a
//     fence column on a table of your own (pgx and squirrel);
//   - fence/fencevalkey: [fencevalkey.Fence.Do], a group of Valkey commands
//     applied under a fence key (valkey-go).
//
// # The rule
//
// Each resource has a fence, a Mark: the lease key it is fenced by and the
// highest token of that lease it has accepted. A write with token t under
// lease key k on resource r is accepted if r's fence has accepted nothing,
// or if it is fenced by k and t ≥ last(r): a higher token is a newer
// acquisition, an equal one is the same acquisition writing again (a
// backend never issues one token twice for a key). Otherwise nothing is
// written and the caller gets a *StaleError (ErrStale) naming both tokens,
// or, for a token of another lease key, a *ForeignLeaseError
// (ErrForeignLease), whatever the numbers: tokens of different keys are
// unrelated. last(r) never goes down. [Mark.Admit] is the rule in code.
// The PostgreSQL and Valkey fences also refuse a token below the floor of
// its lease key (see Retirement), before applying the rule.
//
// A new holder's acquisition alone does not fence anything: until it
// writes, the fence still admits the previous holder's token.
// fencepostgres.Claim (and Table.Claim there, fencevalkey's Fence.Claim)
// advances the fences right after acquiring.
//
// # PostgreSQL: the fences table
//
// fencepostgres.Tx runs a function in a transaction whose first statement
// checks and advances the fences of the named resources, in a table of
// their own (public.lease_fences by default; fencepostgres.NewTable names
// another, fencepostgres.Migrate creates it, and Migrations and
// GooseMigrations there hand its migrations to golang-migrate or goose). The fence rows stay locked until the transaction ends, and they are
// locked in sorted order, so transactions never deadlock on them. A stale
// fence rolls back everything. The cost is one round trip.
//
// # PostgreSQL: a fence column on your own table
//
// fencecolumn.Update and fencecolumn.Upsert take the parts of a statement
// (UpdateRows: a table, the columns to set and the rows as a squirrel
// predicate, kept in parentheses of its own; UpsertRow: a table, the
// values and the conflict columns) and a Column (a token and a lease-key
// column on the same table), and put the check and the write into one statement: each row is
// its own resource, and there is no extra round trip unless nothing was
// written and they have to tell why.
//
// # Valkey
//
// fencevalkey's Fence.Do applies a group of commands (Set, HSet, Del,
// IncrBy, Expire, XAdd) with one Lua script that checks and advances the resource's fence
// key and applies the group atomically, in one round trip. All keys must be
// in the fence key's hash slot: put "{resource}" in their names.
//
// # Other stores
//
// Any store with one atomic conditional write can be fenced: keep the
// resource's Mark next to its data, read both, call Mark.Admit, and write the
// data and the new Mark back in one conditional write that fails if either
// changed since the read. [Memory] is the reference implementation, for one
// process.
//
// # Retirement
//
// A fence cannot expire, since a paused holder may wake at any time, but
// the PostgreSQL and Valkey fences retire: a fence of resource r, fenced
// by lease key K at token t, that has not advanced for a retention
// (fencepostgres.TableOptions.Retention, fencevalkey.Options.Retention;
// lease.DefaultRetention
// by default, lease.KeepForever never) is deleted in one atomic step with
// raising floor(K) to max(floor(K), t). Every fenced write under K with a
// token below floor(K) is then refused with a *StaleError whose Floor is
// true, whether or not its resource has a fence. A stale writer to r is
// still refused (its token is below t ≤ floor(K)), and the current holder
// of K never is (its token is at or above every token K ever had). A
// retired resource may be fenced again, by K or by another lease key.
//
// Floors are never deleted. In PostgreSQL there is one per lease key, in
// the table fencepostgres.Table.FloorsName beside the fences; in Valkey one
// per lease key and hash slot (fencevalkey.Fence.FloorKey), covering the
// resources of that slot. Retirement runs when a [lease.Sweeper] runs:
// fencepostgres.Table.Sweeper and fencevalkey.Fence itself, which a lease.Client sweeps in the background when
// given in lease.ClientOptions.Sweepers. Fence columns on your own tables
// need no retirement: they go away with your rows. [Memory] does not
// retire. docs/fencing.md ("Retirement") has the proof, including why the
// PostgreSQL retirement locks the fences table and how fenced transactions
// at REPEATABLE READ and SERIALIZABLE notice a retirement newer than their
// snapshot.
//
// # Errors
//
// [ErrStale] and [ErrForeignLease] are final: retrying gets the same answer.
// So is [ErrImplausibleToken]: the PostgreSQL and Valkey fences refuse a
// token more than [MaxTokenLead] ahead of their own clock, which no backend
// can have issued yet, so that a forged or corrupted snapshot cannot lock a
// fence against every later holder.
// [ErrConflict] (a PostgreSQL serialization failure or deadlock; see
// [IsRetryable]) asks for the whole transaction to be run again. ErrInvalid is returned before
// any I/O. An error matching [lease.ErrIndeterminate] means the write may or
// may not have been applied. The package's own errors start with "fence: "
// and name the resource where there is one (an indeterminate one reads
// "outcome unknown: fence: …"); an error returned by the function given to
// fencepostgres.Tx comes back as it was (or, for a conflict, wrapped in a
// *ConflictError).
//
// [fencepostgres.Tx]: https://pkg.go.dev/github.com/golib/lease/fence/fencepostgres#Tx
// [fencecolumn.Update]: https://pkg.go.dev/github.com/golib/lease/fence/fencecolumn#Update
// [fencecolumn.Upsert]: https://pkg.go.dev/github.com/golib/lease/fence/fencecolumn#Upsert
// [fencevalkey.Fence.Do]: https://pkg.go.dev/github.com/golib/lease/fence/fencevalkey#Fence.Do
package fence
