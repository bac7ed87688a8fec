package valkey

import "github.com/golib/lease/internal/keyspace"

// DefaultPrefix is the Prefix a zero Options means.
const DefaultPrefix = "lease:"

// recordKey returns the name of the hash that records key:
// prefix{escaped key}, in the module's one encoding of names (package
// keyspace). The prefix holds no brace (New checks) and the escaped key
// none either, so the hash slot is decided by the whole escaped key and
// nothing else, and no two lease keys share a record.
func recordKey(prefix, key string) string { return keyspace.Name(prefix, keyspace.Tag(key), "") }

// releaseChannel returns the shard channel on which Release announces that
// the lease recorded in record is free: the record's name and ":released",
// in the record's hash slot.
func releaseChannel(record string) string { return record + ":released" }
