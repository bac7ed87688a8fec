package fencevalkey

import (
	"fmt"
	"strconv"
	"time"
)

// Command is one write of a fenced Valkey group (see Fence.Do). Build it
// with Set, HSet, Del, IncrBy, Expire or XAdd: the set of commands is
// closed, and the fence script refuses any other. A Command built with a
// bad argument carries the error, which Fence.Do returns before any I/O.
type Command struct {
	name string
	key  string
	args []string
	err  error
}

// String returns the command's name and key, for errors and logs.
func (c Command) String() string { return fmt.Sprintf("%s %q", c.name, c.key) }

// maxTTL bounds every TTL a command carries, as the fence script does.
const maxTTL = 100 * 365 * 24 * time.Hour

// maxArgs bounds the arguments of one command (Lua's unpack has a limit).
const maxArgs = 4096

// SetOptions are the options of Set. The zero value sets the key
// unconditionally and removes any TTL it had.
type SetOptions struct {
	// NX sets the key only if it does not exist.
	NX bool
	// XX sets the key only if it exists.
	XX bool
	// TTL, if positive, expires the key after TTL: EX in seconds when TTL
	// is a whole number of seconds, PX in milliseconds otherwise. It must
	// be a whole number of milliseconds, at most 100 years.
	TTL time.Duration
	// KeepTTL keeps the key's current TTL (KEEPTTL). It excludes TTL.
	KeepTTL bool
}

// Set is SET key value with the options o. Its reply is OK, or nil when NX
// or XX kept it from setting the key.
func Set(key, value string, o SetOptions) Command {
	c := Command{name: "SET", key: key, args: []string{value}}
	switch {
	case o.NX && o.XX:
		c.err = fmt.Errorf("SetOptions: NX and XX exclude each other")
	case o.KeepTTL && o.TTL != 0:
		c.err = fmt.Errorf("SetOptions: KeepTTL and TTL exclude each other")
	}
	if o.NX {
		c.args = append(c.args, "NX")
	}
	if o.XX {
		c.args = append(c.args, "XX")
	}
	if o.KeepTTL {
		c.args = append(c.args, "KEEPTTL")
	}
	if o.TTL != 0 && c.err == nil {
		var unit string
		unit, c.err = ttlArg(o.TTL)
		if unit == "s" {
			c.args = append(c.args, "EX", strconv.FormatInt(int64(o.TTL/time.Second), 10))
		} else {
			c.args = append(c.args, "PX", strconv.FormatInt(int64(o.TTL/time.Millisecond), 10))
		}
	}
	return c
}

// ttlArg checks a TTL and returns the unit it is sent in: "s" or "ms".
func ttlArg(d time.Duration) (string, error) {
	switch {
	case d < time.Millisecond || d > maxTTL:
		return "", fmt.Errorf("TTL %v is not between 1ms and 100 years", d)
	case d%time.Millisecond != 0:
		return "", fmt.Errorf("TTL %v is not a whole number of milliseconds", d)
	case d%time.Second == 0:
		return "s", nil
	}
	return "ms", nil
}

// HSet is HSET key field value [field value …]. Its reply is the number of
// fields added.
func HSet(key string, fieldValues ...string) Command {
	c := Command{name: "HSET", key: key, args: fieldValues}
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		c.err = fmt.Errorf("HSet needs field value pairs, got %d arguments", len(fieldValues))
	}
	return c
}

// Del is DEL key. Its reply is 1 if the key existed, 0 if not.
func Del(key string) Command { return Command{name: "DEL", key: key} }

// IncrBy is INCRBY key delta. Its reply is the new value. The fence
// script refuses the whole group, before writing anything, if the key holds
// a value that is not an integer or a result could come within about 2^53
// of overflowing int64 (|value| + |delta| ≥ 9.2·10^18).
func IncrBy(key string, delta int64) Command {
	return Command{name: "INCRBY", key: key, args: []string{strconv.FormatInt(delta, 10)}}
}

// Expire sets the key's TTL: EXPIRE in seconds when ttl is a whole number
// of seconds, PEXPIRE in milliseconds otherwise. ttl must be a whole
// number of milliseconds, at most 100 years. Its reply is 1 if the key
// exists, 0 if not.
func Expire(key string, ttl time.Duration) Command {
	unit, err := ttlArg(ttl)
	if err != nil {
		return Command{name: "EXPIRE", key: key, err: err}
	}
	if unit == "s" {
		return Command{name: "EXPIRE", key: key, args: []string{strconv.FormatInt(int64(ttl/time.Second), 10)}}
	}
	return Command{name: "PEXPIRE", key: key, args: []string{strconv.FormatInt(int64(ttl/time.Millisecond), 10)}}
}

// XAddOptions are the options of XAdd. The zero value appends to the
// stream, creating it if needed, without trimming.
type XAddOptions struct {
	// NoMkStream appends only if the stream exists (NOMKSTREAM).
	NoMkStream bool
	// MaxLen, if positive, trims the stream to at most MaxLen entries
	// (MAXLEN).
	MaxLen int64
	// Approx trims approximately (MAXLEN ~), which is cheaper. It needs
	// MaxLen.
	Approx bool
}

// XAdd is XADD key [NOMKSTREAM] [MAXLEN [~] n] * field value [field value
// …], with an ID chosen by the server. Its reply is the new entry's ID, or
// nil when NoMkStream kept it from creating the stream.
func XAdd(key string, o XAddOptions, fieldValues ...string) Command {
	c := Command{name: "XADD", key: key}
	if o.NoMkStream {
		c.args = append(c.args, "NOMKSTREAM")
	}
	switch {
	case o.MaxLen < 0 || o.Approx && o.MaxLen == 0:
		c.err = fmt.Errorf("XAddOptions: MaxLen %d must be positive (Approx needs it)", o.MaxLen)
	case o.MaxLen > 0 && o.Approx:
		c.args = append(c.args, "MAXLEN", "~", strconv.FormatInt(o.MaxLen, 10))
	case o.MaxLen > 0:
		c.args = append(c.args, "MAXLEN", strconv.FormatInt(o.MaxLen, 10))
	}
	c.args = append(c.args, "*")
	c.args = append(c.args, fieldValues...)
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		c.err = fmt.Errorf("XAdd needs field value pairs, got %d arguments", len(fieldValues))
	}
	return c
}

// check reports what is wrong with c before it is sent.
func (c Command) check() error {
	switch {
	case c.name == "":
		return fmt.Errorf("zero Command (build commands with Set, HSet, Del, IncrBy, Expire or XAdd)")
	case c.err != nil:
		return fmt.Errorf("%s: %w", c, c.err)
	case c.key == "":
		return fmt.Errorf("%s: empty key", c.name)
	case len(c.args) > maxArgs:
		return fmt.Errorf("%s: %d arguments, more than the limit of %d", c, len(c.args), maxArgs)
	}
	return nil
}
