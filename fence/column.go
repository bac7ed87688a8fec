package fence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lann/builder"

	"github.com/golib/lease/lease"
)

// Column names the fence columns of a table of your own, for fencing each
// row as its own resource with Update and Upsert:
//
//	ALTER TABLE invoices ADD COLUMN fence_key text, ADD COLUMN fence_token bigint;
//
// A row whose Key column is NULL is not fenced yet and admits any token;
// Update and Upsert set both columns on every row they write. Never lower
// them or set them by hand, and keep deleted rows (or fence them in the
// fences table with Tx): a row deleted and inserted again forgets its
// fence.
type Column struct {
	// Token names the bigint column that holds the highest token the row
	// has accepted. Required.
	Token string
	// Key names the text column that holds the lease key the row is fenced
	// by, so that a token of another lease is refused whatever its number.
	// Required.
	Key string
}

// Querier runs statements: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// identifier is what Column and conflict column names may be: unquoted
// PostgreSQL identifiers, used as written.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_$]{0,62}$`)

func (c Column) check() error {
	for _, f := range []struct{ field, name string }{{"Token", c.Token}, {"Key", c.Key}} {
		if !identifier.MatchString(f.name) {
			return invalid("Column.%s %q is not a lower-case unquoted identifier", f.field, f.name)
		}
	}
	if c.Token == c.Key {
		return invalid("Column.Token and Column.Key are both %q", c.Key)
	}
	return nil
}

// checkColumnWrite validates a column write before any I/O.
func checkColumnWrite(db Querier, snap lease.Snapshot, col Column) error {
	if db == nil {
		return invalid("nil database")
	}
	if err := validSnapshot(snap); err != nil {
		return err
	}
	if snap.Token > math.MaxInt64 {
		return invalid("token %d of lease %q does not fit a PostgreSQL bigint (largest 2^63−1)", snap.Token, snap.Key)
	}
	return col.check()
}

// tableRef splits "name", "name alias" or "name AS alias" and returns the
// name and how columns of the row are qualified (the alias if any).
func tableRef(ref string) (name, qualifier string, err error) {
	f := strings.Fields(ref)
	switch {
	case len(f) == 1:
		return f[0], f[0], nil
	case len(f) == 2 && !strings.EqualFold(f[1], "AS"):
		return f[0], f[1], nil
	case len(f) == 3 && strings.EqualFold(f[1], "AS"):
		return f[0], f[2], nil
	}
	return "", "", invalid("table %q is not \"name\", \"name alias\" or \"name AS alias\"", ref)
}

// admits is the rule on a row's fence columns, qualified by q, against the
// values $key and $token (placeholders, in that order). A NULL token counts
// as 0, as in Mark: without COALESCE the comparison would be NULL, and the
// row would refuse every write while Mark.Admit, asked why, says it admits.
func admits(q string, col Column) string {
	return fmt.Sprintf("(%[1]s.%[2]s IS NULL OR (%[1]s.%[2]s = ? AND COALESCE(%[1]s.%[3]s, 0) <= ?))", q, col.Key, col.Token)
}

