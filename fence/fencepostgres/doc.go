// Package fencepostgres fences PostgreSQL transactions with a fences
// table: [Tx] runs a function in a pgx transaction whose first statement
// checks and advances the fences of the named resources, so a stale holder
// writes nothing. [Migrate] creates the table ([Migrations] and
// [GooseMigrations] hand its migrations to golang-migrate or goose),
// [Table.Sweeper] retires fences that have stopped advancing. The rule,
// its errors (*fence.StaleError, *fence.ForeignLeaseError,
// *fence.ImplausibleTokenError, *fence.ConflictError) and their sentinels
// are those of package [fence], whose documentation explains them.
//
// The package links pgx and no other driver. For a fence column on a table
// of your own, see package fencecolumn.
package fencepostgres
