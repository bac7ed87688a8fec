package fencecolumn_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencecolumn"
	"github.com/golib/lease/lease"
)

// propRow is a row of the table the property writes: id, legacy_id (id +
// 100), grp (may be NULL), and its fence.
type propRow struct {
	id, legacy int
	grp        *int
	mark       fence.Mark
	fenced     bool // fence_key is not NULL
}

// pred is a random WHERE clause: the squirrel predicate Update receives,
// and how it reads in failure messages. What it selects is asked of
// PostgreSQL, with the predicate as the whole WHERE clause of a SELECT:
// squirrel's And and Or join their parts without parentheses of their own,
// so sq.And{a, sq.Expr("b OR c")} means (a AND b) OR c, and only the
// database knows for sure what a predicate means.
type pred struct {
	sql  sq.Sqlizer
	text string
}

// leafPred draws a predicate without parts. A -- comment only ends a
// predicate at the top: inside squirrel's own Or, And or an Expr of ours
// it would swallow their closing parenthesis, a syntax error that writes
// nothing.
func leafPred(t *rapid.T, top bool) pred {
	id := rapid.IntRange(1, 6).Draw(t, "id")
	g := rapid.IntRange(0, 2).Draw(t, "grp")
	switch rapid.IntRange(0, 11).Draw(t, "leaf") {
	case 0:
		return pred{sq.Eq{"id": id}, fmt.Sprint("Eq id ", id)}
	case 1:
		ids := []int{id, id + 2}
		return pred{sq.Eq{"id": ids}, fmt.Sprint("Eq id IN ", ids)}
	case 2: // the shape of issue 13: a raw string with a top-level OR
		l := rapid.IntRange(101, 106).Draw(t, "legacy")
		return pred{sq.Expr("id = ? OR legacy_id = ?", id, l), fmt.Sprintf("Expr id = %d OR legacy_id = %d", id, l)}
	case 3:
		return pred{sq.Expr("grp = ?", g), fmt.Sprint("Expr grp = ", g)}
	case 4:
		return pred{sq.NotEq{"grp": g}, fmt.Sprint("NotEq grp ", g)}
	case 5:
		return pred{sq.Lt{"id": id}, fmt.Sprint("Lt id ", id)}
	case 6:
		return pred{sq.Expr("TRUE"), "TRUE"}
	case 7:
		return pred{sq.Expr("FALSE OR TRUE"), "FALSE OR TRUE"}
	case 8: // a trailing comment must not swallow the fence
		c := "/* note */"
		if top {
			c = "-- note"
		}
		return pred{sq.Expr("id = ? "+c, id), fmt.Sprintf("Expr id = %d %s", id, c)}
	case 9:
		return pred{sq.Expr("grp IS NULL"), "grp IS NULL"}
	case 10: // OR over a NULL: NULL OR TRUE is TRUE
		return pred{sq.Expr("grp = ? OR id = ?", g, id), fmt.Sprintf("Expr grp = %d OR id = %d", g, id)}
	}
	return pred{sq.Expr("(id = ?) OR (id = ?) OR TRUE AND FALSE", id, id+1),
		fmt.Sprintf("Expr (id = %d) OR (id = %d) OR TRUE AND FALSE", id, id+1)}
}

func drawPred(t *rapid.T, depth int, top bool) pred {
	if depth == 0 || rapid.IntRange(0, 2).Draw(t, "leaf?") == 0 {
		return leafPred(t, top)
	}
	a := drawPred(t, depth-1, false)
	switch rapid.IntRange(0, 4).Draw(t, "combine") {
	case 0:
		b := drawPred(t, depth-1, false)
		return pred{sq.Or{a.sql, b.sql}, "Or{" + a.text + ", " + b.text + "}"}
	case 1:
		b := drawPred(t, depth-1, false)
		return pred{sq.And{a.sql, b.sql}, "And{" + a.text + ", " + b.text + "}"}
	case 2:
		return pred{sq.Expr("NOT (?)", a.sql), "NOT (" + a.text + ")"}
	case 3: // a raw OR around nested predicates, no parentheses of its own
		b := drawPred(t, depth-1, false)
		return pred{sq.Expr("? OR ?", a.sql, b.sql), a.text + " OR " + b.text}
	}
	return pred{sq.Expr("((?))", a.sql), "((" + a.text + "))"}
}

