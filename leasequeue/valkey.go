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
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/lease"
)

// DefaultValkeyPrefix starts every key of the Valkey source and roster
// when ValkeyOptions.Prefix is empty.
const DefaultValkeyPrefix = "leasequeue:"

// The scripts mutate, so they are NewLuaScript, not the Retryable variant:
// valkey-go must not resend a request whose outcome is unknown. They are
// loaded with SCRIPT LOAD, so that the server computes their hash, then
// run with EVALSHA. inspect only reads.
// The scripts that compare or advance tokens are tokenScripts.
var (
	//go:embed lua/enqueue.lua
	enqueueLua string
	//go:embed lua/claim.lua
	claimLua string
	//go:embed lua/claimop.lua
	claimOpLua string
	//go:embed lua/inspect.lua
	inspectLua string
	//go:embed lua/end.lua
	endLua string
	//go:embed lua/prune.lua
	pruneLua string
	//go:embed lua/finished.lua
	finishedLua string

	enqueueScript  = valkey.NewLuaScript(enqueueLua, valkey.WithLoadSHA1(true))
	claimOpScript  = valkey.NewLuaScript(claimOpLua, valkey.WithLoadSHA1(true))
	inspectScript  = valkey.NewLuaScriptReadOnly(inspectLua, valkey.WithLoadSHA1(true))
	finishedScript = valkey.NewLuaScript(finishedLua, valkey.WithLoadSHA1(true))
)

// tokenScripts are the scripts that compare or advance tokens: claim,
// end and prune, each behind the token helpers of
// valkeyplumbing.TokenScript, which compare and add tokens as decimal
// strings and refuse tokens more than a lead ahead of the server's clock.
type tokenScripts struct {
	claim, end, prune *valkey.Lua
}

// newTokenScripts returns the token scripts that bound tokens by lead, in
// microseconds.
func newTokenScripts(lead int64) *tokenScripts {
	return &tokenScripts{
		claim: valkey.NewLuaScript(valkeyplumbing.TokenScript(claimLua, lead), valkey.WithLoadSHA1(true)),
		end:   valkey.NewLuaScript(valkeyplumbing.TokenScript(endLua, lead), valkey.WithLoadSHA1(true)),
		prune: valkey.NewLuaScript(valkeyplumbing.TokenScript(pruneLua, lead), valkey.WithLoadSHA1(true)),
	}
}

// boundedScripts are the token scripts of every ValkeySource: they bound
// tokens by fence.MaxTokenLead, as the fences do.
var boundedScripts = newTokenScripts(maxLead)

