package fencecolumn_test

import (
	"errors"
	"strings"
	"testing"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencecolumn"
	"github.com/golib/lease/lease"
)

var col = fencecolumn.Column{Token: "fence_token", Key: "fence_key"}

func newInvoices(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := newPool(t)
	_, err := pool.Exec(ctxT(t), `
		CREATE SCHEMA billing;
		CREATE TABLE billing.invoices (
			id          int PRIMARY KEY,
			status      text NOT NULL,
			total       int NOT NULL DEFAULT 0,
			fence_key   text,
			fence_token bigint
		);
		CREATE TABLE billing.runs (month text PRIMARY KEY, invoice int NOT NULL);
		INSERT INTO billing.invoices (id, status) VALUES (1, 'open'), (2, 'open'), (3, 'open');
		INSERT INTO billing.runs VALUES ('2026-11', 2);`)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

func status(t *testing.T, pool *pgxpool.Pool, id int) (s string, m fence.Mark) {
	t.Helper()
	var key *string
	var tok *int64
	err := pool.QueryRow(t.Context(), `SELECT status, fence_key, fence_token FROM billing.invoices WHERE id = $1`, id).Scan(&s, &key, &tok)
	if err != nil {
		t.Fatal(err)
	}
	if key != nil {
		m.Key = *key
	}
	if tok != nil {
		m.Token = lease.Token(*tok)
	}
	return s, m
}

func TestUpdateStaleVersusNoRow(t *testing.T) {
	t.Parallel()
	pool := newInvoices(t)
	ctx := ctxT(t)
	upd := func(status string, id int) fencecolumn.UpdateRows {
		return fencecolumn.UpdateRows{Table: "billing.invoices", Set: map[string]any{"status": status}, Where: sq.Eq{"id": id}}
	}
	tag, err := fencecolumn.Update(ctx, pool, snap("billing", 5), upd("paid", 1), col)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("first Update: %v, %v", tag, err)
	}
	if s, m := status(t, pool, 1); s != "paid" || m != (fence.Mark{Key: "billing", Token: 5}) {
		t.Fatalf("row 1 = %q %v", s, m)
	}

	// Zero rows because stale.
	tag, err = fencecolumn.Update(ctx, pool, snap("billing", 4), upd("void", 1), col)
	wantStale(t, err, 4, 5)
	if tag.RowsAffected() != 0 || !strings.Contains(err.Error(), `"billing.invoices (id)=(1)"`) {
		t.Fatalf("stale Update: %v, %v", tag, err)
	}
	// Zero rows because no row matched: no error.
	tag, err = fencecolumn.Update(ctx, pool, snap("billing", 4), upd("void", 99), col)
	if err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("Update of no row = %v, %v; want 0 rows, no error", tag, err)
	}
	// Zero rows because of another lease.
	_, err = fencecolumn.Update(ctx, pool, snap("refunds", 50), upd("void", 1), col)
	if !errors.Is(err, fence.ErrForeignLease) {
		t.Fatalf("foreign Update = %v", err)
	}
	if s, _ := status(t, pool, 1); s != "paid" {
		t.Fatalf("row 1 = %q after refused writes", s)
	}

	// Several rows: those whose fence admits the token are written.
	tag, err = fencecolumn.Update(ctx, pool, snap("billing", 4), fencecolumn.UpdateRows{Table: "billing.invoices", Set: map[string]any{"status": "sent"}, Where: sq.LtOrEq{"id": 3}}, col)
	if err != nil || tag.RowsAffected() != 2 {
		t.Fatalf("Update of 3 rows, 1 fenced higher: %v, %v; want 2 rows", tag, err)
	}
	// All rows refuse: the refusing row with a foreign lease is reported first.
	if _, err := fencecolumn.Update(ctx, pool, snap("refunds", 1), upd("x", 3), col); !errors.Is(err, fence.ErrForeignLease) {
		t.Fatal(err)
	}
	_, err = fencecolumn.Update(ctx, pool, snap("billing", 3), fencecolumn.UpdateRows{Table: "billing.invoices", Set: map[string]any{"status": "x"}}, col)
	wantStale(t, err, 3, 5)
}

