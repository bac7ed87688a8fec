package fencecolumn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/applied"
	"github.com/golib/lease/internal/pgplumbing"
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
// fences table with fencepostgres.Tx): a row deleted and inserted again forgets its
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

// UpdateRows is a fenced UPDATE of the rows of one table: what Update
// sends, without the fence. Table, From and Where are SQL that the caller
// writes; values are sent as bind parameters.
type UpdateRows struct {
	// Table is the table to update: "name" or "schema.name", optionally
	// with an alias ("invoices AS i" or "invoices i"), every name a
	// lower-case unquoted identifier. Required.
	Table string
	// Set maps each column to update to its new value: a value sent as a
	// bind parameter, or an sq.Sqlizer such as sq.Expr("total + ?", 5),
	// checked and parenthesised as Where is.
	// Column names are lower-case unquoted identifiers, and not the fence
	// columns, which Update sets itself. Required.
	Set map[string]any
	// From, if not empty, is the FROM list of UPDATE … FROM, such as
	// "billing.runs r", for rows selected by a join. It is checked as Where
	// is, and put on lines of its own.
	From string
	// Where selects the rows, with ? placeholders: sq.Eq{"id": 7},
	// sq.Expr("id = ? OR legacy_id = ?", 7, 107), sq.Or{…}, any
	// sq.Sqlizer. Update puts it in parentheses of its own, as one unit,
	// before adding the fence's condition, so no shape of it (OR, NOT,
	// comments) reaches past the fence; a predicate whose parentheses,
	// quotes or comments do not close within it, or with a ';', is refused
	// with ErrInvalid. Nil selects every row.
	Where sq.Sqlizer
}

// UpsertRow is a fenced upsert of one row: what Upsert sends, without the
// fence.
type UpsertRow struct {
	// Table is the table to insert into: "name" or "schema.name",
	// optionally with an alias ("invoices AS inv"), every name a
	// lower-case unquoted identifier. Required.
	Table string
	// Values maps each column to insert to its value: a value sent as a
	// bind parameter, or an sq.Sqlizer. Column names are lower-case
	// unquoted identifiers, and not the fence columns, which Upsert sets
	// itself. Required.
	Values map[string]any
	// Conflict names the columns of a unique index: the row's identity.
	// Each is among Values, with a plain value (not an sq.Sqlizer), so
	// that the row can be named and found again. Required.
	Conflict []string
}

// invalid returns an error wrapping fence.ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{fence.ErrInvalid}, args...)...)
}

// maxLeadMicros is fence.MaxTokenLead in microseconds.
const maxLeadMicros = int64(fence.MaxTokenLead / time.Microsecond)

// Querier runs statements: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// identifier is what Column, table and column names may be: unquoted
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
	if err := fence.ValidateSnapshot(snap); err != nil {
		return err
	}
	if snap.Token > math.MaxInt64 {
		return invalid("token %d of lease %q does not fit a PostgreSQL bigint (largest 2^63−1)", snap.Token, snap.Key)
	}
	return col.check()
}

// table is a checked table reference.
type table struct {
	ref   string // as written: "billing.invoices AS i"
	name  string // "billing.invoices"
	alias string // "i", or "" if none
	// qualifier qualifies columns of the row: the alias, or the last
	// part of the name (which is how PostgreSQL exposes an unaliased
	// table, also for a whole-row reference).
	qualifier string
}

// reserved are the relation names the column helpers' statements use
// themselves; a table must not be known by one of them.
var reserved = map[string]bool{"fence_row": true, "fence_clock": true, "fenced_row": true, "fence_ix": true, "fence_ik": true, "fence_att": true}

