package fencepostgres_test

import (
	"errors"
	"testing"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
)

func TestTableMark(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	table, err := fencepostgres.NewTable(fencepostgres.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := table.Mark(ctx, pool, "reports/q3"); err != nil || !m.IsZero() {
		t.Fatalf("Mark of an unfenced resource = %+v, %v; want the zero Mark", m, err)
	}
	if err := table.Claim(ctx, pool, snap("reports", 7), "reports/q3"); err != nil {
		t.Fatal(err)
	}
	want := fence.Mark{Key: "reports", Token: 7}
	if m, err := table.Mark(ctx, pool, "reports/q3"); err != nil || m != want {
		t.Fatalf("Mark after Claim = %+v, %v; want %+v", m, err, want)
	}
	if m := readMark(t, pool, "reports/q3"); m != want {
		t.Fatalf("the table's row = %+v, want %+v", m, want)
	}
	if _, err := table.Mark(ctx, pool, ""); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Mark of an empty resource = %v, want ErrInvalid", err)
	}
	other, err := fencepostgres.NewTable(fencepostgres.TableOptions{Table: "no_such_fences"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Mark(ctx, pool, "reports/q3"); err == nil {
		t.Fatal("Mark on a missing table succeeded")
	}
}
