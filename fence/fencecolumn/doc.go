// Package fencecolumn fences rows of your own PostgreSQL tables: [Update]
// and [Upsert] write rows only where the row's own fence columns ([Column])
// admit the lease's snapshot, in one statement, built with squirrel. Each
// row is its own resource. The rule, its errors (*fence.StaleError,
// *fence.ForeignLeaseError, *fence.ImplausibleTokenError,
// *fence.ConflictError) and their sentinels are those of package [fence],
// whose documentation explains them.
//
// The package links pgx and squirrel. For all-or-nothing writes over many
// resources, use the fences table of package fencepostgres.
package fencecolumn