// parseTable checks "name", "schema.name", optionally followed by
// "alias" or "AS alias", every part a lower-case unquoted identifier.
func parseTable(field, ref string) (table, error) {
	bad := func() (table, error) {
		return table{}, invalid("%s %q is not \"name\" or \"schema.name\" with an optional alias (\"AS alias\"), in lower-case unquoted identifiers", field, ref)
	}
	f := strings.Fields(ref)
	var t table
	switch {
	case len(f) == 1:
	case len(f) == 2 && !strings.EqualFold(f[1], "AS"):
		t.alias = f[1]
	case len(f) == 3 && strings.EqualFold(f[1], "AS"):
		t.alias = f[2]
	default:
		return bad()
	}
	t.name = f[0]
	parts := strings.Split(t.name, ".")
	if len(parts) > 2 || t.alias != "" && !identifier.MatchString(t.alias) {
		return bad()
	}
	for _, p := range parts {
		if !identifier.MatchString(p) {
			return bad()
		}
	}
	t.qualifier = parts[len(parts)-1]
	if t.alias != "" {
		t.qualifier = t.alias
	}
	if reserved[t.qualifier] {
		return table{}, invalid("%s %q: %q names the queries' own relations; give the table another alias", field, ref, t.qualifier)
	}
	t.ref = t.name
	if t.alias != "" {
		t.ref += " AS " + t.alias
	}
	return t, nil
}

// checkColumns checks the columns a caller writes: identifiers, and not
// the fence columns. It returns them sorted.
func checkColumns(field, tableName string, m map[string]any, col Column) ([]string, error) {
	if len(m) == 0 {
		return nil, invalid("%s: no columns in %s", tableName, field)
	}
	cols := make([]string, 0, len(m))
	for c := range m {
		switch {
		case !identifier.MatchString(c):
			return nil, invalid("%s: %s column %q is not a lower-case unquoted identifier", tableName, field, c)
		case c == col.Token || c == col.Key:
			return nil, invalid("%s: %s names fence column %q, which is set by the fence itself", tableName, field, c)
		}
		cols = append(cols, c)
	}
	slices.Sort(cols)
	return cols, nil
}

// grouped returns where as one parenthesised unit, on lines of its own so
// that a trailing -- comment in it ends before the closing parenthesis,
// after checking that no parenthesis, quote or comment of its own can
// reach past it (checkPredicate).
// sq.Expr expands a Sqlizer argument the way squirrel's own WHERE does,
// nested builders included.
func grouped(where sq.Sqlizer) (sq.Sqlizer, error) {
	text, _, err := where.ToSql()
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(text) == "" {
		return nil, errors.New("empty predicate (leave Where nil to select every row)")
	}
	if err := checkPredicate(text); err != nil {
		return nil, err
	}
	return sq.Expr("(\n?\n)", where), nil
}

// units returns m with every sq.Sqlizer value grouped as one unit (see
// grouped), so that no expression in a SET list or a VALUES row reaches
// into the clauses after it.
func units(field, tableName string, m map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(m))
	for c, v := range m {
		if e, ok := v.(sq.Sqlizer); ok {
			g, err := grouped(e)
			if err != nil {
				return nil, invalid("%s: %s[%q]: %v", tableName, field, c, err)
			}
			v = g
		}
		out[c] = v
	}
	return out, nil
}

// admits is the fence's rule on a row's columns, qualified by q, against
// the values $key and $token (placeholders, in that order). A NULL token
// counts as 0, as in Mark: without COALESCE the comparison would be NULL,
// and the row would refuse every write while Mark.Admit, asked why, says it
// admits.
func admits(q string, col Column) string {
	return fmt.Sprintf("(%[1]s.%[2]s IS NULL OR (%[1]s.%[2]s = ? AND COALESCE(%[1]s.%[3]s, 0) <= ?))", q, col.Key, col.Token)
}

// largestSQL is the largest token PostgreSQL accepts at the statement's
// time: its clock in microseconds plus MaxTokenLead (see MaxTokenLead).
var largestSQL = fmt.Sprintf("((extract(epoch FROM statement_timestamp()) * 1000000)::bigint + %d)", maxLeadMicros)

