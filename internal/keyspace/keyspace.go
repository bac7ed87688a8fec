// Package keyspace builds every Valkey key and channel name, and every
// lease key derived from other names, that this module uses: one
// injective encoding, so that two different things never share a name.
//
// # Valkey names
//
// Every Valkey key and channel the module builds is
//
//	prefix + "{" + tag + "}" + suffix
//
// where prefix is a package's configured prefix (it holds no brace, which
// each package checks), tag is [Tag] of the names the key belongs to, and
// suffix is a fixed word of the package (":ready", ":released", …) or
// empty. The tag is the key's hash tag: the server hashes only the bytes
// between the first '{' and the first '}' after it ([HashTag]), so keys
// that carry one tag are in one hash slot and one script may touch them,
// even on a cluster. Since neither prefix nor tag holds a brace, [Name] is
// one to one: the prefix is what precedes the first '{', the tag what
// follows it up to the first '}', the suffix the rest, and [Tag] splits
// back into its parts. The exceptions to [Tag] are in package fence: the
// fence key, whose tag is the resource name itself, unescaped (users put
// "{resource}" in their own keys, and a resource holds no brace, so fence
// keys are one to one as well), and the floor key, whose tag is a short
// string of letters and digits in the hash slot it stands for, and whose
// suffix is ":floor:" and the escaped lease key. Packages with one prefix
// share one namespace; different packages need different prefixes (the
// defaults differ). Keys and channels are apart on the server (a channel
// may be named as a key is), and each is one to one within its own kind.
//
// # Lease records
//
// The lease record of a key, the hash the Valkey lease Store keeps it in,
// is named by [Record], in one of three forms:
//
//	prefix{Escape(key)}                a key without a hash tag, not a permit's
//	prefix{t}:Escape(key)              a key holding the hash tag {t}
//	prefix{Escape(sem)}:permit:n       sem + "/permit/" + n, permit n of semaphore sem
//
// so that the record of a key with a hash tag is in the slot of the key
// itself (the records of "{acct}/17" and "{acct}/42" share the slot of the
// application's own keys tagged {acct}), and the permits of one semaphore
// share one; other keys have the layout from
// before there were either. A permit of a semaphore whose key holds a
// hash tag holds it too, and takes the second form. [ParseRecord] reads a record's name back into
// its key. The release channel of a record is its name and ":released".
// A semaphore also has a token key, [PermitTokens]: its name holds a '/'
// after the tag, which no record's does.
//
// # Derived lease keys
//
// Integrations that take a lease per item (a queue's items, a group's
// members and partitions, a scheduler's runs and slots) name it
// [LeaseKey](ns, kind, x): ns + kind + "/" + Escape(x). The escaped x holds
// no '/', so it is what follows the last '/'; no kind is a suffix of
// another (see [Kinds]), so the kind and then ns are what precede it.
// Keys of different kinds or namespaces therefore never meet. A cache's
// refresh lease is its Prefix + the cache key, unescaped: the Prefix is its
// namespace. Lease keys the application chooses itself can meet any of
// these; that is the application's choice.
package keyspace

import (
	"strconv"
	"strings"
)

// Reserved lists the bytes that Escape writes as '%' and two hex digits:
// '%' itself (which makes the escaping reversible), the braces (which
// would end or move a hash tag) and '/' (which separates the parts of a
// tag and the segments of a lease key).
const Reserved = "%{}/"

// Escape returns s with each reserved byte written as %25, %7B, %7D or
// %2F; other bytes are kept. It returns s itself, without allocating,
// when s holds no reserved byte. Escaping s piece by piece gives the same
// result as escaping it whole: Escape(a+b) == Escape(a)+Escape(b).
func Escape(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if isReserved(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	write(&b, s)
	return b.String()
}

// write writes the escaped s to b.
func write(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		if c := s[i]; isReserved(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
}

func isReserved(c byte) bool { return c == '%' || c == '{' || c == '}' || c == '/' }

// Tag returns the hash tag (without its braces) of a thing named by
// parts: the parts, each escaped, joined by '/'. It holds no brace, and
// different lists of parts (also of different lengths) have different
// tags.
func Tag(parts ...string) string {
	if len(parts) == 1 {
		return Escape(parts[0])
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('/')
		}
		write(&b, p)
	}
	return b.String()
}

// Name returns prefix + "{" + tag + "}" + suffix, the name of a Valkey key
// or channel in the hash slot of tag. Neither prefix nor tag may hold a
// brace: prefixes are checked by their packages ([ValidPrefix]), tags come
// from [Tag] or are resource names checked to hold none; the one
// exception, a lease key's own hash tag in [Record], holds no '}', which
// is enough for the name to be one to one. suffix starts with ':' by
// convention, or is empty.
func Name(prefix, tag, suffix string) string {
	return prefix + "{" + tag + "}" + suffix
}

// ValidPrefix reports whether prefix can start Valkey names: it must not
// hold a brace, which would move the hash tag.
func ValidPrefix(prefix string) bool { return !strings.ContainsAny(prefix, "{}") }

// Kinds of derived lease keys. None is a suffix of another, which makes
// LeaseKey one to one (a test checks it).
const (
	QueueItem      = "items"      // leasequeue.Queue: Name + "/items/" + id
	GroupMember    = "members"    // partition.Group: Name + "/members/" + worker
	GroupPartition = "partitions" // partition.Group: Name + "/partitions/" + partition
	SchedulerRun   = "run"        // leasescheduler.Locker: Prefix + "run/" + job
	QueuePrune     = "prune"      // leasequeue.Queue: Name + "/prune/" (x empty)
)

// SchedulerSlots is the number of slot kinds: SchedulerSlot(0) to
// SchedulerSlot(SchedulerSlots-1).
const SchedulerSlots = 3

// SchedulerSlot returns the kind of the lease of a job's slot n modulo
// SchedulerSlots (leasescheduler.Locker: Prefix + "slot/" + n + "/" + job).
func SchedulerSlot(n int64) string {
	return "slot/" + strconv.FormatInt((n%SchedulerSlots+SchedulerSlots)%SchedulerSlots, 10)
}

// Kinds returns every kind of derived lease key.
func Kinds() []string {
	k := []string{QueueItem, GroupMember, GroupPartition, SchedulerRun, QueuePrune}
	for n := range int64(SchedulerSlots) {
		k = append(k, SchedulerSlot(n))
	}
	return k
}

// LeaseKey returns the lease key of x, of the given kind, in namespace ns:
// ns + kind + "/" + Escape(x). ns is any string (a queue's name and '/', a
// scheduler's prefix); kind is one of Kinds.
func LeaseKey(ns, kind, x string) string { return ns + kind + "/" + Escape(x) }
