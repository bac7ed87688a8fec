package keyspace

import "strings"

// HashTag returns the part of a Valkey key or channel name that decides
// its cluster hash slot, by the server's rule: the bytes between the first
// '{' and the first '}' after it, if there are any; otherwise (no '{', no
// '}' after it, or "{}") the whole name.
func HashTag(name string) string {
	if t, ok := hashTag(name); ok {
		return t
	}
	return name
}

// hashTag returns the hash tag of name by the server's rule, and whether
// name has one (a '{', then a '}' after it, with at least a byte between
// them).
func hashTag(name string) (string, bool) {
	open := strings.IndexByte(name, '{')
	if open < 0 {
		return "", false
	}
	end := strings.IndexByte(name[open+1:], '}')
	if end <= 0 {
		return "", false
	}
	return name[open+1 : open+1+end], true
}

// The parts of the names of permits: a permit's lease key is its
// semaphore's key, permitSep and the slot in decimal (lease.PermitKey);
// its record's name ends in permitSuffix and the slot.
const (
	permitSep    = "/permit/"
	permitSuffix = ":permit:"
)

// splitPermit returns the semaphore key and the slot of a permit's lease
// key: key is sem + "/permit/" + slot, with sem not empty and slot a
// canonical decimal ("0", or digits without a leading zero).
func splitPermit(key string) (sem, slot string, ok bool) {
	i, ok := permitSlot(key, "")
	if !ok {
		return "", "", false
	}
	return key[:i-len(permitSep)], key[i:], true
}

// IsPermit reports whether the lease key head + tail is the key of a
// semaphore's permit, lease.PermitKey(sem, n) with sem not empty, and so
// has a record of the second form of [Record] unless it holds a hash tag.
// It does not allocate.
func IsPermit(head, tail string) bool {
	_, ok := permitSlot(head, tail)
	return ok
}

// permitSlot returns where the slot starts in the lease key head + tail,
// if that is a permit's key: the digits at its end are a canonical
// decimal, after "/permit/" and at least one byte before that.
func permitSlot(head, tail string) (int, bool) {
	at := func(i int) byte {
		if i < len(head) {
			return head[i]
		}
		return tail[i-len(head)]
	}
	n := len(head) + len(tail)
	i := n
	for i > 0 && '0' <= at(i-1) && at(i-1) <= '9' {
		i--
	}
	if i == n || at(i) == '0' && n-i > 1 || i <= len(permitSep) {
		return 0, false
	}
	for j := range len(permitSep) {
		if at(i-len(permitSep)+j) != permitSep[j] {
			return 0, false
		}
	}
	return i, true
}

// canonicalDecimal reports whether s is "0" or digits without a leading
// zero.
func canonicalDecimal(s string) bool {
	if s == "" || s[0] == '0' && len(s) > 1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// RecordTag returns the hash tag, without its braces, of the record of
// the lease key key (see [Record]): key's own hash tag if key has one,
// else Escape of the semaphore's key if key is a permit's, else
// Escape(key).
func RecordTag(key string) string {
	if t, ok := hashTag(key); ok {
		return t
	}
	if sem, _, ok := splitPermit(key); ok {
		return Escape(sem)
	}
	return Escape(key)
}

// Record returns the name of the Valkey hash that records the lease on
// key, under prefix (which holds no brace):
//
//   - prefix{t}:Escape(key) if key has a hash tag t by the server's rule
//     (see [HashTag]), so that the record is in the hash slot of key
//     itself: the records of the keys an application tags alike share a
//     slot, and share it with the application's own keys of that tag. t is
//     kept as it is: it holds no '}' (and so ends at the first one), and
//     escaping its '/' or '%' would move it to another slot;
//   - otherwise prefix{Escape(sem)}:permit:n if key is sem + "/permit/" +
//     n, the key of permit n of semaphore sem (n a canonical decimal, sem
//     not empty), so that the permits of a semaphore share a hash slot;
//   - otherwise prefix{Escape(key)}.
//
// It is one to one, and [ParseRecord] reverses it: the prefix holds no
// brace and no tag a '}', so the tag is what lies between the first '{'
// and the first '}'; a name with nothing after the '}' is of the third
// form, one ending in ":permit:" and digits of the second (the escape of a
// key holding a '{' holds "%7B", and so is never "permit:" and digits),
// any other of the first, whose tag is then given by its key.
func Record(prefix, key string) string {
	if t, ok := hashTag(key); ok {
		return Name(prefix, t, ":"+Escape(key))
	}
	if sem, slot, ok := splitPermit(key); ok {
		return Name(prefix, Escape(sem), permitSuffix+slot)
	}
	return Name(prefix, Escape(key), "")
}

// ParseRecord returns the lease key whose record under prefix is named
// name, or false if name is not the record of any key: Record(prefix,
// key) == name exactly.
func ParseRecord(prefix, name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"{")
	if !ok {
		return "", false
	}
	end := strings.IndexByte(rest, '}')
	if end < 0 {
		return "", false
	}
	tag, tail := rest[:end], rest[end+1:]
	var key string
	switch slot, isPermit := strings.CutPrefix(tail, permitSuffix); {
	case tail == "":
		key, ok = Unescape(tag)
	case isPermit && canonicalDecimal(slot):
		key, ok = Unescape(tag)
		key += permitSep + slot
	case tail[0] == ':':
		key, ok = Unescape(tail[1:])
	default:
		return "", false
	}
	if !ok || Record(prefix, key) != name {
		return "", false
	}
	return key, true
}

// permitTokensSuffix ends the name of a semaphore's token key.
const permitTokensSuffix = "/permits"

// PermitTokens returns the name of the Valkey hash that keeps, in its
// field token, the highest token issued to any permit of the semaphore
// sem, under prefix: prefix{t}:Escape(sem)/permits if sem has a hash tag
// t, otherwise prefix{Escape(sem)}/permits. It is in the hash
// slot of the records of sem's permits (see [Record]), and is no record's
// name: after the tag, a record's name holds no '/'. Different semaphores
// have different token keys.
func PermitTokens(prefix, sem string) string {
	if t, ok := hashTag(sem); ok {
		return Name(prefix, t, ":"+Escape(sem)+permitTokensSuffix)
	}
	return Name(prefix, Escape(sem), permitTokensSuffix)
}