// ValkeyOptions configure the Valkey source and roster. The zero value is
// valid.
type ValkeyOptions struct {
	// Prefix starts every key. Default DefaultValkeyPrefix
	// ("leasequeue:"). It must not contain '{' or '}'. Sources and
	// rosters that share a prefix share their queues and groups; give
	// other packages (the lease Store, fences, caches) prefixes of their
	// own.
	Prefix string

	// DoneRetention is how long a ValkeySource keeps a done item after
	// it was completed, on the server's clock, before Sweep removes it.
	// Default DefaultDoneRetention (24 hours); lease.KeepForever (any
	// negative value) keeps done items for good.
	DoneRetention time.Duration
	// DeadRetention is how long a ValkeySource keeps a dead item after it
	// went to the dead-letter state, as DoneRetention. Default
	// DefaultDeadRetention (7 days).
	DeadRetention time.Duration
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

// ValkeySource is a Source on Valkey (standalone, sentinel
// or cluster) for one queue. Producers push item IDs to a list; handed-out
// items wait in a sorted set scored by when to look at them again. Every
// key of a queue is in the queue's hash slot, so that one script can claim
// items it picks: with the prefix P, Q the queue name and I an item ID,
// each with '%', '{', '}' and '/' written as %25, %7B, %7D and %2F (so no
// two queues or items share a name):
//
//	P{Q}:ready          list of IDs not handed out yet (Enqueue, or RPUSH)
//	P{Q}:due            sorted set of handed-out, unfinished IDs, by the
//	                    time to look at them again (ms on the server's
//	                    clock): a claimed item by its claim's expiry
//	P{Q}:done           sorted set of done IDs, by the time they were
//	                    completed (ms on the server's clock)
//	P{Q}:dead           sorted set of dead IDs, by the time they died
//	P{Q}:since          hash of unfinished IDs to when each became ready
//	                    (enqueued, or its retry delay over; ms on the
//	                    server's clock), for the claims' ages
//	P{Q}:item/I/item    hash: state, owner, error, attempts, the
//	                    current claim's secret and expiry (µs on the
//	                    server's clock), and once finished, when (ms)
//	P{Q}:item/I/fence   the item's fence, in the format of fencevalkey.Fence:
//	                    its lease key and last token
//
// A claim of ready items or of one item is one script, so are the
// renewal, release and inspection of a claim, and so are its completion
// (with CompleteClaimWith too) and failure, fenced by the claim's token. A
// claim's token is max(previous token + 1, the server's time in µs), like
// the Valkey lease backend's. Queue names and IDs may hold any character but control
// characters. It is safe for concurrent use and never closes the client.
//
// The scripts compare and advance tokens as decimal strings, never as Lua
// numbers (exact only up to 2^53), so they are exact for every uint64.
// Completions and failures refuse a token more than fence.MaxTokenLead
// ahead of the server's clock, as fencevalkey.Fence does, with a
// *fence.ImplausibleTokenError, and write nothing; the claims pass over an
// item whose fence already holds such a token (see Source).
type ValkeySource struct {
	client  valkey.Client
	fence   *fencevalkey.Fence
	scripts *tokenScripts
	prefix  string
	queue   string

	ready, due, done, dead, since, items string

	retention retention
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
	f, err := fencevalkey.New(client, fencevalkey.Options{Prefix: prefix + "fence:"})
	if err != nil {
		return nil, err
	}
	tag := keyspace.Tag(queue)
	return &ValkeySource{client: client, fence: f, scripts: boundedScripts, prefix: prefix, queue: queue,
		ready:     keyspace.Name(prefix, tag, ":ready"),
		due:       keyspace.Name(prefix, tag, ":due"),
		done:      keyspace.Name(prefix, tag, ":done"),
		dead:      keyspace.Name(prefix, tag, ":dead"),
		since:     keyspace.Name(prefix, tag, ":since"),
		items:     keyspace.Name(prefix, tag, ":item/"),
		retention: newRetention(o.DoneRetention, o.DeadRetention)}, nil
}

// ReadyKey returns the name of the queue's ready list: producers that are
// not Go programs can RPUSH item IDs to it (after HSETNX of the item's
// state to "pending", see ItemKey) instead of calling Enqueue. Such items
// have no ready time, so their first claim reports an Age of zero.
func (s *ValkeySource) ReadyKey() string { return s.ready }

// resource returns the name of item id in errors, checking id.
func (s *ValkeySource) resource(id string) (string, error) {
	r := keyspace.Tag(s.queue, id)
	if err := fence.ValidateResource(r); err != nil {
		return "", err
	}
	return r, nil
}

// ItemKey returns the name of a key of item id, in the queue's hash slot,
// with the given suffix: P{Q}:item/I/suffix (see ValkeySource). The
// item's own keys are ItemKey(id, "item") and ItemKey(id, "fence"). Keys
// of your own written by CompleteClaimWith must be made with it (or be in the
// queue's slot otherwise), and must not use those two suffixes.
func (s *ValkeySource) ItemKey(id, suffix string) string {
	return s.items + keyspace.Escape(id) + "/" + suffix
}

// Enqueue adds pending items with the given IDs and pushes them to the
// ready list; it returns how many were new. An ID the queue has already is
// pushed again but keeps its state (a finished item is dropped when it is
// handed out), so calling Enqueue again after an error is safe. A finished
// item is kept until Sweep removes it after its retention; from then on
// its ID is new again (see Sweep).
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
	if _, err := s.resource(id); err != nil {
		return Item{}, err
	}
	rs := s.client.DoMulti(ctx,
		s.client.B().Hmget().Key(s.ItemKey(id, "item")).Field("state", "owner", "error", "attempts").Build(),
		s.client.B().Hmget().Key(s.ItemKey(id, "fence")).Field("key", "token").Build())
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
	if n, err := f[3].AsInt64(); err == nil {
		it.Attempts = int(n)
	}
	if m, err := rs[1].ToArray(); err == nil && len(m) == 2 {
		it.FenceKey, _ = m[0].ToString()
		tok, _ := m[1].ToString()
		t, _ := strconv.ParseUint(tok, 10, 64)
		it.Token = lease.Token(t)
	} else if err != nil {
		return Item{}, valkeyError("read item", id, err)
	}
	return it, nil
}

// fenceRefusal returns the error of a script that refused snap by the
// item's fence: {'stale', token} or {'foreign', key, token}; or because
// its token is implausible: {'implausible', largest}.
func fenceRefusal(res string, snap lease.Snapshot, arr []valkey.ValkeyMessage) error {
	verdict, _ := arr[0].ToString()
	switch {
	case verdict == "implausible" && len(arr) == 2:
		s, _ := arr[1].ToString()
		if largest, err := strconv.ParseUint(s, 10, 64); err == nil {
			return &fence.ImplausibleTokenError{Resource: res, Key: snap.Key, Token: snap.Token, Largest: lease.Token(largest)}
		}
	case verdict == "stale" && len(arr) == 2:
		tok, _ := arr[1].ToString()
		cur, _ := strconv.ParseUint(tok, 10, 64)
		return &fence.StaleError{Resource: res, Key: snap.Key, Token: snap.Token, Current: lease.Token(cur)}
	case verdict == "foreign" && len(arr) == 3:
		key, _ := arr[1].ToString()
		tok, _ := arr[2].ToString()
		cur, _ := strconv.ParseUint(tok, 10, 64)
		return &fence.ForeignLeaseError{Resource: res, Key: snap.Key, Token: snap.Token, FencedBy: key, Current: lease.Token(cur)}
	}
	return lease.Indeterminate(fmt.Errorf("leasequeue: valkey: item %q: unexpected reply %v", res, arr))
}

