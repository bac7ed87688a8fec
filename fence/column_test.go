package fence_test

import (
	"errors"
	"strings"
	"testing"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

var col = fence.Column{Token: "fence_token", Key: "fence_key"}

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
	upd := func(status string, id int) sq.UpdateBuilder {
		return sq.Update("billing.invoices").Set("status", status).Where(sq.Eq{"id": id})
	}
	tag, err := fence.Update(ctx, pool, snap("billing", 5), upd("paid", 1), col)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("first Update: %v, %v", tag, err)
	}
	if s, m := status(t, pool, 1); s != "paid" || m != (fence.Mark{Key: "billing", Token: 5}) {
		t.Fatalf("row 1 = %q %v", s, m)
	}

	// Zero rows because stale.
	tag, err = fence.Update(ctx, pool, snap("billing", 4), upd("void", 1), col)
	wantStale(t, err, 4, 5)
	if tag.RowsAffected() != 0 || !strings.Contains(err.Error(), "billing.invoices WHERE id = ?") {
		t.Fatalf("stale Update: %v, %v", tag, err)
	}
	// Zero rows because no row matched: no error.
	tag, err = fence.Update(ctx, pool, snap("billing", 4), upd("void", 99), col)
	if err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("Update of no row = %v, %v; want 0 rows, no error", tag, err)
	}
	// Zero rows because of another lease.
	_, err = fence.Update(ctx, pool, snap("refunds", 50), upd("void", 1), col)
	if !errors.Is(err, fence.ErrForeignLease) {
		t.Fatalf("foreign Update = %v", err)
	}
	if s, _ := status(t, pool, 1); s != "paid" {
		t.Fatalf("row 1 = %q after refused writes", s)
	}

	// Several rows: those whose fence admits the token are written.
	tag, err = fence.Update(ctx, pool, snap("billing", 4), sq.Update("billing.invoices").Set("status", "sent").Where(sq.LtOrEq{"id": 3}), col)
	if err != nil || tag.RowsAffected() != 2 {
		t.Fatalf("Update of 3 rows, 1 fenced higher: %v, %v; want 2 rows", tag, err)
	}
	// All rows refuse: the refusing row with a foreign lease is reported first.
	if _, err := fence.Update(ctx, pool, snap("refunds", 1), upd("x", 3), col); !errors.Is(err, fence.ErrForeignLease) {
		t.Fatal(err)
	}
	_, err = fence.Update(ctx, pool, snap("billing", 3), sq.Update("billing.invoices").Set("status", "x"), col)
	wantStale(t, err, 3, 5)
}

func TestUpdateAliasAndFrom(t *testing.T) {
	t.Parallel()
	pool := newInvoices(t)
	ctx := ctxT(t)
	// UPDATE … AS i … FROM another table: fence columns are qualified by
	// the alias, so the other table's columns don't clash.
	b := sq.Update("billing.invoices AS i").
		Set("status", "run").
		From("billing.runs r").
		Where("r.invoice = i.id").
		Where(sq.Eq{"r.month": "2026-11"})
	tag, err := fence.Update(ctx, pool, snap("billing", 8), b, col)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("Update with alias and FROM: %v, %v", tag, err)
	}
	if s, m := status(t, pool, 2); s != "run" || m.Token != 8 {
		t.Fatalf("row 2 = %q %v", s, m)
	}
	_, err = fence.Update(ctx, pool, snap("billing", 7), b, col)
	wantStale(t, err, 7, 8)
}

