package keyspace_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"
	"pgregory.net/rapid"

	leasememory "github.com/golib/lease/backends/memory"
	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/cache"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasequeue"
	"github.com/golib/lease/leasescheduler"
)

// noServer is a valkey.Client that is never called: naming does no I/O.
type noServer struct{ valkey.Client }

// prefixes are the Valkey prefixes of one deployment, one per package.
type prefixes struct{ lease, fence, cache, queue string }

// defaults are the packages' default prefixes.
var defaults = prefixes{leasevalkey.DefaultPrefix, fencevalkey.DefaultPrefix, cache.DefaultPrefix, leasequeue.DefaultValkeyPrefix}

// all returns every prefix names start with.
func (p prefixes) all() []string {
	return []string{p.lease, p.fence, p.cache, p.queue}
}

// A kind builds one kind of Valkey name from drawn inputs, through the
// package that uses it where that package exports the name; it returns
// the name and the names of the keys one script touches with it. Channel
// kinds name shard channels, which the server keeps apart from keys: a
// channel may be named as a key is.
type kind struct {
	name    string
	make    func(t *rapid.T, p prefixes, draw func(string) string) (name string, slotmates []string)
	channel bool
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// kinds lists every kind of Valkey key and channel name the module builds.
// Names a package does not export are built as its code builds them;
// each package's tests pin those to the same layout (for leasequeue,
// TestValkeyNamesFollowTheLayout; for backends/valkey,
// TestRecordKeyIsOneToOne; for cache, TestEntryNames).
var kinds = []kind{
	{"lease record", func(t *rapid.T, p prefixes, draw func(string) string) (string, []string) {
		s := must(leasevalkey.New(noServer{}, leasevalkey.Options{Prefix: p.lease}))
		k := draw("key")
		return s.RecordKey(k), []string{s.RecordKey(k) + ":released", s.Prefix() + s.HashTag(k)}
	}, false},
	{"lease release channel", func(t *rapid.T, p prefixes, draw func(string) string) (string, []string) {
		s := must(leasevalkey.New(noServer{}, leasevalkey.Options{Prefix: p.lease}))
		k := draw("key")
		return s.RecordKey(k) + ":released", []string{s.RecordKey(k)}
	}, true},
	{"lease permit tokens", func(t *rapid.T, p prefixes, draw func(string) string) (string, []string) {
		// The token key of a semaphore, which the Store does not export:
		// the script that acquires a permit touches it and the records of
		// the permits. (A permit's record is a lease record: names draws
		// permits' keys too.)
		s := must(leasevalkey.New(noServer{}, leasevalkey.Options{Prefix: p.lease}))
		sem := draw("semaphore")
		return keyspace.PermitTokens(p.lease, sem), []string{s.RecordKey(lease.PermitKey(sem, 0)), s.RecordKey(lease.PermitKey(sem, lease.MaxPermits-1))}
	}, false},
	{"fence key", func(t *rapid.T, p prefixes, draw func(string) string) (string, []string) {
		f := must(fencevalkey.New(noServer{}, fencevalkey.Options{Prefix: p.fence}))
		r := draw("resource")
		if strings.ContainsAny(r, "{}") || r == "" {
			r = keyspace.Tag(r) + "r" // a resource holds no brace
		}
		return f.FenceKey(r), []string{p.fence + "x:{" + r + "}:data"}
	}, false},
	{"floor key", func(t *rapid.T, p prefixes, draw func(string) string) (string, []string) {
		// One floor per lease key and hash slot: the name depends on the
		// resource only through its slot, so the resource is not an
		// input of the name, and equal names must have equal lease keys.
		// Its tag stands for the fence key's slot without equalling the
		// fence key's tag, so the slot is checked by fence's tests
		// (TestSlotTags, TestValkeyRetire), not here.
		f := must(fencevalkey.New(noServer{}, fencevalkey.Options{Prefix: p.fence}))
		r := rapid.SampledFrom([]string{"a", "b", "x/y", "jobs/7"}).Draw(t, "resource")
		return f.FloorKey(r, draw("lease key")), nil
	}, false},
	{"cache entry", func(t *rapid.T, p prefixes, draw func(string) string) (string, []string) {
		s := must(leasevalkey.New(noServer{}, leasevalkey.Options{Prefix: p.lease}))
		c := must(cache.New(noServer{}, must(lease.NewClient(s, lease.ClientOptions{Owner: "o"})), cache.Options{Prefix: p.cache, TTL: time.Second}))
		key := draw("key")
		suffix := rapid.SampledFrom([]string{":value", ":fresh", ":invalidated"}).Draw(t, "suffix")
		rec := s.RecordKey(c.LeaseKey(key))
		base := p.cache + rec[len(s.Prefix()):]
		return base + suffix, []string{rec, base + ":value"}
	}, false},
	{"cache channel", func(t *rapid.T, p prefixes, draw func(string) string) (string, []string) {
		s := must(leasevalkey.New(noServer{}, leasevalkey.Options{Prefix: p.lease}))
		c := must(cache.New(noServer{}, must(lease.NewClient(s, lease.ClientOptions{Owner: "o"})), cache.Options{Prefix: p.cache, TTL: time.Second}))
		rec := s.RecordKey(c.LeaseKey(draw("key")))
		return p.cache + rec[len(s.Prefix()):] + ":published", []string{rec}
	}, true},
	{"queue set", func(t *rapid.T, p prefixes, draw func(string) string) (string, []string) {
		src := must(leasequeue.NewValkeySource(noServer{}, draw("queue"), leasequeue.ValkeyOptions{Prefix: p.queue}))
		set := rapid.SampledFrom([]string{":ready", ":due", ":done", ":dead", ":since"}).Draw(t, "set")
		name := strings.TrimSuffix(src.ReadyKey(), ":ready") + set
		return name, []string{src.ReadyKey()}
	}, false},
	{"queue item key", func(t *rapid.T, p prefixes, draw func(string) string) (string, []string) {
		src := must(leasequeue.NewValkeySource(noServer{}, draw("queue"), leasequeue.ValkeyOptions{Prefix: p.queue}))
		id := draw("id")
		suffix := rapid.SampledFrom([]string{"item", "fence", "ready", "members", "released", "x:y", "a/b"}).Draw(t, "suffix")
		// The claim script touches the queue's keys and the items it
		// picks: all in the queue's slot.
		return src.ItemKey(id, suffix), []string{src.ItemKey(id, "item"), src.ItemKey(id, "fence"), src.ReadyKey()}
	}, false},
	{"group member set", func(t *rapid.T, p prefixes, draw func(string) string) (string, []string) {
		return keyspace.Name(p.queue, keyspace.Tag(draw("group")), ":members"), nil
	}, false},
}

// TestNamesNeverMeet draws names of every kind and checks that two names
// are equal only if they are of one kind and were made of the same
// inputs, and that each name shares its hash tag with the keys a script
// touches with it. Packages with one prefix share one namespace; the
// prefixes of different packages must differ, as the defaults do. Keys
// and channels are compared apart, as the server keeps them.
func TestNamesNeverMeet(t *testing.T) {
	names := rapid.OneOf(
		rapid.StringMatching(`[a%{}/:2579BDF]{1,8}`),
		rapid.StringMatching(`(a|/|:|item|fence:|%2F|%|\{|\}|\{a\}|permit|/permit/|:permit:|0|7|/permits|:released){1,5}`),
		rapid.StringMatching(`(a|/|:|\{|\}|\{a\}|%){1,3}/permit/(0|7|12)`), // the keys of permits
		rapid.StringN(1, 16, 64),
	).Filter(func(s string) bool { return fence.ValidateResource(s) == nil })
	prefix := rapid.StringMatching(`[a-z:/%]{1,6}`)
	rapid.Check(t, func(t *rapid.T) {
		p := defaults
		if rapid.Bool().Draw(t, "custom prefixes") {
			p = prefixes{prefix.Draw(t, "lease"), prefix.Draw(t, "fence"), prefix.Draw(t, "cache"), prefix.Draw(t, "queue")}
			seen := map[string]bool{}
			for _, x := range p.all() {
				if seen[x] {
					t.Skip("two packages share a prefix")
				}
				seen[x] = true
			}
		}
		made := map[string]string{} // name (channels marked) → what made it
		for i := range 12 {
			k := rapid.SampledFrom(kinds).Draw(t, fmt.Sprint("kind", i))
			var inputs []string
			draw := func(what string) string {
				s := names.Draw(t, what)
				inputs = append(inputs, fmt.Sprintf("%s=%q", what, s))
				return s
			}
			name, mates := k.make(t, p, draw)
			what := k.name + " " + strings.Join(inputs, " ")
			id := name
			if k.channel {
				id = "channel " + name
			}
			if other, ok := made[id]; ok && other != what {
				t.Fatalf("%s and %s are both named %q", other, what, name)
			}
			made[id] = what
			for _, m := range mates {
				if HashTag(m) != HashTag(name) {
					t.Fatalf("%s: %q and %q, which one script touches, are in different hash slots", what, name, m)
				}
			}
		}
	})
}

// TestLeaseKeysNeverMeet: the lease keys that queues, groups and
// schedulers derive never meet, whatever their names and prefixes.
func TestLeaseKeysNeverMeet(t *testing.T) {
	client := must(lease.NewClient(leasememory.New(leasememory.Options{}), lease.ClientOptions{Owner: "o"}))
	policy := must(lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute}))
	names := rapid.OneOf(
		rapid.StringMatching(`(a|/|items|members|partitions|prune|run|slot/0|%2F|%){1,5}`),
		rapid.StringN(1, 16, 64),
	).Filter(func(s string) bool { return lease.ValidateKey(s+"/partitions/x") == nil })
	derived := []struct {
		kind string
		key  func(ns, x string) string
	}{
		{"queue item", func(ns, x string) string {
			q := must(leasequeue.New(client, leasequeue.NewMemorySource(leasequeue.MemoryOptions{}), leasequeue.Options{Name: ns, Policy: policy}))
			return q.Key(x)
		}},
		{"queue prune", func(ns, _ string) string {
			q := must(leasequeue.New(client, leasequeue.NewMemorySource(leasequeue.MemoryOptions{}), leasequeue.Options{Name: ns, Policy: policy}))
			return q.PruneKey()
		}},
		{"group member", func(ns, x string) string { return keyspace.LeaseKey(ns+"/", keyspace.GroupMember, x) }},
		{"group partition", func(ns, x string) string { return keyspace.LeaseKey(ns+"/", keyspace.GroupPartition, x) }},
		{"scheduler run", func(ns, x string) string {
			return must(leasescheduler.NewLocker(client, leasescheduler.Options{Policy: policy, Prefix: ns})).RunKey(x)
		}},
		{"scheduler slot", func(ns, x string) string {
			l := must(leasescheduler.NewLocker(client, leasescheduler.Options{Policy: policy, Prefix: ns}))
			return l.SlotKey(x, leasescheduler.Slot{Index: int64(len(x) % 3)})
		}},
	}
	rapid.Check(t, func(t *rapid.T) {
		made := map[string]string{}
		for i := range 8 {
			d := rapid.SampledFrom(derived).Draw(t, fmt.Sprint("kind", i))
			ns, x := names.Draw(t, fmt.Sprint("ns", i)), names.Draw(t, fmt.Sprint("x", i))
			key, what := d.key(ns, x), fmt.Sprintf("%s %q of %q", d.kind, x, ns)
			switch d.kind {
			case "scheduler slot":
				what += fmt.Sprint(" slot ", len(x)%3)
			case "queue prune": // one per queue
				what = fmt.Sprintf("%s of %q", d.kind, ns)
			}
			if other, ok := made[key]; ok && other != what {
				t.Fatalf("%s and %s have one lease key %q", other, what, key)
			}
			made[key] = what
		}
	})
}
