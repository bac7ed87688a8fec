package fencecolumn_test

import (
	"context"
	"strings"
	"testing"

	"github.com/golib/lease/fence/fencecolumn"
	"github.com/jackc/pgx/v5"
)

// predicateSeeds are predicates that a parenthesis, quote or comment could
// carry past the parentheses Update puts around them, and harmless ones
// that only look so.
var predicateSeeds = map[string]bool{ // text: accepted
	"id = ?":                               true,
	"id = ? OR legacy_id = ?":              true,
	"(a) OR ((b))":                         true,
	"')' = ')' OR TRUE":                    true,
	"'it''s' = 'x' OR TRUE":                true,
	`E'\')' = '' OR TRUE`:                  true,
	`e'\\' = '\' OR TRUE`:                  true,
	"$$)$$ = $$)$$ OR TRUE":                true,
	"$a$ ) $a$ = '' OR TRUE":               true,
	"$1 = 1 OR TRUE":                       true,
	`"odd)name" IS NULL OR TRUE`:           true,
	`"a""b)" IS NULL OR TRUE`:              true,
	"/* ) */ TRUE OR TRUE":                 true,
	"/* /* ) */ still ( a comment */ TRUE": true,
	"TRUE -- )":                            true,
	"TRUE -- ) OR (TRUE\n":                 true,
	"TRUE) OR (TRUE":                       false,
	"TRUE)":                                false,
	"(TRUE":                                false,
	"TRUE; DELETE FROM t":                  false,
	"'unterminated":                        false,
	`E'\' ) OR (TRUE`:                      false,
	`"unterminated`:                        false,
	"/* unterminated":                      false,
	"/* /* */ still open":                  false,
	"$$ unterminated":                      false,
	"$a$ ) OR (TRUE $b$":                   false,
}

func TestCheckPredicate(t *testing.T) {
	t.Parallel()
	for text, ok := range predicateSeeds {
		if err := fencecolumn.CheckPredicate(text); (err == nil) != ok {
			t.Errorf("CheckPredicate(%q) = %v; want accepted %v", text, err, ok)
		}
	}
}

// FuzzPredicateIsOneUnit: a predicate CheckPredicate accepts stays one
// unit inside parentheses, as PostgreSQL parses it: "WHERE (p) AND FALSE"
// selects nothing, whatever p is. Against a real PostgreSQL, read-only, with
// a short statement timeout.
func FuzzPredicateIsOneUnit(f *testing.F) {
	for text := range predicateSeeds {
		f.Add(text)
	}
	pool := newPool(f)
	f.Fuzz(func(t *testing.T, p string) {
		if fencecolumn.CheckPredicate(p) != nil || strings.ContainsRune(p, 0) {
			return
		}
		ctx := ctxT(t)
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '1s'`); err != nil {
				return err
			}
			rows, err := tx.Query(context.WithoutCancel(ctx), "SELECT 1 FROM (VALUES (1), (NULL)) AS t (id) WHERE (\n"+p+"\n) AND FALSE", pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				return err
			}
			n := 0
			for rows.Next() {
				n++
			}
			rows.Close()
			if n > 0 {
				t.Fatalf("WHERE (%q) AND FALSE selected %d rows", p, n)
			}
			return rows.Err()
		})
		// Most random text does not parse, or fails (a missing column, a
		// parameter without a value): that writes nothing either.
		_ = err
	})
}