func TestUpdateAliasAndFrom(t *testing.T) {
	t.Parallel()
	pool := newInvoices(t)
	ctx := ctxT(t)
	// UPDATE … AS i … FROM another table: fence columns are qualified by
	// the alias, so the other table's columns don't clash.
	b := fencecolumn.UpdateRows{
		Table: "billing.invoices AS i",
		Set:   map[string]any{"status": "run", "total": sq.Expr("total + ? -- one more run", 1)},
		From:  "billing.runs r -- the month's run",
		Where: sq.And{sq.Expr("r.invoice = i.id"), sq.Eq{"r.month": "2026-11"}},
	}
	tag, err := fencecolumn.Update(ctx, pool, snap("billing", 8), b, col)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("Update with alias and FROM: %v, %v", tag, err)
	}
	if s, m := status(t, pool, 2); s != "run" || m.Token != 8 {
		t.Fatalf("row 2 = %q %v", s, m)
	}
	_, err = fencecolumn.Update(ctx, pool, snap("billing", 7), b, col)
	wantStale(t, err, 7, 8)
	if !strings.Contains(err.Error(), `"billing.invoices (id)=(2)"`) {
		t.Fatalf("error does not name the row: %v", err)
	}
}

func TestUpdateInTransaction(t *testing.T) {
	t.Parallel()
	pool := newInvoices(t)
	ctx := ctxT(t)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := fencecolumn.Update(ctx, tx, snap("billing", 2), fencecolumn.UpdateRows{Table: "billing.invoices", Set: map[string]any{"total": 10}, Where: sq.Eq{"id": 1}}, col); err != nil {
			return err
		}
		_, err := fencecolumn.Update(ctx, tx, snap("billing", 1), fencecolumn.UpdateRows{Table: "billing.invoices", Set: map[string]any{"total": sq.Expr("total + ?", 20)}, Where: sq.Eq{"id": 1}}, col)
		return err
	})
	wantStale(t, err, 1, 2)
	if _, m := status(t, pool, 1); !m.IsZero() {
		t.Fatalf("rolled back transaction left fence %v", m)
	}
}

func TestUpsert(t *testing.T) {
	t.Parallel()
	pool := newInvoices(t)
	ctx := ctxT(t)
	ins := func(id int, s string) fencecolumn.UpsertRow {
		return fencecolumn.UpsertRow{Table: "billing.invoices", Values: map[string]any{"id": id, "status": s}, Conflict: []string{"id"}}
	}
	// A new row is inserted with its fence.
	tag, err := fencecolumn.Upsert(ctx, pool, snap("billing", 3), ins(10, "new"), col)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("Upsert of a new row: %v, %v", tag, err)
	}
	// An existing unfenced row is overwritten and fenced.
	if _, err := fencecolumn.Upsert(ctx, pool, snap("billing", 3), ins(1, "upserted"), col); err != nil {
		t.Fatal(err)
	}
	if s, m := status(t, pool, 1); s != "upserted" || m.Token != 3 {
		t.Fatalf("row 1 = %q %v", s, m)
	}
	// Stale and foreign upserts write nothing.
	_, err = fencecolumn.Upsert(ctx, pool, snap("billing", 2), ins(10, "stale"), col)
	wantStale(t, err, 2, 3)
	if !strings.Contains(err.Error(), "billing.invoices (id)=(10)") {
		t.Fatalf("error does not name the row: %v", err)
	}
	if _, err := fencecolumn.Upsert(ctx, pool, snap("other", 9), ins(10, "foreign"), col); !errors.Is(err, fence.ErrForeignLease) {
		t.Fatal(err)
	}
	if s, _ := status(t, pool, 10); s != "new" {
		t.Fatalf("row 10 = %q after refused upserts", s)
	}
	// An alias of the caller's own is kept.
	// An alias of the caller's own is kept; values may be expressions.
	aliased := fencecolumn.UpsertRow{Table: "billing.invoices AS inv", Values: map[string]any{"id": 10, "status": "aliased", "total": sq.Expr("? * 2", 21)}, Conflict: []string{"id"}}
	if _, err := fencecolumn.Upsert(ctx, pool, snap("billing", 4), aliased, col); err != nil {
		t.Fatal(err)
	}
	var total int
	if err := pool.QueryRow(ctx, `SELECT total FROM billing.invoices WHERE id = 10`).Scan(&total); err != nil || total != 42 {
		t.Fatalf("total = %d, %v; want 42", total, err)
	}
	if _, err := fencecolumn.Upsert(ctx, pool, snap("billing", 3), aliased, col); !errors.Is(err, fence.ErrStale) {
		t.Fatal(err)
	}
}

