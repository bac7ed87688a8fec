// Package fence holds benchmarks of package fence against the same writes
// without a fence, on the same servers in one run: fencepostgres.Tx against the
// same pgx transaction, and a Valkey fenced SET against a plain SET. It has
// no code of its own; see docs/performance.md ("Fences") for the results
// and run.sh for the command that produces them.
package fence
