package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/golib/lease/lease"
)

// Exit statuses; see the package documentation.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNegative = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// usageError is an error in the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// negative is a "no" answer: exit status 3 with a message.
type negative struct{ msg string }

func (e *negative) Error() string { return e.msg }

// cli is one run of the command.
type cli struct {
	cfg    config
	out    io.Writer
	errOut io.Writer
	getenv func(string) string
}

const usage = `usage: leasectl [connection flags] command [flags] [arguments]

commands:
  list [--prefix P] [--held] [--limit N] [--cursor C]
  inspect KEY
  watch KEY [--interval D]
  release --force --yes [--token T] KEY
  fence show RESOURCE
  gc [--dry-run]
  check
  migrate [--dry-run | --status] [--only lease,fence,queue]

connection flags (before the command or among its flags):
  --valkey URL|ADDR[,ADDR...]  (default $VALKEY_URL, $REDIS_URL)
  --valkey-prefix P  --fence-prefix P
  --postgres DSN               (default $DATABASE_URL, then the PG* variables)
  --schema S  --table T  --fence-schema S  --fence-table T  --disable-notify
  --queue-schema S  --queue-table T
  --backend valkey|postgres  --timeout D  --retention D  --json

exit status: 0 done, 1 error, 2 usage, 3 not found / nothing done / check failed / migrations pending
`

// run runs leasectl with args and returns its exit status.
func run(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) int {
	c := &cli{out: out, errOut: errOut, getenv: getenv}
	err := c.dispatch(ctx, args)
	var ue *usageError
	var neg *negative
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(out, usage)
		return exitOK
	case errors.As(err, &ue), errors.Is(err, lease.ErrInvalidKey):
		fmt.Fprintf(errOut, "leasectl: %v\n", err)
		if ue != nil {
			fmt.Fprint(errOut, "run 'leasectl help' for usage\n")
		}
		return exitUsage
	case errors.As(err, &neg):
		fmt.Fprintf(errOut, "leasectl: %v\n", err)
		return exitNegative
	}
	fmt.Fprintf(errOut, "leasectl: %v\n", err)
	return exitError
}

// newFlags returns a flag set for the command name with the connection
// flags, writing nothing itself: errors are returned and printed once.
func (c *cli) newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.cfg.register(fs)
	return fs
}

// parse parses args with fs, letting flags and arguments come in any order
// ("--" ends the flags), and returns the arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func (c *cli) dispatch(ctx context.Context, args []string) error {
	// Every flag set is created before any is parsed: registering a flag
	// resets its variable to the default.
	global := c.newFlags("leasectl")
	cmds := map[string]*flag.FlagSet{}
	for _, name := range []string{"list", "inspect", "watch", "release", "fence", "gc", "check", "migrate"} {
		cmds[name] = c.newFlags(name)
	}
	var (
		prefix, cursor string
		held, force    bool
		yes, dryRun    bool
		limit          int
		interval       time.Duration
		token          uint64
		status         bool
		only           string
	)
	cmds["list"].StringVar(&prefix, "prefix", "", "list only keys that start with `P`")
	cmds["list"].BoolVar(&held, "held", false, "list only keys that are held now")
	cmds["list"].IntVar(&limit, "limit", 0, "stop after the page that brings the count to `N` (0: list everything)")
	cmds["list"].StringVar(&cursor, "cursor", "", "continue a listing from the cursor `C` an earlier --limit printed")
	cmds["watch"].DurationVar(&interval, "interval", 250*time.Millisecond, "how often to read the key")
	cmds["release"].BoolVar(&force, "force", false, "expire the lease now (required)")
	cmds["release"].BoolVar(&yes, "yes", false, "confirm")
	cmds["release"].Uint64Var(&token, "token", 0, "release only the acquisition with token `T`")
	cmds["gc"].BoolVar(&dryRun, "dry-run", false, "list what would be removed, remove nothing")
	cmds["migrate"].BoolVar(&dryRun, "dry-run", false, "list the migrations that would be applied, apply nothing")
	cmds["migrate"].BoolVar(&status, "status", false, "list every migration, applied or pending; exit 3 if one is pending")
	cmds["migrate"].StringVar(&only, "only", "", "migrate only these table sets: a comma-separated `list` of lease, fence, queue")

	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	rest := global.Args()
	if len(rest) == 0 {
		return usagef("no command")
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		return flag.ErrHelp
	}
	fs, ok := cmds[name]
	if !ok {
		return usagef("unknown command %q", name)
	}
	pos, err := parse(fs, rest)
	if err != nil {
		return err
	}
	one := func(what string) (string, error) {
		if len(pos) != 1 {
			return "", usagef("%s takes one %s, got %d arguments", name, what, len(pos))
		}
		return pos[0], nil
	}
	switch name {
	case "list":
		if len(pos) != 0 {
			return usagef("list takes no arguments (use --prefix)")
		}
		if limit < 0 {
			return usagef("list: --limit %d is negative", limit)
		}
		return c.withTarget(ctx, func(t *target) error { return c.list(ctx, t, prefix, cursor, held, limit) })
	case "inspect":
		key, err := one("key")
		if err != nil {
			return err
		}
		return c.withTarget(ctx, func(t *target) error { return c.inspect(ctx, t, key) })
	case "watch":
		key, err := one("key")
		if err != nil {
			return err
		}
		if interval <= 0 {
			return usagef("watch: --interval %v is not positive", interval)
		}
		return c.withTarget(ctx, func(t *target) error { return c.watch(ctx, t, key, interval) })
	case "release":
		key, err := one("key")
		if err != nil {
			return err
		}
		if !force {
			return usagef("release needs --force: a lease is released by its holder; --force expires it for whoever holds it")
		}
		return c.withTarget(ctx, func(t *target) error { return c.release(ctx, t, key, lease.Token(token), yes) })
	case "fence":
		if len(pos) != 2 || pos[0] != "show" {
			return usagef("usage: leasectl fence show RESOURCE")
		}
		return c.withTarget(ctx, func(t *target) error { return c.fenceShow(ctx, t, pos[1]) })
	case "gc":
		if len(pos) != 0 {
			return usagef("gc takes no arguments")
		}
		return c.withTarget(ctx, func(t *target) error { return c.gc(ctx, t, dryRun) })
	case "check":
		if len(pos) != 0 {
			return usagef("check takes no arguments")
		}
		return c.withTarget(ctx, func(t *target) error { return c.check(ctx, t) })
	case "migrate":
		if len(pos) != 0 {
			return usagef("migrate takes no arguments")
		}
		if dryRun && status {
			return usagef("migrate: pass --dry-run or --status, not both")
		}
		if _, err := c.tableSets(only); err != nil {
			return err
		}
		return c.withTarget(ctx, func(t *target) error { return c.migrate(ctx, t, only, dryRun, status) })
	}
	return usagef("unknown command %q", name)
}

// withTarget connects, runs f and disconnects.
func (c *cli) withTarget(ctx context.Context, f func(*target) error) error {
	t, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer t.close()
	return f(t)
}

// op returns a context bounding one operation by --timeout.
func (c *cli) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.timeout)
}
