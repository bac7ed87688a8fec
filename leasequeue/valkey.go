package leasequeue

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/internal/valkeystore"
	"github.com/golib/lease/lease"
)

// DefaultValkeyPrefix starts every key of the Valkey source and roster
// when ValkeyOptions.Prefix is empty.
const DefaultValkeyPrefix = "leasequeue:"

// The scripts mutate, so they are NewLuaScript, not the Retryable variant:
// valkey-go must not resend a request whose outcome is unknown. They are
// loaded with SCRIPT LOAD, so that the server computes their hash, then
// run with EVALSHA. The short defer script is sent with EVAL instead, so
// that it can share a pipeline with other commands.
var (
	//go:embed lua/next.lua
	nextLua string
	//go:embed lua/defer.lua
	deferLua string
	//go:embed lua/finish.lua
	finishLua string
	//go:embed lua/enqueue.lua
	enqueueLua string

	nextScript    = valkey.NewLuaScript(nextLua, valkey.WithLoadSHA1(true))
	finishScript  = valkey.NewLuaScript(finishLua, valkey.WithLoadSHA1(true))
	enqueueScript = valkey.NewLuaScript(enqueueLua, valkey.WithLoadSHA1(true))
)

// ValkeyOptions configure the Valkey source and roster. The zero value is
// valid.
type ValkeyOptions struct {
	// Prefix starts every key. Default DefaultValkeyPrefix
	// ("leasequeue:"). It must not contain '{' or '}'. Sources and
	// rosters that share a prefix share their queues and groups; give
	// other packages (the lease Store, fences, caches) prefixes of their
	// own.
	Prefix string
}

func (o ValkeyOptions) prefix() (string, error) {
	if o.Prefix == "" {
		return DefaultValkeyPrefix, nil
	}
	if !keyspace.ValidPrefix(o.Prefix) {
		return "", fmt.Errorf("leasequeue: ValkeyOptions.Prefix %q must not contain '{' or '}'", o.Prefix)
	}
	return o.Prefix, nil
}

// ValkeySource is a Source on Valkey (standalone, sentinel or cluster)
// for one queue. Producers push item IDs to a list; handed-out items wait
// in a sorted set scored by when to look at them again; each item's state
// is a hash fenced, with package fence, by the item's resource Q/I, where
// Q and I are the queue name and the item ID with '%', '{', '}' and '/'
// written as %25, %7B, %7D and %2F (so queue "orders" item "eu/1" is
// orders/eu%2F1 and queue "orders/eu" item "1" is orders%2Feu/1: no two
// items share a name). With the prefix P:
//
//	P{Q}:ready       list of IDs not handed out yet (Enqueue, or RPUSH)
//	P{Q}:due         sorted set of handed-out, unfinished IDs, by the time
//	                 to look at them again (ms on the server's clock)
//	P{Q}:dead        sorted set of dead IDs, by the time they died
//	P{Q}:since       hash of unfinished IDs to when each became ready
//	                 (enqueued, or its retry delay over; ms on the
//	                 server's clock), for the claims' ages
//	P{Q/I}:item      hash: state, owner, error
//	P{Q/I}:attempts  the attempt count
//	Pfence:{Q/I}     the item's fence (see fence.Valkey)
//
// Next is one script on the queue's keys. Begin advances the item's fence
// first, then reads the item, then writes it under the fence; Complete
// and Fail are one fenced script on the item's keys, followed by an
// unfenced update of the due set (a lost update only makes a poller look
// at the item again, and find it finished). Queue names and IDs may hold
// any character but control characters. It is safe for concurrent use and
// never closes the client.
type ValkeySource struct {
	client valkey.Client
	fence  *fence.Valkey
	prefix string
	queue  string

	ready, due, dead, since string
}

var _ Source = (*ValkeySource)(nil)

// NewValkeySource returns the source of queue on client. It does no I/O.
func NewValkeySource(client valkey.Client, queue string, o ValkeyOptions) (*ValkeySource, error) {
	if client == nil {
		return nil, errors.New("leasequeue: NewValkeySource: nil client")
	}
	prefix, err := o.prefix()
	if err != nil {
		return nil, err
	}
	if err := fence.ValidateResource(keyspace.Tag(queue)); err != nil {
		return nil, fmt.Errorf("leasequeue: NewValkeySource: queue name %q: %w", queue, err)
	}
	f, err := fence.NewValkey(client, fence.ValkeyOptions{Prefix: prefix + "fence:"})
	if err != nil {
		return nil, err
	}
	tag := keyspace.Tag(queue)
	return &ValkeySource{client: client, fence: f, prefix: prefix, queue: queue,
		ready: keyspace.Name(prefix, tag, ":ready"),
		due:   keyspace.Name(prefix, tag, ":due"),
		dead:  keyspace.Name(prefix, tag, ":dead"),
		since: keyspace.Name(prefix, tag, ":since")}, nil
}

