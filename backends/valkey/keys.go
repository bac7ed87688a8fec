package valkey

import "strings"

// DefaultPrefix is the Prefix a zero Options means.
const DefaultPrefix = "lease:"

// keyEscaper makes a lease key safe inside a hash tag. Escaping '%' makes
// the mapping one-to-one; escaping '}' keeps the tag from ending early;
// escaping '{' keeps the names easy to read and to match in ACL patterns.
var keyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// recordKey returns the name of the hash that records key:
// prefix{escaped key}. The prefix holds no brace (New checks), so the first
// '{' is the tag's opening brace and, since the escaped key holds no '}',
// the first '}' after it is the tag's closing one: the hash slot is decided
// by the whole escaped key and nothing else, and no two lease keys share a
// record.
func recordKey(prefix, key string) string {
	if strings.ContainsAny(key, "%{}") {
		key = keyEscaper.Replace(key)
	}
	return prefix + "{" + key + "}"
}

// releaseChannel returns the shard channel on which Release announces that
// the lease recorded in record is free. It is in record's hash slot.
func releaseChannel(record string) string { return record + ":released" }
