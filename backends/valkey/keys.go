package valkey

import "github.com/golib/lease/internal/keyspace"

// DefaultPrefix is the Prefix a zero Options means.
const DefaultPrefix = "lease:"

// recordKey returns the name of the hash that records key, in the
// module's one encoding of names (keyspace.Record): prefix{escaped key}
// for most keys; prefix{escaped t}:escaped key for a key holding the hash
// tag {t}; prefix{escaped sem}:permit:n for permit n of semaphore sem. The
// prefix holds no brace (New checks) and the escaped parts none either,
// so no two lease keys share a record, and the name parses back into its
// key (parseRecordKey).
func recordKey(prefix, key string) string { return keyspace.Record(prefix, key) }

// permitTokensKey returns the name of the hash that keeps the highest
// token issued to a permit of the semaphore sem (keyspace.PermitTokens),
// in the hash slot of the permits' records. It is no record's name.
func permitTokensKey(prefix, sem string) string { return keyspace.PermitTokens(prefix, sem) }

// releaseChannel returns the shard channel on which Release announces that
// the lease recorded in record is free: the record's name and ":released",
// in the record's hash slot. Channels are a namespace of their own on the
// server, apart from keys; the channels of different records differ.
func releaseChannel(record string) string { return record + ":released" }