// primaryKey selects, for the row qualified by q in a table whose regclass
// is the placeholder's value, the names and the values (as text) of its
// primary key, joined with ", "; NULL if the table has none.
func primaryKey(q string) string {
	const keyCols = ` FROM pg_index fence_ix
		CROSS JOIN LATERAL unnest(fence_ix.indkey) WITH ORDINALITY AS fence_ik (attnum, n)
		JOIN pg_attribute fence_att ON fence_att.attrelid = fence_ix.indrelid AND fence_att.attnum = fence_ik.attnum
		WHERE fence_ix.indrelid = CAST(CAST(? AS text) AS regclass) AND fence_ix.indisprimary)`
	return "(SELECT string_agg(fence_att.attname, ', ' ORDER BY fence_ik.n)" + keyCols + " AS key_names, " +
		"(SELECT string_agg(to_jsonb(" + q + ".*) ->> fence_att.attname, ', ' ORDER BY fence_ik.n)" + keyCols + " AS key_values"
}

// Update runs u on db with the fence of every row it selects: it sets
// col.Token and col.Key to snap's token and lease key, and adds to the
// WHERE clause, after u.Where in parentheses of its own, the fence's rule
// (see Mark.Admit) on the row's fence columns, so the check and the write
// are one statement and no row is written whose fence refuses snap,
// whatever the shape of u.Where. The statement is
//
//	UPDATE u.Table SET u.Set…, fence columns FROM u.From
//	WHERE (u.Where) AND (the row's fence admits snap) AND (snap's token is plausible)
//
// with $n placeholders. A row's fence never goes down.
//
// Each row is its own resource. Rows whose fence refuses snap are left
// alone; the others are written. When no row is written, Update tells why
// with one more query: if rows match u.Where but their fence refuses snap,
// it returns a *StaleError or a *ForeignLeaseError naming the refusing row
// with the highest token, a foreign lease first, by its primary key
// ("billing.invoices (id)=(7)"; by the table alone if it has none);
// otherwise no row matched and it returns the zero-row tag and no error.
// When rows are written, rows refused alongside them go unreported: use Tx
// with the fences table for all-or-nothing writes over many resources.
//
// A token more than MaxTokenLead ahead of PostgreSQL's clock writes
// nothing and is reported as an *ImplausibleTokenError. A serialization
// failure or deadlock is returned as a *ConflictError, and so is a
// matching row that admits snap when asked why nothing was written (it
// changed between the two statements). u is checked before any I/O; the
// error then wraps ErrInvalid.
func Update(ctx context.Context, db Querier, snap lease.Snapshot, u UpdateRows, col Column) (pgconn.CommandTag, error) {
	if err := checkColumnWrite(db, snap, col); err != nil {
		return pgconn.CommandTag{}, err
	}
	t, err := parseTable("UpdateRows.Table", u.Table)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if _, err := checkColumns("UpdateRows.Set", t.name, u.Set, col); err != nil {
		return pgconn.CommandTag{}, err
	}
	set, err := units("UpdateRows.Set", t.name, u.Set)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if u.From != "" {
		if err := checkPredicate(u.From); err != nil {
			return pgconn.CommandTag{}, invalid("%s: UpdateRows.From: %v", t.name, err)
		}
		// On a line of its own: a trailing -- comment ends with it.
		u.From = "\n" + u.From + "\n"
	}
	where := sq.Expr("TRUE")
	if u.Where != nil {
		if where, err = grouped(u.Where); err != nil {
			return pgconn.CommandTag{}, invalid("%s: UpdateRows.Where: %v", t.name, err)
		}
	}
	from := t.ref
	if u.From != "" {
		from += ", " + u.From
	}
	token := int64(snap.Token)
	rule := admits(t.qualifier, col)
	b := sq.Update(t.ref).
		SetMap(set).
		Set(col.Token, token).
		Set(col.Key, snap.Key).
		Where(where).
		Where(rule, snap.Key, token).
		Where("? <= "+largestSQL, token).
		PlaceholderFormat(sq.Dollar)
	if u.From != "" {
		b = b.From(u.From)
	}
	sql, args, err := b.ToSql()
	if err != nil {
		return pgconn.CommandTag{}, invalid("%s: %v", t.name, err)
	}
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return tag, columnError(t.name, err)
	}
	if tag.RowsAffected() > 0 {
		return tag, nil
	}

	// Nothing written: the largest plausible token, and the matching row
	// that refuses snap, refusing rows first, a foreign lease first, the
	// highest token first.
	q := t.qualifier
	row := sq.Select(q+"."+col.Key+" AS fence_key", q+"."+col.Token+" AS fence_token").
		Column(primaryKey(q), t.name, t.name).
		Column("TRUE AS found").
		From(from).
		Where(where).
		OrderByClause(rule+", ("+q+"."+col.Key+" = ?), "+q+"."+col.Token+" DESC NULLS LAST", snap.Key, token, snap.Key).
		Limit(1)
	sql, args, err = sq.Select("fence_row.*", largestSQL).
		FromSelect(sq.Select("1"), "fence_clock").
		JoinClause(row.Prefix("LEFT JOIN LATERAL (").Suffix(") AS fence_row ON TRUE")).
		PlaceholderFormat(sq.Dollar).
		ToSql()
	if err != nil {
		return tag, invalid("%s: %v", t.name, err)
	}
	return tag, refusal(ctx, db, t.name, "", snap, sql, args, false)
}