func TestColumnInvalid(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	var db fencecolumn.Querier = (*pgxpool.Pool)(nil)
	set := map[string]any{"a": 1}
	upd := fencecolumn.UpdateRows{Table: "t", Set: set}
	row := func(table string, values map[string]any, conflict ...string) fencecolumn.UpsertRow {
		return fencecolumn.UpsertRow{Table: table, Values: values, Conflict: conflict}
	}
	ins := row("t", map[string]any{"id": 1, "a": 2}, "id")
	for name, err := range map[string]error{
		"column case":       second(fencecolumn.Update(ctx, db, snap("k", 1), upd, fencecolumn.Column{Token: "Fence", Key: "k"})),
		"column quote":      second(fencecolumn.Update(ctx, db, snap("k", 1), upd, fencecolumn.Column{Token: `a"b`, Key: "k"})),
		"same columns":      second(fencecolumn.Update(ctx, db, snap("k", 1), upd, fencecolumn.Column{Token: "f", Key: "f"})),
		"huge token":        second(fencecolumn.Update(ctx, db, snap("k", 1<<63), upd, col)),
		"bad table":         second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "a b c d", Set: set}, col)),
		"table injection":   second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "t; DROP TABLE t", Set: set}, col)),
		"quoted table":      second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: `"T"`, Set: set}, col)),
		"three-part table":  second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "a.b.c", Set: set}, col)),
		"no set":            second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "t"}, col)),
		"set column":        second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "t", Set: map[string]any{"a = 1, b": 2}}, col)),
		"sets fence token":  second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "t", Set: map[string]any{"fence_token": 0}}, col)),
		"sets fence key":    second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "t", Set: map[string]any{"fence_key": nil}}, col)),
		"empty where":       second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "t", Set: set, Where: sq.Expr(" ")}, col)),
		"where error":       second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "t", Set: set, Where: failing{}}, col)),
		"where escapes":     second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "t", Set: set, Where: sq.Expr("id = ?) OR (TRUE", 1)}, col)),
		"set escapes":       second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "t", Set: map[string]any{"a": sq.Expr("1 WHERE TRUE OR (")}}, col)),
		"set error":         second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "t", Set: map[string]any{"a": failing{}}}, col)),
		"from escapes":      second(fencecolumn.Update(ctx, db, snap("k", 1), fencecolumn.UpdateRows{Table: "t", Set: set, From: "r WHERE TRUE OR ("}, col)),
		"value escapes":     second(fencecolumn.Upsert(ctx, db, snap("k", 1), row("t", map[string]any{"id": 1, "a": sq.Expr("1) ON CONFLICT DO NOTHING --")}, "id"), col)),
		"no conflict":       second(fencecolumn.Upsert(ctx, db, snap("k", 1), row("t", map[string]any{"id": 1}), col)),
		"conflict col":      second(fencecolumn.Upsert(ctx, db, snap("k", 1), row("t", map[string]any{"id": 1}, "nope"), col)),
		"conflict repeated": second(fencecolumn.Upsert(ctx, db, snap("k", 1), row("t", map[string]any{"id": 1}, "id", "id"), col)),
		"conflict expr":     second(fencecolumn.Upsert(ctx, db, snap("k", 1), row("t", map[string]any{"id": sq.Expr("nextval('s')")}, "id"), col)),
		"no values":         second(fencecolumn.Upsert(ctx, db, snap("k", 1), row("t", nil, "id"), col)),
		"sets fence":        second(fencecolumn.Upsert(ctx, db, snap("k", 1), row("t", map[string]any{"id": 1, "fence_key": "x"}, "id"), col)),
		"value column":      second(fencecolumn.Upsert(ctx, db, snap("k", 1), row("t", map[string]any{"id": 1, "a) --": 2}, "id"), col)),
		"upsert table":      second(fencecolumn.Upsert(ctx, db, snap("k", 1), row("t (id) VALUES (1); --", map[string]any{"id": 1}, "id"), col)),
		"nil db":            second(fencecolumn.Update(ctx, nil, snap("k", 1), upd, col)),
		"nil db upsert":     second(fencecolumn.Upsert(ctx, nil, snap("k", 1), ins, col)),
	} {
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// failing is a predicate that cannot be rendered.
type failing struct{}

//lint:ignore ST1003 squirrel's interface names it ToSql
func (failing) ToSql() (string, []any, error) { return "", nil, errors.New("cannot render") }

// TestColumnKeyWithoutToken: a row whose fence key was set by hand with no
// token fences like Mark{Key, 0}: it admits any token of that lease and
// refuses another lease, in the statement and in the explanation alike.
func TestColumnKeyWithoutToken(t *testing.T) {
	t.Parallel()
	pool := newInvoices(t)
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `UPDATE billing.invoices SET fence_key = 'billing', fence_token = NULL WHERE id IN (1, 2)`); err != nil {
		t.Fatal(err)
	}
	tag, err := fencecolumn.Update(ctx, pool, snap("billing", 2), fencecolumn.UpdateRows{Table: "billing.invoices", Set: map[string]any{"status": "paid"}, Where: sq.Eq{"id": 1}}, col)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("Update of a row with a key and no token = %v, %v; want 1 row written", tag, err)
	}
	tag, err = fencecolumn.Upsert(ctx, pool, snap("billing", 2), fencecolumn.UpsertRow{Table: "billing.invoices", Values: map[string]any{"id": 2, "status": "upserted"}, Conflict: []string{"id"}}, col)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("Upsert of a row with a key and no token = %v, %v; want 1 row written", tag, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE billing.invoices SET fence_token = NULL WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	_, err = fencecolumn.Update(ctx, pool, snap("refunds", 9), fencecolumn.UpdateRows{Table: "billing.invoices", Set: map[string]any{"status": "void"}, Where: sq.Eq{"id": 1}}, col)
	if !errors.Is(err, fence.ErrForeignLease) {
		t.Fatalf("Update under another lease = %v, want ErrForeignLease", err)
	}
	if s, _ := status(t, pool, 1); s != "paid" {
		t.Fatalf("row 1 = %q, want paid", s)
	}
}