// completeItem implements Source, in one script.
func (s *ValkeySource) completeItem(ctx context.Context, snap lease.Snapshot, id string) error {
	return s.end(ctx, snap, id, Done, "", 0)
}

// completeWith marks the running item id done and applies cmds, as
// CompleteClaimWith says.
func (s *ValkeySource) completeWith(ctx context.Context, snap lease.Snapshot, id string, cmds ...fencevalkey.Command) error {
	if len(cmds) == 0 {
		return s.completeItem(ctx, snap, id)
	}
	res, err := s.resource(id)
	if err != nil {
		return err
	}
	_, err = s.fence.DoAt(ctx, snap, res, s.ItemKey(id, "fence"), append([]fencevalkey.Command{
		fencevalkey.HSet(s.ItemKey(id, "item"), "state", string(Done), "owner", snap.Owner, "error", "", "nonce", "", "exp", "0", "with", "1"),
	}, cmds...)...)
	if err != nil {
		return err
	}
	// Only after the fenced write, and unfenced: a lost update only makes
	// a claimer look at the item again, and find it done.
	finishedScript.Exec(ctx, s.client, []string{s.ItemKey(id, "item"), s.due, s.since, s.done}, []string{id})
	return nil
}

// CompleteClaimWith completes claim c as Claim.Complete does, with cmds
// applied in the same fenced script (see fencevalkey.Fence.DoAt): the item is
// done exactly when the commands are applied, and a claim that was taken
// over can do neither. The commands' keys must be in the queue's hash
// slot: make them with ItemKey. It returns the errors of Claim.Complete,
// or an error wrapping fence.ErrInvalid, before any I/O, for a command
// that breaks fencevalkey.Fence's rules. Without commands it is Claim.Complete.
//
// With commands it takes two requests: the fenced script, which does not
// read the item's state first (the current claim's completion applies
// even if that claim already ended the item), then an unfenced script
// that records when the item finished and removes it from the due set
// and ready-time hash; should that be lost, a claim that looks at the
// item later finds it done and does it. An item completed with commands
// keeps its fence when Sweep removes it, since the fence also guards the
// commands' keys: delete ItemKey(id, "fence") with those keys.
func (s *ValkeySource) CompleteClaimWith(ctx context.Context, c *Claim, cmds ...fencevalkey.Command) error {
	return c.complete(ctx, func(ctx context.Context, snap lease.Snapshot) error {
		return s.completeWith(ctx, snap, c.id, cmds...)
	})
}

// failItem implements Source, in one script.
func (s *ValkeySource) failItem(ctx context.Context, snap lease.Snapshot, id string, f failRecord) error {
	state, text := Pending, ""
	if f.Dead {
		state = Dead
	}
	if f.Err != nil {
		text = f.Err.Error()
	}
	return s.end(ctx, snap, id, state, text, f.RetryAfter)
}

// end writes the end of an attempt at the running item id under snap's
// token, in one script (see lua/end.lua).
func (s *ValkeySource) end(ctx context.Context, snap lease.Snapshot, id string, state State, text string, retry time.Duration) error {
	res, err := s.resource(id)
	if err != nil {
		return err
	}
	if snap.Token == 0 {
		return fmt.Errorf("%w: leasequeue: finish %q: snapshot without a token", fence.ErrInvalid, id)
	}
	arr, err := s.scripts.end.Exec(ctx, s.client,
		[]string{s.ItemKey(id, "item"), s.ItemKey(id, "fence"), s.due, s.dead, s.since, s.done},
		[]string{id, snap.Token.String(), snap.Owner, string(state), text, strconv.FormatInt(millis(retry), 10)}).ToArray()
	if err != nil {
		return valkeyError("finish", id, err)
	}
	verdict, _ := arr[0].ToString()
	switch verdict {
	case "ok":
		return nil
	case "none":
		return notFound(id)
	case "state":
		state, _ := arr[1].ToString()
		return notRunning(id, State(state))
	}
	return fenceRefusal(res, snap, arr)
}

// valkeyError explains an error from valkey-go: valkeyplumbing.Classify says
// whether the command may have been applied.
func valkeyError(op, name string, err error) error {
	if valkeyplumbing.Misconfigured(err) {
		return lease.Misconfigured(fmt.Errorf("leasequeue: valkey: %s %q (configuration: see the package documentation for the ACL rules): %w", op, name, err))
	}
	return valkeyplumbing.Classify(err).Mark(fmt.Errorf("leasequeue: valkey: %s %q: %w", op, name, err))
}