// ReadyKey returns the name of the queue's ready list: producers that are
// not Go programs can RPUSH item IDs to it (after HSETNX of the item's
// state to "pending", see ItemKey) instead of calling Enqueue. Such items
// have no ready time, so their first claim reports an Age of zero.
func (s *ValkeySource) ReadyKey() string { return s.ready }

// resource returns the fence resource of item id, checking id: the hash
// tag of the item's keys.
func (s *ValkeySource) resource(id string) (string, error) {
	r := keyspace.Tag(s.queue, id)
	if err := fence.ValidateResource(r); err != nil {
		return "", err
	}
	return r, nil
}

// ItemKey returns the name of a key in the hash slot of item id, with the
// given suffix: P{Q/I}:suffix (see ValkeySource). The item's own keys are
// ItemKey(id, "item") and ItemKey(id, "attempts"). Keys of your own
// written by CompleteWith must be made with it, and must not use those
// two suffixes.
func (s *ValkeySource) ItemKey(id, suffix string) string {
	return keyspace.Name(s.prefix, keyspace.Tag(s.queue, id), ":"+suffix)
}

// Enqueue adds pending items with the given IDs and pushes them to the
// ready list; it returns how many were new. An ID the queue has already is
// pushed again but keeps its state (a finished item is dropped when it is
// handed out), so calling Enqueue again after an error is safe.
func (s *ValkeySource) Enqueue(ctx context.Context, ids ...string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	cmds := make(valkey.Commands, 0, len(ids))
	for _, id := range ids {
		if _, err := s.resource(id); err != nil {
			return 0, err
		}
		cmds = append(cmds, s.client.B().Hsetnx().Key(s.ItemKey(id, "item")).Field("state").Value(string(Pending)).Build())
	}
	added := 0
	for _, r := range s.client.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return 0, valkeyError("enqueue into", s.queue, err)
		}
		added += int(n)
	}
	if err := enqueueScript.Exec(ctx, s.client, []string{s.ready, s.since}, ids).Error(); err != nil {
		return 0, valkeyError("enqueue into", s.queue, err)
	}
	return added, nil
}

// Item returns the state of item id, or an error matching ErrNotFound.
func (s *ValkeySource) Item(ctx context.Context, id string) (Item, error) {
	res, err := s.resource(id)
	if err != nil {
		return Item{}, err
	}
	rs := s.client.DoMulti(ctx,
		s.client.B().Hmget().Key(s.ItemKey(id, "item")).Field("state", "owner", "error").Build(),
		s.client.B().Get().Key(s.ItemKey(id, "attempts")).Build(),
		s.client.B().Hmget().Key(s.fence.FenceKey(res)).Field("key", "token").Build())
	f, err := rs[0].ToArray()
	if err != nil {
		return Item{}, valkeyError("read item", id, err)
	}
	it := Item{ID: id}
	state, err := f[0].ToString()
	if err != nil {
		return Item{}, notFound(id)
	}
	it.State = State(state)
	it.Owner, _ = f[1].ToString()
	it.LastError, _ = f[2].ToString()
	if n, err := rs[1].AsInt64(); err == nil {
		it.Attempts = int(n)
	} else if !valkey.IsValkeyNil(err) {
		return Item{}, valkeyError("read item", id, err)
	}
	if m, err := rs[2].ToArray(); err == nil && len(m) == 2 {
		it.FenceKey, _ = m[0].ToString()
		tok, _ := m[1].ToString()
		t, _ := strconv.ParseUint(tok, 10, 64)
		it.Token = lease.Token(t)
	}
	return it, nil
}

// Next implements Source.
func (s *ValkeySource) Next(ctx context.Context, n int, hide time.Duration) ([]string, error) {
	ids, err := nextScript.Exec(ctx, s.client, []string{s.ready, s.due},
		[]string{strconv.Itoa(n), strconv.FormatInt(millis(hide), 10)}).AsStrSlice()
	if err != nil && !valkey.IsValkeyNil(err) {
		return nil, valkeyError("next of", s.queue, err)
	}
	return ids, nil
}