// Upsert inserts row on db with the fence of the row, or overwrites the
// existing row with the same Conflict columns if its fence admits snap
// (see Mark.Admit). It adds col.Token and col.Key with snap's token and
// lease key; the statement is
//
//	INSERT INTO row.Table (columns…, fence columns) SELECT values…, snap's token and key
//	WHERE snap's token is plausible
//	ON CONFLICT (row.Conflict…) DO UPDATE SET every inserted column = EXCLUDED.column
//	WHERE the existing row's fence admits EXCLUDED's token and key
//
// with $n placeholders, so the check and the write are one statement and a
// row's fence never goes down.
//
// If the existing row's fence refuses snap, nothing is written and Upsert
// returns a *StaleError or a *ForeignLeaseError naming the row by its
// Conflict columns ("billing.invoices (id)=(10)"). A token more than
// MaxTokenLead ahead of PostgreSQL's clock writes nothing and is reported
// as an *ImplausibleTokenError. A serialization failure or deadlock, or a
// row deleted while the upsert ran, is returned as a *ConflictError. row
// is checked before any I/O; the error then wraps ErrInvalid.
func Upsert(ctx context.Context, db Querier, snap lease.Snapshot, row UpsertRow, col Column) (pgconn.CommandTag, error) {
	if err := checkColumnWrite(db, snap, col); err != nil {
		return pgconn.CommandTag{}, err
	}
	t, err := parseTable("UpsertRow.Table", row.Table)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	columns, err := checkColumns("UpsertRow.Values", t.name, row.Values, col)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	vals, err := units("UpsertRow.Values", t.name, row.Values)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if len(row.Conflict) == 0 {
		return pgconn.CommandTag{}, invalid("%s: no UpsertRow.Conflict columns", t.name)
	}
	var ident []string
	key := sq.And{}
	for _, c := range row.Conflict {
		v, ok := row.Values[c]
		if !ok {
			return pgconn.CommandTag{}, invalid("%s: conflict column %q is not among the inserted columns %q", t.name, c, columns)
		}
		if _, expr := v.(sq.Sqlizer); expr {
			return pgconn.CommandTag{}, invalid("%s: conflict column %q has an expression, not a value", t.name, c)
		}
		ident = append(ident, fmt.Sprint(v))
		key = append(key, sq.Expr("fenced_row."+c+" = ?", v))
	}
	if len(slices.Compact(slices.Sorted(slices.Values(row.Conflict)))) != len(row.Conflict) {
		return pgconn.CommandTag{}, invalid("%s: conflict columns %q repeat a column", t.name, row.Conflict)
	}
	resource := fmt.Sprintf("%s (%s)=(%s)", t.name, strings.Join(row.Conflict, ", "), strings.Join(ident, ", "))

	token := int64(snap.Token)
	// ON CONFLICT needs a name for the existing row; a schema-qualified
	// table name won't do, so give the table an alias if it has none.
	existing := t.alias
	if existing == "" {
		existing = "fenced_row"
	}
	values := sq.Select().Where("? <= "+largestSQL, token)
	var set []string
	for _, c := range columns {
		v := vals[c]
		if e, ok := v.(sq.Sqlizer); ok {
			values = values.Column(e)
		} else {
			values = values.Column("?", v)
		}
		if !slices.Contains(row.Conflict, c) {
			set = append(set, c+" = EXCLUDED."+c)
		}
	}
	values = values.Column("?", token).Column("?", snap.Key)
	set = append(set, col.Token+" = EXCLUDED."+col.Token, col.Key+" = EXCLUDED."+col.Key)
	sql, args, err := sq.Insert(t.name + " AS " + existing).
		Columns(append(slices.Clone(columns), col.Token, col.Key)...).
		Select(values).
		Suffix(fmt.Sprintf("ON CONFLICT (%s) DO UPDATE SET %s WHERE %s.%s IS NULL OR (%s.%s = EXCLUDED.%s AND COALESCE(%s.%s, 0) <= EXCLUDED.%s)",
			strings.Join(row.Conflict, ", "), strings.Join(set, ", "),
			existing, col.Key, existing, col.Key, col.Key, existing, col.Token, col.Token)).
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
	sql, args, err = sq.Select("fenced_row."+col.Key, "fenced_row."+col.Token, "NULL", "NULL",
		"fenced_row."+row.Conflict[0]+" IS NOT NULL", largestSQL).
		FromSelect(sq.Select("1"), "fence_clock").
		JoinClause(sq.ConcatExpr("LEFT JOIN "+t.name+" AS fenced_row ON ", key)).
		PlaceholderFormat(sq.Dollar).
		ToSql()
	if err != nil {
		return tag, invalid("%s: %v", resource, err)
	}
	return tag, refusal(ctx, db, t.name, resource, snap, sql, args, true)
}

