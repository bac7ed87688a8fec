package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/golib/lease/guard"
	"github.com/jackc/pgx/v5"
)

// quotedQualified matches a schema-qualified name as pgx.Identifier.Sanitize
// writes it: two double-quoted parts, with quotes inside doubled. Nothing
// else can be spliced into a statement as a table name.
var quotedQualified = regexp.MustCompile(`^"(?:[^"\x00]|"")+"\."(?:[^"\x00]|"")+"$`)

// guardParts is queries/guard.sql without its comments, split around each
// mention of the default table, read once: CheckGuard runs in the caller's
// hot path and only joins the parts with the guard's table.
var guardParts = defaultTable.Split(queryText("guard"), -1)

// CheckGuard reports whether the lease record of g still shows g's
// acquisition (same owner and token, not expired on the database's
// clock), and locks the record FOR SHARE so that it stays that way until
// tx ends: no acquire, renew or release of the key can commit in between.
// Call it inside the transaction that makes the guarded write, before the
// write, on the database that holds the lease table:
//
//	tx, err := pool.Begin(ctx)
//	...
//	if err := leasepostgres.CheckGuard(ctx, tx, g); err != nil {
//		tx.Rollback(ctx)
//		return err // *guard.NotCurrentError if the lease moved on
//	}
//	// ... writes ...
//	return tx.Commit(ctx)
//
// It returns nil if the acquisition is current, a *guard.NotCurrentError
// (matching guard.ErrNotCurrent) if not, or the error of the query. Keep
// the transaction short: while it runs, the holder's own renewal waits for
// it.
func CheckGuard(ctx context.Context, tx DB, g guard.Guard) error {
	if g.Kind() != guard.Postgres {
		return fmt.Errorf("leasepostgres: CheckGuard: guard of kind %q, not %q", g.Kind(), guard.Postgres)
	}
	if !quotedQualified.MatchString(g.Record()) {
		return fmt.Errorf("leasepostgres: CheckGuard: record %q is not a quoted, schema-qualified table name", g.Record())
	}
	var (
		current, held bool
		owner         string
		token         int64
	)
	err := tx.QueryRow(ctx, strings.Join(guardParts, g.Record()), g.Key(), g.Owner(), int64(g.Token())).
		Scan(&current, &owner, &token, &held)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &guard.NotCurrentError{Key: g.Key(), Token: g.Token(), Detail: "no lease record"}
	case err != nil:
		return classify(err, g.Record())
	case current:
		return nil
	case token != int64(g.Token()) || owner != g.Owner():
		return &guard.NotCurrentError{Key: g.Key(), Token: g.Token(),
			Detail: fmt.Sprintf("the record shows token %d of %q", token, owner)}
	case !held:
		return &guard.NotCurrentError{Key: g.Key(), Token: g.Token(), Detail: "expired, released or handed off"}
	}
	return &guard.NotCurrentError{Key: g.Key(), Token: g.Token()}
}
