package fencepostgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

// Mark returns the fence of resource in the table, the zero Mark if the
// resource has accepted nothing (it has no row). It reads the row without
// locking it, for operators and monitoring: by the time it returns, a
// fenced write may have advanced the fence. It fails, wrapping ErrInvalid,
// on an invalid resource name, before any I/O.
func (t *Table) Mark(ctx context.Context, db Querier, resource string) (fence.Mark, error) {
	if err := fence.ValidateResource(resource); err != nil {
		return fence.Mark{}, err
	}
	var (
		m   fence.Mark
		tok int64
	)
	err := db.QueryRow(ctx, "SELECT f.lease_key, f.token FROM "+t.qualified+" AS f WHERE f.resource = $1::text", resource).Scan(&m.Key, &tok)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fence.Mark{}, nil
	case err != nil:
		return fence.Mark{}, t.statementError([]string{resource}, err)
	}
	m.Token = lease.Token(tok)
	return m, nil
}