// Update runs the UPDATE b on db with the fence of every row it matches:
// it sets col.Token and col.Key to snap's token and lease key, and adds to
// the WHERE clause the rule (see Mark.Admit) on the row's fence columns, so
// the check and the write are one statement. Placeholders are rewritten to
// $n.
//
// Each row is its own resource. Rows whose fence refuses snap are left
// alone; the others are written. When no row is written, Update tells why
// with one more query: if rows match b's WHERE clause but their fence
// refuses snap, it returns a *StaleError or a *ForeignLeaseError (naming
// the refusing row with the highest token, a foreign lease first);
// otherwise no row matched and it returns the zero-row tag and no error.
// When rows are written, rows refused alongside them go unreported: use
// Tx with the fences table for all-or-nothing writes over many resources.
//
// b's table may have an alias ("invoices AS i"); b may use FROM. A
// serialization failure or deadlock is returned as a *ConflictError.
func Update(ctx context.Context, db Querier, snap lease.Snapshot, b sq.UpdateBuilder, col Column) (pgconn.CommandTag, error) {
	if err := checkColumnWrite(db, snap, col); err != nil {
		return pgconn.CommandTag{}, err
	}
	ref, _ := builder.Get(b, "Table")
	table, q, err := tableRef(fmt.Sprint(ref))
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	where, _ := builder.Get(b, "WhereParts")
	parts, _ := where.([]sq.Sqlizer)
	resource := table
	if len(parts) > 0 {
		texts := make([]string, len(parts))
		for i, p := range parts {
			if texts[i], _, err = p.ToSql(); err != nil {
				return pgconn.CommandTag{}, invalid("WHERE clause of %s: %v", table, err)
			}
		}
		resource = table + " WHERE " + strings.Join(texts, " AND ")
	}
	token := int64(snap.Token)
	sql, args, err := b.
		Set(col.Token, token).
		Set(col.Key, snap.Key).
		Where(admits(q, col), snap.Key, token).
		PlaceholderFormat(sq.Dollar).
		ToSql()
	if err != nil {
		return pgconn.CommandTag{}, invalid("%s: %v", resource, err)
	}
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return tag, columnError(resource, err)
	}
	if tag.RowsAffected() > 0 {
		return tag, nil
	}

	// Nothing written: find a matching row that refused snap, if any.
	why := sq.Select(q+"."+col.Key, q+"."+col.Token).From(fmt.Sprint(ref))
	if from, ok := builder.Get(b, "From"); ok && from != nil {
		why = why.JoinClause(sq.ConcatExpr(", ", from))
	}
	for _, p := range parts {
		why = why.Where(p)
	}
	sql, args, err = why.
		Where("NOT "+admits(q, col), snap.Key, token).
		OrderByClause(fmt.Sprintf("(%s.%s = ?), %s.%s DESC", q, col.Key, q, col.Token), snap.Key).
		Limit(1).
		PlaceholderFormat(sq.Dollar).
		ToSql()
	if err != nil {
		return tag, invalid("%s: %v", resource, err)
	}
	return tag, refusal(ctx, db, resource, snap, sql, args, false)
}