// TestUpdateAnyWhereShape: whatever the shape of the WHERE clause, Update
// writes exactly the rows it selects whose fence admits the token, writes
// no row whose fence refuses it, never lowers a fence, and when it writes
// nothing says why as the model does. Upserts are mixed in. Against a real
// PostgreSQL.
func TestUpdateAnyWhereShape(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE props (id int PRIMARY KEY, legacy_id int NOT NULL, grp int, status text NOT NULL, fence_key text, fence_token bigint)`); err != nil {
		t.Fatal(err)
	}
	var writes, refusals int
	rapid.Check(t, func(rt *rapid.T) {
		if _, err := pool.Exec(ctx, `TRUNCATE props`); err != nil {
			rt.Fatal(err)
		}
		rows := make([]propRow, 6)
		for i := range rows {
			r := propRow{id: i + 1, legacy: i + 101}
			if g := rapid.IntRange(-1, 2).Draw(rt, "grp"); g >= 0 {
				r.grp = &g
			}
			if rapid.Bool().Draw(rt, "fenced") {
				r.fenced = true
				r.mark = fence.Mark{Key: rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "key"), Token: lease.Token(rapid.IntRange(0, 8).Draw(rt, "token"))}
			}
			var key *string
			var tok *int64
			if r.fenced {
				key = &r.mark.Key
				if r.mark.Token > 0 {
					v := int64(r.mark.Token)
					tok = &v
				}
			}
			if _, err := pool.Exec(ctx, `INSERT INTO props VALUES ($1, $2, $3, 'initial', $4, $5)`, r.id, r.legacy, r.grp, key, tok); err != nil {
				rt.Fatal(err)
			}
			rows[i] = r
		}
		for step := range rapid.IntRange(1, 8).Draw(rt, "steps") {
			s := snap(rapid.SampledFrom([]string{"a", "a", "b"}).Draw(rt, "snap key"), lease.Token(rapid.IntRange(1, 10).Draw(rt, "snap token")))
			status := fmt.Sprint("step ", step)
			var selected []int
			var tag int64
			var err error
			var what string
			if rapid.IntRange(0, 3).Draw(rt, "upsert?") == 0 {
				id := rapid.IntRange(1, 6).Draw(rt, "upsert id")
				what = fmt.Sprintf("Upsert id %d under %v", id, s)
				selected = []int{id - 1}
				ct, uerr := fencecolumn.Upsert(ctx, pool, s, fencecolumn.UpsertRow{Table: "props", Values: map[string]any{"id": id, "legacy_id": id + 100, "grp": rows[id-1].grp, "status": status}, Conflict: []string{"id"}}, col)
				tag, err = ct.RowsAffected(), uerr
			} else {
				p := drawPred(rt, 3, true)
				what = fmt.Sprintf("Update WHERE %s under %v", p.text, s)
				sel, args, serr := sq.Select("id").From("props").Where(p.sql).PlaceholderFormat(sq.Dollar).ToSql()
				if serr != nil {
					rt.Fatal(serr)
				}
				ids, serr := pool.Query(ctx, sel, args...)
				if serr != nil {
					rt.Fatalf("%s: %v", what, serr)
				}
				found, serr := pgx.CollectRows(ids, pgx.RowTo[int])
				if serr != nil {
					rt.Fatalf("%s: %v", what, serr)
				}
				for _, id := range slices.Sorted(slices.Values(found)) {
					selected = append(selected, id-1)
				}
				ct, uerr := fencecolumn.Update(ctx, pool, s, fencecolumn.UpdateRows{Table: "props", Set: map[string]any{"status": status}, Where: p.sql}, col)
				tag, err = ct.RowsAffected(), uerr
			}
			// The model: selected rows whose fence admits s are written.
			var written []int
			var refused *propRow
			for _, i := range selected {
				m := rows[i].mark
				if !rows[i].fenced {
					m = fence.Mark{}
				} else if m.Key == "" {
					m.Key = "?" // unreachable: fenced rows have a key
				}
				if _, aerr := m.Admit("r", s); aerr == nil {
					written = append(written, i)
					continue
				}
				// The refusal Update reports: a foreign lease first, then
				// the highest token.
				r := rows[i]
				if refused == nil || (refused.mark.Key == s.Key && r.mark.Key != s.Key) ||
					(refused.mark.Key == s.Key) == (r.mark.Key == s.Key) && r.mark.Token > refused.mark.Token {
					refused = &rows[i]
				}
			}
			for _, i := range written {
				rows[i].fenced, rows[i].mark = true, fence.Mark{Key: s.Key, Token: s.Token}
			}
			switch {
			case err != nil && len(written) > 0:
				rt.Fatalf("%s: %v; want %d rows written", what, err, len(written))
			case tag != int64(len(written)):
				rt.Fatalf("%s: %d rows written; the model writes rows %v", what, tag, written)
			case len(written) == 0 && refused == nil && err != nil:
				rt.Fatalf("%s: %v; no row matched, want no error", what, err)
			case len(written) == 0 && refused != nil && refused.mark.Key != s.Key:
				var fe *fence.ForeignLeaseError
				if !errors.As(err, &fe) || fe.FencedBy != refused.mark.Key || fe.Current != refused.mark.Token || !names(rows, fe.Resource, refused.mark) {
					rt.Fatalf("%s: %v; want a ForeignLeaseError for a row fenced by %v, like row %d", what, err, refused.mark, refused.id)
				}
			case len(written) == 0 && refused != nil:
				var se *fence.StaleError
				if !errors.As(err, &se) || se.Current != refused.mark.Token || !names(rows, se.Resource, refused.mark) {
					rt.Fatalf("%s: %v; want a StaleError at token %d for a row like row %d", what, err, refused.mark.Token, refused.id)
				}
			}
			if len(written) > 0 {
				writes++
			} else if refused != nil {
				refusals++
			}
			// The table: every fence as the model says (so none went down
			// and no refused write moved one), and exactly the written rows
			// carry this step's status.
			got, err := pool.Query(ctx, `SELECT id, status, fence_key, fence_token FROM props ORDER BY id`)
			if err != nil {
				rt.Fatal(err)
			}
			i := 0
			for got.Next() {
				var (
					id  int
					st  string
					key *string
					tok *int64
				)
				if err := got.Scan(&id, &st, &key, &tok); err != nil {
					rt.Fatal(err)
				}
				r := rows[i]
				i++
				if (key != nil) != r.fenced || key != nil && *key != r.mark.Key || (tok == nil && r.mark.Token != 0) || tok != nil && lease.Token(*tok) != r.mark.Token {
					rt.Fatalf("%s: row %d fenced by %v %v; the model says %v (fenced %v)", what, id, deref(key), deref(tok), r.mark, r.fenced)
				}
				if (st == status) != slices.Contains(written, id-1) {
					rt.Fatalf("%s: row %d has status %q; the model writes rows %v", what, id, st, written)
				}
			}
			got.Close()
			if err := got.Err(); err != nil {
				rt.Fatal(err)
			}
		}
	})
	t.Logf("%d steps wrote rows, %d were refused", writes, refusals)
	if writes == 0 || refusals == 0 {
		t.Fatalf("%d writes, %d refusals: the property does not exercise both", writes, refusals)
	}
}

// names reports whether resource names a row of rows by its primary key,
// "props (id)=(n)", and that row's fence is m.
func names(rows []propRow, resource string, m fence.Mark) bool {
	for _, r := range rows {
		if resource == fmt.Sprintf("props (id)=(%d)", r.id) {
			return r.mark == m
		}
	}
	return false
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