// TestUpdateOrInWhere: a WHERE clause with a top-level OR must not escape
// the fence (issue 13, break 1: the fence's condition was joined to it with
// a bare AND, so a token 100 overwrote a row written by token 200 and
// lowered its fence, with no error).
func TestUpdateOrInWhere(t *testing.T) {
	t.Parallel()
	pool := newInvoices(t)
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `ALTER TABLE billing.invoices ADD COLUMN legacy_id int; UPDATE billing.invoices SET legacy_id = id + 100`); err != nil {
		t.Fatal(err)
	}
	b := func(s string) fencecolumn.UpdateRows {
		return fencecolumn.UpdateRows{Table: "billing.invoices", Set: map[string]any{"status": s}, Where: sq.Expr("id = ? OR legacy_id = ?", 1, 101)}
	}
	if _, err := fencecolumn.Update(ctx, pool, snap("billing", 200), b("paid"), col); err != nil {
		t.Fatal(err)
	}
	tag, err := fencecolumn.Update(ctx, pool, snap("billing", 100), b("void"), col)
	s, m := status(t, pool, 1)
	t.Logf("stale Update: tag %v, err %v; row 1 now %q %+v", tag, err, s, m)
	if s != "paid" || m.Token != 200 || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a stale token got through: row 1 = %q %+v, err = %v", s, m, err)
	}
	if !strings.Contains(err.Error(), `"billing.invoices (id)=(1)"`) {
		t.Fatalf("error does not name the row: %v", err)
	}
}