// refusal runs the query sql, which returns the fence columns of a row
// that refused snap, the names and values of its primary key, whether
// there is such a row, and the largest plausible token, and returns the
// error that explains it. The row
// is named resource, or if that is empty by its primary key in the table
// named table. If there is no such row, it returns nil, or a ConflictError
// if mustExist.
func refusal(ctx context.Context, db Querier, table, resource string, snap lease.Snapshot, sql string, args []any, mustExist bool) error {
	var (
		key           *string
		token         *int64
		names, values *string
		found         *bool
		largest       int64
	)
	name := resource
	if name == "" {
		name = table
	}
	err := db.QueryRow(ctx, sql, args...).Scan(&key, &token, &names, &values, &found, &largest)
	if err != nil {
		return columnError(name, err)
	}
	if resource == "" && names != nil && values != nil {
		resource = fmt.Sprintf("%s (%s)=(%s)", table, *names, *values)
	}
	if resource == "" {
		resource = table
	}
	if int64(snap.Token) > largest {
		return &fence.ImplausibleTokenError{Resource: resource, Key: snap.Key, Token: snap.Token, Largest: lease.Token(largest)}
	}
	if found == nil || !*found {
		if mustExist {
			return &fence.ConflictError{Resources: []string{resource}, Err: errors.New("the row was deleted while the upsert ran")}
		}
		return nil
	}
	m := fence.Mark{}
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
	return &fence.ConflictError{Resources: []string{resource}, Err: errors.New("the row changed while the write ran; nothing written")}
}

// columnError explains an error of a column write; pgplumbing.Classify says
// whether the statement may have been applied.
func columnError(resource string, err error) error {
	switch {
	case pgplumbing.IsConflict(err):
		return &fence.ConflictError{Resources: []string{resource}, Err: err}
	case pgplumbing.Classify(err) == applied.Unknown:
		return lease.Indeterminate(fmt.Errorf("fence: resource %q: %w", resource, err))
	}
	return fmt.Errorf("fence: resource %q: %w", resource, err)
}
