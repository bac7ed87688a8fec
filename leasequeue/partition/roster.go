package partition

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/internal/pgplumbing"
	"github.com/golib/lease/internal/valkeyplumbing"
	"github.com/golib/lease/leasequeue"
)

// A Roster records the names of the workers of each group, so that every
// worker can find the others' membership leases. It records names only:
// whether a worker is live is decided by its membership lease alone,
// whatever the roster says, and workers remove the names of dead members
// as they find them. A Roster must be safe for concurrent use.
//
// MemoryRoster, ValkeyRoster and PostgresRoster are ready-made rosters.
type Roster interface {
	// Join adds worker to group. Adding a name that is there is no error.
	Join(ctx context.Context, group, worker string) error
	// Members returns the names recorded for group, in any order.
	Members(ctx context.Context, group string) ([]string, error)
	// Leave removes worker from group. Removing a name that is not there
	// is no error.
	Leave(ctx context.Context, group, worker string) error
}

// MemoryRoster is a Roster in the memory of one process, for tests and for
// groups whose workers share a process (and a memory lease backend). The
// zero value is ready to use.
type MemoryRoster struct {
	mu     sync.Mutex
	groups map[string]map[string]bool
}

var _ Roster = (*MemoryRoster)(nil)

// Join implements Roster.
func (r *MemoryRoster) Join(_ context.Context, group, worker string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.groups == nil {
		r.groups = make(map[string]map[string]bool)
	}
	if r.groups[group] == nil {
		r.groups[group] = make(map[string]bool)
	}
	r.groups[group][worker] = true
	return nil
}

// Members implements Roster; the names are sorted.
func (r *MemoryRoster) Members(_ context.Context, group string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for w := range r.groups[group] {
		out = append(out, w)
	}
	slices.Sort(out)
	return out, nil
}

// Leave implements Roster.
func (r *MemoryRoster) Leave(_ context.Context, group, worker string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.groups[group], worker)
	return nil
}

//go:embed queries/*.sql
var queryFiles embed.FS

// PostgresRoster is a Roster in the roster table of the leasequeue tables
// (leasequeue.PostgresOptions.Table + "_members", created by
// leasequeue.MigratePostgres). It is safe for concurrent use.
type PostgresRoster struct {
	db                  leasequeue.PostgresDB
	join, members, quit string
}

var _ Roster = (*PostgresRoster)(nil)

// NewPostgresRoster returns the roster in the leasequeue tables o names,
// on db; o's retention fields do not matter here. It does no I/O.
func NewPostgresRoster(db leasequeue.PostgresDB, o leasequeue.PostgresOptions) (*PostgresRoster, error) {
	if db == nil {
		return nil, errors.New("partition: NewPostgresRoster: nil database")
	}
	if o.Schema == "" {
		o.Schema = leasequeue.DefaultPostgresSchema
	}
	if o.Table == "" {
		o.Table = leasequeue.DefaultPostgresTable
	}
	if err := pgplumbing.CheckIdent(o.Schema); err != nil {
		return nil, fmt.Errorf("partition: PostgresOptions.Schema %w", err)
	}
	if err := pgplumbing.CheckIdent(o.Table + "_migrations"); err != nil {
		return nil, fmt.Errorf("partition: PostgresOptions.Table + \"_migrations\" %w", err)
	}
	table := pgplumbing.Quote(o.Schema, o.Table+"_members")
	query := func(name string) string {
		b, err := queryFiles.ReadFile("queries/" + name + ".sql")
		if err != nil {
			panic(err) // the files are embedded
		}
		var out strings.Builder
		for line := range strings.SplitSeq(string(b), "\n") {
			if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "--") {
				continue
			}
			out.WriteString(strings.ReplaceAll(line, "public.leasequeue_jobs_members", table))
			out.WriteByte('\n')
		}
		return out.String()
	}
	return &PostgresRoster{db: db, join: query("join"), members: query("members"), quit: query("leave")}, nil
}

// Join implements Roster.
func (r *PostgresRoster) Join(ctx context.Context, group, worker string) error {
	if _, err := r.db.Exec(ctx, r.join, group, worker); err != nil {
		return pgError("join group", group, err)
	}
	return nil
}

// Members implements Roster.
func (r *PostgresRoster) Members(ctx context.Context, group string) ([]string, error) {
	rows, err := r.db.Query(ctx, r.members, group)
	if err != nil {
		return nil, pgError("members of group", group, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, pgError("members of group", group, err)
	}
	return names, nil
}

// Leave implements Roster.
func (r *PostgresRoster) Leave(ctx context.Context, group, worker string) error {
	if _, err := r.db.Exec(ctx, r.quit, group, worker); err != nil {
		return pgError("leave group", group, err)
	}
	return nil
}

// pgError explains an error of a statement: pgplumbing.Classify says whether
// it may have been applied.
func pgError(op, name string, err error) error {
	return pgplumbing.Classify(err).Mark(fmt.Errorf("partition: postgres: %s %q: %w", op, name, err))
}

// ValkeyRoster is a Roster in Valkey: the workers of group g are the set
// P{G}:members, where P is leasequeue.ValkeyOptions.Prefix (default
// leasequeue.DefaultValkeyPrefix) and G is g with '%', '{', '}' and '/'
// written as %25, %7B, %7D and %2F. It is safe for concurrent use and
// never closes the client.
type ValkeyRoster struct {
	client valkey.Client
	prefix string
}

var _ Roster = (*ValkeyRoster)(nil)

// NewValkeyRoster returns a roster on client under o's prefix; o's
// retention fields do not matter here. It does no I/O.
func NewValkeyRoster(client valkey.Client, o leasequeue.ValkeyOptions) (*ValkeyRoster, error) {
	if client == nil {
		return nil, errors.New("partition: NewValkeyRoster: nil client")
	}
	prefix := o.Prefix
	if prefix == "" {
		prefix = leasequeue.DefaultValkeyPrefix
	}
	if !keyspace.ValidPrefix(prefix) {
		return nil, fmt.Errorf("partition: ValkeyOptions.Prefix %q must not contain '{' or '}'", prefix)
	}
	return &ValkeyRoster{client: client, prefix: prefix}, nil
}

func (r *ValkeyRoster) key(group string) string {
	return keyspace.Name(r.prefix, keyspace.Tag(group), ":members")
}

// Join implements Roster.
func (r *ValkeyRoster) Join(ctx context.Context, group, worker string) error {
	if err := r.client.Do(ctx, r.client.B().Sadd().Key(r.key(group)).Member(worker).Build()).Error(); err != nil {
		return valkeyError("join group", group, err)
	}
	return nil
}

// Members implements Roster.
func (r *ValkeyRoster) Members(ctx context.Context, group string) ([]string, error) {
	names, err := r.client.Do(ctx, r.client.B().Smembers().Key(r.key(group)).Build()).AsStrSlice()
	if err != nil {
		return nil, valkeyError("members of group", group, err)
	}
	return names, nil
}

// Leave implements Roster.
func (r *ValkeyRoster) Leave(ctx context.Context, group, worker string) error {
	if err := r.client.Do(ctx, r.client.B().Srem().Key(r.key(group)).Member(worker).Build()).Error(); err != nil {
		return valkeyError("leave group", group, err)
	}
	return nil
}

// valkeyError explains an error from valkey-go: valkeyplumbing.Classify says
// whether the command may have been applied.
func valkeyError(op, name string, err error) error {
	return valkeyplumbing.Classify(err).Mark(fmt.Errorf("partition: valkey: %s %q: %w", op, name, err))
}
