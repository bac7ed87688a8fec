package fence

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/golib/lease/lease"
)

// Mark returns the fence of resource in the table, the zero Mark if the
// resource has accepted nothing (it has no row). It reads the row without
// locking it, for operators and monitoring: by the time it returns, a
// fenced write may have advanced the fence. It fails, wrapping ErrInvalid,
// on an invalid resource name, before any I/O.
func (t *Table) Mark(ctx context.Context, db Querier, resource string) (Mark, error) {
	if err := ValidateResource(resource); err != nil {
		return Mark{}, err
	}
	var (
		m   Mark
		tok int64
	)
	err := db.QueryRow(ctx, "SELECT f.lease_key, f.token FROM "+t.qualified+" AS f WHERE f.resource = $1::text", resource).Scan(&m.Key, &tok)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Mark{}, nil
	case err != nil:
		return Mark{}, t.statementError([]string{resource}, err)
	}
	m.Token = lease.Token(tok)
	return m, nil
}

// Mark returns the fence of resource, read from its fence key (see
// FenceKey), the zero Mark if the resource has accepted nothing. Like
// Table.Mark it is a plain read for operators and monitoring.
func (v *Valkey) Mark(ctx context.Context, resource string) (Mark, error) {
	if err := ValidateResource(resource); err != nil {
		return Mark{}, err
	}
	fk := v.FenceKey(resource)
	vals, err := v.client.Do(ctx, v.client.B().Hmget().Key(fk).Field("key", "token").Build()).ToArray()
	if err != nil {
		return Mark{}, classify(resource, err)
	}
	if len(vals) != 2 || vals[0].IsNil() {
		return Mark{}, nil
	}
	key, _ := vals[0].ToString()
	tok, _ := vals[1].ToString()
	n, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return Mark{}, fmt.Errorf("fence: resource %q: fence key %q holds token %q, not a number", resource, fk, tok)
	}
	return Mark{Key: key, Token: lease.Token(n)}, nil
}
