package fencepostgres

import "strings"

// Exported for the tests in package fencepostgres_test.
var CommitError = commitError

// WithoutRetireLock returns a copy of t whose retirements do not lock the
// fences table, to show what the lock prevents.
func WithoutRetireLock(t *Table) *Table {
	c := *t
	c.lock = "SELECT 1"
	return &c
}

// WithoutSerializedCheck returns a copy of t whose fenced writes skip the
// check that no retirement committed after their snapshot, to show what
// the check prevents at REPEATABLE READ and SERIALIZABLE.
func WithoutSerializedCheck(t *Table) *Table {
	c := *t
	const check = "current_setting('transaction_isolation') <> 'read committed'"
	if !strings.Contains(c.advance, check) {
		panic("the advance statement no longer has the serialized check")
	}
	c.advance = strings.Replace(c.advance, check, "false", 1)
	return &c
}