// Begin implements Source.
func (s *ValkeySource) Begin(ctx context.Context, snap lease.Snapshot, id string, hide time.Duration) (Begun, error) {
	res, err := s.resource(id)
	if err != nil {
		return Begun{}, err
	}
	// Advance the fence first: from then on no older claim can write the
	// item, so what is read next stays true until this claim writes.
	if err := s.fence.Claim(ctx, snap, res); err != nil {
		return Begun{}, err
	}
	rs := s.client.DoMulti(ctx,
		s.client.B().Hget().Key(s.ItemKey(id, "item")).Field("state").Build(),
		s.deferCmd(id, hide, "BEGIN"))
	state, err := rs[0].ToString()
	switch {
	case valkey.IsValkeyNil(err):
		_ = s.forget(ctx, id, false)
		return Begun{}, notFound(id)
	case err != nil:
		return Begun{}, valkeyError("begin", id, err)
	case State(state) == Done || State(state) == Dead:
		_ = s.forget(ctx, id, false)
		return Begun{}, finished(id, State(state))
	}
	replies, err := s.fence.Do(ctx, snap, res,
		fence.HSet(s.ItemKey(id, "item"), "state", string(Running), "owner", snap.Owner),
		fence.IncrBy(s.ItemKey(id, "attempts"), 1))
	if err != nil {
		return Begun{}, err
	}
	n, err := replies[1].AsInt64()
	if err != nil {
		return Begun{}, lease.Indeterminate(fmt.Errorf("leasequeue: valkey: begin %q: unexpected reply: %w", id, err))
	}
	b := Begun{Attempt: int(n)}
	// The age is only a measurement: an error here (the defer script's
	// reply lost) leaves it zero.
	if ms, err := rs[1].AsInt64(); err == nil && ms > 0 {
		b.Age = time.Duration(ms) * time.Millisecond
	}
	return b, nil
}

// deferCmd returns the defer script's command for id, d and mode (see
// lua/defer.lua): "XX" to hide an item handed out, "RETRY" to hide it and
// record when it is ready again, "BEGIN" to hide it, adding it to the due
// set if it is not there, and read its age.
func (s *ValkeySource) deferCmd(id string, d time.Duration, mode string) valkey.Completed {
	return s.client.B().Eval().Script(deferLua).Numkeys(2).Key(s.due, s.since).Arg(id, strconv.FormatInt(millis(d), 10), mode).Build()
}

// Complete implements Source.
func (s *ValkeySource) Complete(ctx context.Context, snap lease.Snapshot, id string) error {
	return s.CompleteWith(ctx, snap, id)
}

// CompleteWith marks the running item id done and applies cmds, in one
// fenced script (see fence.Valkey.Do): the item is done exactly when the
// commands are applied, and a claim that was taken over can do neither.
// The commands' keys must be in the item's hash slot: make them with
// ItemKey. It returns the errors of Source.Complete, or an error wrapping
// fence.ErrInvalid, before any I/O, for a command that breaks
// fence.Valkey's rules. From a Handler, use CompleteClaimWith.
func (s *ValkeySource) CompleteWith(ctx context.Context, snap lease.Snapshot, id string, cmds ...fence.Command) error {
	return s.finish(ctx, snap, id, Done, append([]fence.Command{
		fence.HSet(s.ItemKey(id, "item"), "state", string(Done), "owner", snap.Owner, "error", ""),
	}, cmds...))
}

// CompleteClaimWith completes claim c as Claim.Complete does, with cmds
// applied atomically with the completion (see CompleteWith).
func (s *ValkeySource) CompleteClaimWith(ctx context.Context, c *Claim, cmds ...fence.Command) error {
	return c.complete(ctx, func(ctx context.Context, snap lease.Snapshot) error {
		return s.CompleteWith(ctx, snap, c.id, cmds...)
	})
}

// Fail implements Source.
func (s *ValkeySource) Fail(ctx context.Context, snap lease.Snapshot, id string, f Failure) error {
	state, text := Pending, ""
	if f.Dead {
		state = Dead
	}
	if f.Err != nil {
		text = f.Err.Error()
	}
	err := s.finish(ctx, snap, id, state, []fence.Command{
		fence.HSet(s.ItemKey(id, "item"), "state", string(state), "owner", snap.Owner, "error", text),
	})
	if err == nil && !f.Dead {
		_ = s.client.Do(ctx, s.deferCmd(id, f.RetryAfter, "RETRY")).Error()
	}
	return err
}