// Upsert runs the INSERT b on db as a fenced upsert of one row: it adds
// col.Token and col.Key with snap's token and lease key, and
//
//	ON CONFLICT (conflict…) DO UPDATE SET every inserted column = EXCLUDED.column
//	WHERE the existing row's fence admits EXCLUDED's token and key
//
// so a new row is inserted with its fence, and an existing row is
// overwritten only if its fence admits snap (see Mark.Admit). conflict
// names the columns of a unique index (the row's identity); they must be
// among b's columns. b must insert exactly one row with Values, without a
// suffix of its own. Placeholders are rewritten to $n.
//
// If the existing row's fence refuses snap, nothing is written and Upsert
// returns a *StaleError or a *ForeignLeaseError. A serialization failure or
// deadlock, or a row deleted while the upsert ran, is returned as a
// *ConflictError.
func Upsert(ctx context.Context, db Querier, snap lease.Snapshot, b sq.InsertBuilder, col Column, conflict ...string) (pgconn.CommandTag, error) {
	if err := checkColumnWrite(db, snap, col); err != nil {
		return pgconn.CommandTag{}, err
	}
	into, _ := builder.Get(b, "Into")
	table, q, err := tableRef(fmt.Sprint(into))
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	cv, _ := builder.Get(b, "Columns")
	columns, _ := cv.([]string)
	vv, _ := builder.Get(b, "Values")
	values, _ := vv.([][]any)
	if sel, ok := builder.Get(b, "Select"); ok && sel != nil {
		return pgconn.CommandTag{}, invalid("Upsert into %s: needs Values, not Select", table)
	}
	if sfx, ok := builder.Get(b, "Suffixes"); ok && sfx != nil {
		return pgconn.CommandTag{}, invalid("Upsert into %s: the builder has a suffix; Upsert adds ON CONFLICT itself", table)
	}
	if kw, ok := builder.Get(b, "StatementKeyword"); ok && kw != "INSERT" {
		return pgconn.CommandTag{}, invalid("Upsert into %s: %v is not INSERT", table, kw)
	}
	if len(values) != 1 || len(values[0]) != len(columns) {
		return pgconn.CommandTag{}, invalid("Upsert into %s: needs one row with a value for each of its %d columns", table, len(columns))
	}
	if len(conflict) == 0 {
		return pgconn.CommandTag{}, invalid("Upsert into %s: no conflict columns", table)
	}
	row := values[0]
	var ident []string
	key := sq.And{}
	for _, c := range conflict {
		i := slices.Index(columns, c)
		if i < 0 || !identifier.MatchString(c) {
			return pgconn.CommandTag{}, invalid("Upsert into %s: conflict column %q is not an identifier among the inserted columns %q", table, c, columns)
		}
		ident = append(ident, fmt.Sprintf("%v", row[i]))
		key = append(key, sq.Expr(q+"."+c+" = ?", row[i]))
	}
	resource := fmt.Sprintf("%s (%s)=(%s)", table, strings.Join(conflict, ", "), strings.Join(ident, ", "))
	for _, c := range columns {
		if c == col.Token || c == col.Key {
			return pgconn.CommandTag{}, invalid("%s: the builder sets fence column %q itself", resource, c)
		}
	}

	token := int64(snap.Token)
	// ON CONFLICT needs a name for the existing row; a schema-qualified
	// table name won't do, so give the table an alias if it has none.
	alias, existing := "", q
	if q == table {
		alias, existing = " AS fenced_row", "fenced_row"
	}
	var set []string
	for _, c := range append(without(columns, conflict), col.Token, col.Key) {
		set = append(set, c+" = EXCLUDED."+c)
	}
	ins := sq.Insert(fmt.Sprint(into) + alias).
		Columns(append(slices.Clone(columns), col.Token, col.Key)...).
		Values(append(append([]any(nil), row...), token, snap.Key)...).
		Suffix(fmt.Sprintf("ON CONFLICT (%s) DO UPDATE SET %s WHERE %s.%s IS NULL OR (%s.%s = EXCLUDED.%s AND COALESCE(%s.%s, 0) <= EXCLUDED.%s)",
			strings.Join(conflict, ", "), strings.Join(set, ", "),
			existing, col.Key, existing, col.Key, col.Key, existing, col.Token, col.Token))
	if p, ok := builder.Get(b, "Prefixes"); ok && p != nil {
		for _, e := range p.([]sq.Sqlizer) {
			ins = ins.PrefixExpr(e)
		}
	}
	if o, ok := builder.Get(b, "Options"); ok && o != nil {
		ins = ins.Options(o.([]string)...)
	}
	sql, args, err := ins.PlaceholderFormat(sq.Dollar).ToSql()
	if err != nil {
		return pgconn.CommandTag{}, invalid("%s: %v", resource, err)
	}
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return tag, columnError(resource, err)
	}
	if tag.RowsAffected() > 0 {
		return tag, nil
	}
	sql, args, err = sq.Select(q+"."+col.Key, q+"."+col.Token).From(fmt.Sprint(into)).Where(key).PlaceholderFormat(sq.Dollar).ToSql()
	if err != nil {
		return tag, invalid("%s: %v", resource, err)
	}
	return tag, refusal(ctx, db, resource, snap, sql, args, true)
}

// refusal runs the query sql, which returns the fence columns of a row
// that refused snap, and returns the error that explains it. If there is
// no such row, it returns nil, or a ConflictError if mustExist.
func refusal(ctx context.Context, db Querier, resource string, snap lease.Snapshot, sql string, args []any, mustExist bool) error {
	var (
		key   *string
		token *int64
	)
	err := db.QueryRow(ctx, sql, args...).Scan(&key, &token)
	switch {
	case errors.Is(err, pgx.ErrNoRows) && !mustExist:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return &ConflictError{Resources: []string{resource}, Err: errors.New("the row was deleted while the upsert ran")}
	case err != nil:
		return columnError(resource, err)
	}
	m := Mark{}
	if key != nil {
		m.Key = *key
	}
	if token != nil {
		m.Token = lease.Token(*token)
	}
	if _, err := m.Admit(resource, snap); err != nil {
		return err
	}
	// The row admits snap now: it changed after the write looked at it.
	return &ConflictError{Resources: []string{resource}, Err: errors.New("the row changed while the write ran")}
}

// columnError explains an error of a column write.
func columnError(resource string, err error) error {
	if isConflict(err) {
		return &ConflictError{Resources: []string{resource}, Err: err}
	}
	return fmt.Errorf("fence: resource %q: %w", resource, err)
}

// without returns the elements of s that are not in drop.
func without(s, drop []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(drop, x) {
			out = append(out, x)
		}
	}
	return out
}
