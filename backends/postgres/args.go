package postgres

import "github.com/jackc/pgx/v5/pgtype"

// The statements' text and bigint arguments go to pgx as pointers to
// these types, which implement pgx's own valuer interfaces. pgx encodes a
// plain *string or *int64 by copying the value out through reflect, which
// allocates once per argument; a pointer that implements the interface is
// used as it is, and an interface holding a pointer needs no allocation
// either. Each pointer points into one call struct (acquireCall,
// outcomeCall), the call's only allocation. pgx falls back to a type's
// underlying kind where it does not know its OID (QueryExecModeExec,
// simple protocol), which is right for these two but not for a duration:
// TTLs and remaining times are pgtype.Interval, which pgx knows in every
// mode and, by pointer, also encodes and scans without a copy (a
// time.Duration costs an allocation each way).

// textArg is a text argument.
type textArg string

func (a *textArg) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*a), Valid: true}, nil
}

// int8Arg is a bigint argument.
type int8Arg int64

func (a *int8Arg) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*a), Valid: true}, nil
}