// finish writes the end of an attempt at the running item id under the
// fence (cmds, which set the state to end), then updates the queue's
// sets.
func (s *ValkeySource) finish(ctx context.Context, snap lease.Snapshot, id string, end State, cmds []fence.Command) error {
	res, err := s.resource(id)
	if err != nil {
		return err
	}
	// While the fence shows snap, only snap may change the state, so the
	// state read here holds until the fenced write below.
	state, err := s.client.Do(ctx, s.client.B().Hget().Key(s.ItemKey(id, "item")).Field("state").Build()).ToString()
	switch {
	case valkey.IsValkeyNil(err):
		return notFound(id)
	case err != nil:
		return valkeyError("finish", id, err)
	case State(state) != Running:
		// Let the fence speak first: a newer claim may have finished it.
		if err := s.fence.Claim(ctx, snap, res); err != nil {
			return err
		}
		return notRunning(id, State(state))
	}
	if _, err := s.fence.Do(ctx, snap, res, cmds...); err != nil {
		return err
	}
	if end == Done || end == Dead {
		// Only after the fenced write: an item taken over by another
		// claim must stay in the due set, or nobody would rescue it.
		_ = s.forget(ctx, id, end == Dead)
	}
	return nil
}

// forget removes id from the due set, and adds it to the dead set if dead.
func (s *ValkeySource) forget(ctx context.Context, id string, dead bool) error {
	d := "0"
	if dead {
		d = "1"
	}
	return finishScript.Exec(ctx, s.client, []string{s.due, s.dead, s.since}, []string{id, d}).Error()
}

// Defer implements Source.
func (s *ValkeySource) Defer(ctx context.Context, id string, d time.Duration) error {
	if err := s.client.Do(ctx, s.deferCmd(id, d, "XX")).Error(); err != nil {
		return valkeyError("defer", id, err)
	}
	return nil
}

// valkeyError explains an error from valkey-go: valkeystore.Classify says
// whether the command may have been applied.
func valkeyError(op, name string, err error) error {
	return valkeystore.Classify(err).Mark(fmt.Errorf("leasequeue: valkey: %s %q: %w", op, name, err))
}

// ValkeyRoster is a Roster in Valkey: the workers of group g are the set
// P{G}:members, where G is g with '%', '{', '}' and '/' written as %25,
// %7B, %7D and %2F. It is safe for concurrent use and never closes the
// client.
type ValkeyRoster struct {
	client valkey.Client
	prefix string
}

var _ Roster = (*ValkeyRoster)(nil)

// NewValkeyRoster returns a roster on client. It does no I/O.
func NewValkeyRoster(client valkey.Client, o ValkeyOptions) (*ValkeyRoster, error) {
	if client == nil {
		return nil, errors.New("leasequeue: NewValkeyRoster: nil client")
	}
	prefix, err := o.prefix()
	if err != nil {
		return nil, err
	}
	return &ValkeyRoster{client: client, prefix: prefix}, nil
}

func (r *ValkeyRoster) key(group string) string {
	return keyspace.Name(r.prefix, keyspace.Tag(group), ":members")
}

// Join implements Roster.
func (r *ValkeyRoster) Join(ctx context.Context, group, worker string) error {
	if err := r.client.Do(ctx, r.client.B().Sadd().Key(r.key(group)).Member(worker).Build()).Error(); err != nil {
		return valkeyError("join group", group, err)
	}
	return nil
}

// Members implements Roster.
func (r *ValkeyRoster) Members(ctx context.Context, group string) ([]string, error) {
	names, err := r.client.Do(ctx, r.client.B().Smembers().Key(r.key(group)).Build()).AsStrSlice()
	if err != nil {
		return nil, valkeyError("members of group", group, err)
	}
	return names, nil
}

// Leave implements Roster.
func (r *ValkeyRoster) Leave(ctx context.Context, group, worker string) error {
	if err := r.client.Do(ctx, r.client.B().Srem().Key(r.key(group)).Member(worker).Build()).Error(); err != nil {
		return valkeyError("leave group", group, err)
	}
	return nil
}