func TestUpdateInTransaction(t *testing.T) {
	t.Parallel()
	pool := newInvoices(t)
	ctx := ctxT(t)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := fence.Update(ctx, tx, snap("billing", 2), sq.Update("billing.invoices").Set("total", 10).Where(sq.Eq{"id": 1}), col); err != nil {
			return err
		}
		_, err := fence.Update(ctx, tx, snap("billing", 1), sq.Update("billing.invoices").Set("total", 20).Where(sq.Eq{"id": 1}), col)
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
	ins := func(id int, s string) sq.InsertBuilder {
		return sq.Insert("billing.invoices").Columns("id", "status").Values(id, s)
	}
	// A new row is inserted with its fence.
	tag, err := fence.Upsert(ctx, pool, snap("billing", 3), ins(10, "new"), col, "id")
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("Upsert of a new row: %v, %v", tag, err)
	}
	// An existing unfenced row is overwritten and fenced.
	if _, err := fence.Upsert(ctx, pool, snap("billing", 3), ins(1, "upserted"), col, "id"); err != nil {
		t.Fatal(err)
	}
	if s, m := status(t, pool, 1); s != "upserted" || m.Token != 3 {
		t.Fatalf("row 1 = %q %v", s, m)
	}
	// Stale and foreign upserts write nothing.
	_, err = fence.Upsert(ctx, pool, snap("billing", 2), ins(10, "stale"), col, "id")
	wantStale(t, err, 2, 3)
	if !strings.Contains(err.Error(), "billing.invoices (id)=(10)") {
		t.Fatalf("error does not name the row: %v", err)
	}
	if _, err := fence.Upsert(ctx, pool, snap("other", 9), ins(10, "foreign"), col, "id"); !errors.Is(err, fence.ErrForeignLease) {
		t.Fatal(err)
	}
	if s, _ := status(t, pool, 10); s != "new" {
		t.Fatalf("row 10 = %q after refused upserts", s)
	}
	// An alias of the caller's own is kept.
	aliased := sq.Insert("billing.invoices AS inv").Columns("id", "status").Values(10, "aliased")
	if _, err := fence.Upsert(ctx, pool, snap("billing", 4), aliased, col, "id"); err != nil {
		t.Fatal(err)
	}
	if _, err := fence.Upsert(ctx, pool, snap("billing", 3), aliased, col, "id"); !errors.Is(err, fence.ErrStale) {
		t.Fatal(err)
	}
}

func TestColumnInvalid(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	var db fence.Querier = (*pgxpool.Pool)(nil)
	upd := sq.Update("t").Set("a", 1)
	ins := sq.Insert("t").Columns("id", "a").Values(1, 2)
	for name, err := range map[string]error{
		"column case":  second(fence.Update(ctx, db, snap("k", 1), upd, fence.Column{Token: "Fence", Key: "k"})),
		"column quote": second(fence.Update(ctx, db, snap("k", 1), upd, fence.Column{Token: `a"b`, Key: "k"})),
		"same columns": second(fence.Update(ctx, db, snap("k", 1), upd, fence.Column{Token: "f", Key: "f"})),
		"huge token":   second(fence.Update(ctx, db, snap("k", 1<<63), upd, col)),
		"bad table":    second(fence.Update(ctx, db, snap("k", 1), sq.Update("a b c d").Set("a", 1), col)),
		"no conflict":  second(fence.Upsert(ctx, db, snap("k", 1), ins, col)),
		"conflict col": second(fence.Upsert(ctx, db, snap("k", 1), ins, col, "nope")),
		"two rows":     second(fence.Upsert(ctx, db, snap("k", 1), ins.Values(2, 3), col, "id")),
		"suffix":       second(fence.Upsert(ctx, db, snap("k", 1), ins.Suffix("RETURNING id"), col, "id")),
		"sets fence":   second(fence.Upsert(ctx, db, snap("k", 1), sq.Insert("t").Columns("id", "fence_key").Values(1, "x"), col, "id")),
		"select":       second(fence.Upsert(ctx, db, snap("k", 1), sq.Insert("t").Columns("id").Select(sq.Select("1")), col, "id")),
		"nil db":       second(fence.Update(ctx, nil, snap("k", 1), upd, col)),
	} {
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

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
	tag, err := fence.Update(ctx, pool, snap("billing", 2), sq.Update("billing.invoices").Set("status", "paid").Where(sq.Eq{"id": 1}), col)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("Update of a row with a key and no token = %v, %v; want 1 row written", tag, err)
	}
	tag, err = fence.Upsert(ctx, pool, snap("billing", 2), sq.Insert("billing.invoices").Columns("id", "status").Values(2, "upserted"), col, "id")
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("Upsert of a row with a key and no token = %v, %v; want 1 row written", tag, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE billing.invoices SET fence_token = NULL WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	_, err = fence.Update(ctx, pool, snap("refunds", 9), sq.Update("billing.invoices").Set("status", "void").Where(sq.Eq{"id": 1}), col)
	if !errors.Is(err, fence.ErrForeignLease) {
		t.Fatalf("Update under another lease = %v, want ErrForeignLease", err)
	}
	if s, _ := status(t, pool, 1); s != "paid" {
		t.Fatalf("row 1 = %q, want paid", s)
	}
}
