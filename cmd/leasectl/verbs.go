package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/golib/lease/lease"
)

// verb is one command of leasectl: its help and how it runs. Adding a
// command is adding one entry to verbs; the help, the dispatch and the
// exit statuses follow from it.
type verb struct {
	name string
	// args is the usage line after the name, flags included.
	args string
	// summary is one line for the list of commands.
	summary string
	// about says what the command does, for its help.
	about string
	// exits are the exit statuses 0 and 3 of the command and what they
	// mean; 1 (an error) and 2 (usage) are every command's.
	exits []exitStatus
	// flags registers the command's own flags on fs and returns the
	// function that runs the command with its positional arguments.
	flags func(fs *flag.FlagSet) func(ctx context.Context, c *cli, args []string) error
	// raw commands get their arguments unparsed, because what follows
	// KEY belongs to another program; exits then lists every status.
	raw bool
}

// exitStatus is an exit status of a command and what it means.
type exitStatus struct {
	code  int
	means string
}

// commonExits are every command's exit statuses besides its own.
var commonExits = []exitStatus{
	{exitError, "an error: the backend could not be reached, refused, or failed"},
	{exitUsage, "usage: an unknown command or flag, a missing argument, an invalid key"},
}

// verbs are leasectl's commands, in the order of the help.
var verbs = []verb{
	{
		name:    "list",
		args:    "[--prefix P] [--held] [--limit N [--cursor C]]",
		summary: "keys with their holder, token, remaining time and state",
		about: `Lists the keys the backend keeps a record of, sorted by key: free keys too,
with their last token, unless --held. On a Valkey cluster it walks every
primary with SCAN. With --limit N it prints at most N keys and, if the
listing goes on, the cursor to pass as --cursor for the next N.
Permits of semaphores (keys SEM/permit/SLOT) get SEMAPHORE and SLOT
columns. Held keys with one owner and one token, as a set that
AcquireSet took holds them, get a SET column (set1, set2, ...): inferred
from the records, which do not name the acquisition, and from this
listing only, so a set whose keys span pages is seen in part.`,
		exits: []exitStatus{{exitOK, "listed (also when no key matched)"}},
		flags: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			prefix := fs.String("prefix", "", "list only keys that start with `P`")
			held := fs.Bool("held", false, "list only keys that are held now")
			limit := fs.Int("limit", 0, "print at most `N` keys, and the cursor that continues the listing (0: every key)")
			cursor := fs.String("cursor", "", "continue the listing from the cursor `C` that an earlier --limit printed")
			return func(ctx context.Context, c *cli, pos []string) error {
				if len(pos) != 0 {
					return usagef("list takes no arguments (use --prefix)")
				}
				if *limit < 0 {
					return usagef("list: --limit %d is negative", *limit)
				}
				return c.withTarget(ctx, func(t *target) error { return c.list(ctx, t, *prefix, *cursor, *held, *limit) })
			}
		},
	},
	{
		name:    "inspect",
		args:    "[--permits N] KEY",
		summary: "one key, or each permit of a semaphore",
		about: `Prints the record of one key: its state, holder, token and remaining time; for
the key of a permit (SEM/permit/SLOT), also its semaphore and slot.
With --permits N, KEY names a semaphore: it prints the record of each of
its permits 0 to N-1 (one read each) and how many of them are held, as
"2 of 3 permits of semaphore "exports" held". N is the number the
services pass to AcquirePermit; the semaphore does not store it, and
permits at slots N and above (granted while a larger N was in use) are
not read: leasectl list --prefix 'KEY/permit/' shows every slot.`,
		exits: []exitStatus{
			{exitOK, "the key has a record; with --permits, one of the permits has"},
			{exitNegative, "the key (with --permits: every permit) has no record: never acquired, removed a retention after its last lease ended, or lost by the backend"},
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			permits := fs.Int("permits", 0, "KEY is a semaphore of `N` permits: print each permit's record")
			return func(ctx context.Context, c *cli, pos []string) error {
				key, err := oneKey("inspect", pos)
				if err != nil {
					return err
				}
				if *permits != 0 {
					if *permits < 1 || *permits > lease.MaxPermits {
						return usagef("inspect: --permits %d is out of the range 1 to %d", *permits, lease.MaxPermits)
					}
					return c.withTarget(ctx, func(t *target) error { return c.inspectPermits(ctx, t, key, *permits) })
				}
				return c.withTarget(ctx, func(t *target) error { return c.inspect(ctx, t, key) })
			}
		},
	},
	{
		name:    "watch",
		args:    "[--interval D] KEY",
		summary: "follow one key until interrupted",
		about: `Follows KEY (lease.Client.Observe) and prints its state, then one line per
change: held, offered or free first; then acquired, released, expired,
force-released, handed-off (with the candidates the key is offered to and
the token the first of them gets), preferred (with the owner waiting as
the preferred candidate); lost when the backend's record of the key is
gone (lost data: a restart without persistence, a failover, an eviction;
or removed after its retention), and token-down when a token lower than
one seen before appears (lost data, a restored backup, a clock that
stepped back: fences refuse that holder's writes). A change is seen at
once where the backend announces changes (Valkey's shard channels,
PostgreSQL's LISTEN); --interval bounds how late one is seen without
them, and an expiry is seen when the holder's time runs out. Renewals
print nothing. An error after the start is printed as a line, once, and
watching goes on; the first read must succeed. Ctrl-C (SIGINT) or
SIGTERM ends it.`,
		exits: []exitStatus{
			{exitOK, "ended by Ctrl-C or SIGTERM"},
			{exitError, "a bad start: the first read failed (backend unreachable, the lease table missing, refused)"},
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			interval := fs.Duration("interval", 250*time.Millisecond, "read the key at least every `D`: how late a change is seen without the backend's notifications")
			return func(ctx context.Context, c *cli, pos []string) error {
				key, err := oneKey("watch", pos)
				if err != nil {
					return err
				}
				if *interval <= 0 {
					return usagef("watch: --interval %v is not positive", *interval)
				}
				return c.withTarget(ctx, func(t *target) error { return c.watch(ctx, t, key, *interval) })
			}
		},
	},
	{
		name:    "release",
		args:    "--force [--yes] [--token T] KEY",
		summary: "expire the lease on KEY now, keeping its token (a dry run without --yes)",
		about: `Ends the current acquisition of KEY as if its holder had released it: the
key is free at once, waiters wake, and the key keeps its token, so the next
holder's token is higher and fences refuse the old holder's writes once the
new holder has written. The old holder is not stopped: it learns of the
loss at its next renewal. Without --yes it is a dry run: it prints what it
would do and changes nothing. --token T releases only the acquisition with
token T, leaving alone a holder that changed since you looked.
KEY may be one permit of a semaphore, SEM/permit/SLOT (leasectl inspect
--permits N SEM shows them): that slot is free at once, the semaphore's
other permits are left alone. KEY may be one key of a set: its holder
loses the whole set at its next renewal, and its other keys stay held
until it releases them or they expire. A key that a hand-off offers to
its candidates (inspect shows it "offered") is released the same way:
the offer ends, and the key is free for anyone, keeping its token.`,
		exits: []exitStatus{
			{exitOK, "released; or, in a dry run, would release"},
			{exitNegative, "nothing to release, or another holder than --token (also in a dry run)"},
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			force := fs.Bool("force", false, "expire the lease for whoever holds it (required)")
			yes := fs.Bool("yes", false, "do it; without --yes, a dry run")
			token := fs.Uint64("token", 0, "release only the acquisition with token `T`")
			return func(ctx context.Context, c *cli, pos []string) error {
				key, err := oneKey("release", pos)
				if err != nil {
					return err
				}
				if !*force {
					return usagef("release needs --force: a lease is released by its holder; --force expires it for whoever holds it")
				}
				return c.withTarget(ctx, func(t *target) error { return c.release(ctx, t, key, lease.Token(*token), *yes) })
			}
		},
	},
	{
		name:    "fence",
		args:    "show [--lease KEY] RESOURCE",
		summary: "a resource's fence, and the lease it is fenced by",
		about: `Prints the fence of RESOURCE (the lease key it is fenced by and the highest
token it accepted) next to that lease's record. Fences are read from the
lease's store, or from the one --fence-valkey or --fence-postgres names
when they live apart. --lease KEY names the lease the resource is fenced
by, so that a missing fence is compared with it: a lease that has issued
tokens suggests a fence record that was retired or lost, not one that no
write has touched.`,
		exits: []exitStatus{
			{exitOK, "the resource has a fence"},
			{exitNegative, "the resource has no fence"},
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			leaseKey := fs.String("lease", "", "the lease `KEY` the resource is fenced by, to compare with when its fence is missing")
			return func(ctx context.Context, c *cli, pos []string) error {
				if len(pos) != 2 || pos[0] != "show" {
					return usagef("usage: leasectl fence show RESOURCE")
				}
				return c.withTarget(ctx, func(t *target) error { return c.fenceShow(ctx, t, pos[1], *leaseKey) })
			}
		},
	},
	{
		name:    "gc",
		args:    "[--dry-run] [--retention D]",
		summary: "remove the records past their retention (lease records and fences)",
		about: `Removes the lease records and fences past their retention, as the services'
clients do about every hour, under the lease lease/sweep so that one
process sweeps at a time. --retention must be the services' value. With
--dry-run it lists them (lease or fence, then the name) and removes
nothing.`,
		exits: []exitStatus{
			{exitOK, "swept, or listed with --dry-run"},
			{exitNegative, "another process is sweeping"},
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			dryRun := fs.Bool("dry-run", false, "list what would be removed, remove nothing")
			return func(ctx context.Context, c *cli, pos []string) error {
				if err := none("gc", pos); err != nil {
					return err
				}
				return c.withTarget(ctx, func(t *target) error { return c.gc(ctx, t, *dryRun) })
			}
		},
	},
	{
		name:    "check",
		args:    "",
		summary: "the backend's Check: problems and advice",
		about: `Runs the backend's Diagnose and prints its problems and advice: a Valkey
eviction policy that drops lease records, a missing or outdated lease
table, missing privileges, a pooler that breaks release notifications.`,
		exits: []exitStatus{
			{exitOK, "no problem found"},
			{exitNegative, "problems found"},
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			return func(ctx context.Context, c *cli, pos []string) error {
				if err := none("check", pos); err != nil {
					return err
				}
				return c.withTarget(ctx, func(t *target) error { return c.check(ctx, t) })
			}
		},
	},
	{
		name:    "migrate",
		args:    "[--dry-run | --status] [--only lease,fence,queue]",
		summary: "create or update the PostgreSQL lease, fences and queue tables",
		about: `Applies the pending migrations of the PostgreSQL tables the library uses:
the lease table (--schema, --table), the fences table (--fence-schema,
--fence-table) and the leasequeue tables (--queue-schema, --queue-table),
or only the sets --only names. --dry-run lists what would be applied and
applies nothing; --status lists every migration, applied or pending.
Programs can do the same at start-up with leasepostgres.Migrate,
fencepostgres.Migrate and leasequeue.MigratePostgres.`,
		exits: []exitStatus{
			{exitOK, "migrated, or nothing was pending (also a dry run)"},
			{exitNegative, "--status found a pending migration"},
		},
		flags: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			dryRun := fs.Bool("dry-run", false, "list the migrations that would be applied, apply nothing")
			status := fs.Bool("status", false, "list every migration, applied or pending; exit 3 if one is pending")
			only := fs.String("only", "", "migrate only these table sets: a comma-separated `list` of lease, fence, queue")
			return func(ctx context.Context, c *cli, pos []string) error {
				if err := none("migrate", pos); err != nil {
					return err
				}
				if *dryRun && *status {
					return usagef("migrate: pass --dry-run or --status, not both")
				}
				if _, err := c.tableSets(*only); err != nil {
					return err
				}
				return c.withTarget(ctx, func(t *target) error { return c.migrate(ctx, t, *only, *dryRun, *status) })
			}
		},
	},
	{
		name:    "run",
		args:    "[--ttl D] [--owner O] [--wait D | --try] [--kill-after D] KEY -- COMMAND [ARGS...]",
		summary: "run a command while holding the lease on KEY, renewed, with its token",
		about: `Acquires the lease on KEY (waiting for it unless --try or --wait say
otherwise), renews it while COMMAND runs, and releases it when COMMAND
exits. COMMAND gets LEASE_KEY, LEASE_TOKEN and LEASE_OWNER in its
environment: pass the token to every write it makes, so that storage
refuses a stale one. If the lease is lost, COMMAND's process group gets
SIGTERM, then SIGKILL after --kill-after. SIGINT, SIGTERM and SIGHUP are
passed on to COMMAND. Without "--", COMMAND starts at the first argument
after KEY.`,
		exits: []exitStatus{
			{0, "COMMAND's own status (128+N if signal N ended it), from 0 to 122"},
			{exitRunLost, "the lease was lost while COMMAND ran, which was stopped"},
			{exitRunHeld, "the lease is held by someone else (--try, or --wait ran out)"},
			{exitRunError, "leasectl's own error, a usage error in run's arguments included"},
			{exitRunCannot, "COMMAND was found but could not be started"},
			{exitRunNotFound, "COMMAND was not found"},
		},
		raw: true,
		flags: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			f := registerRun(fs)
			return func(ctx context.Context, c *cli, args []string) error {
				err := c.runCommand(ctx, fs, f, args)
				if errors.Is(err, flag.ErrHelp) {
					return &helpRequest{verb: "run"}
				}
				return err
			}
		},
	},
}

// help prints the help of the command name, or the global help.
func (c *cli) help(name string) {
	i := slices.IndexFunc(verbs, func(v verb) bool { return v.name == name })
	if i < 0 {
		c.globalHelp()
		return
	}
	v := verbs[i]
	fmt.Fprintf(c.out, "usage: leasectl [connection flags] %s %s\n\n%s\n", v.name, v.args, v.about)
	own := flag.NewFlagSet(v.name, flag.ContinueOnError)
	v.flags(own)
	if hasFlags(own) {
		fmt.Fprint(c.out, "\nflags:\n")
		printFlags(c.out, own)
	}
	fmt.Fprint(c.out, "\nconnection flags (before the command or among its flags):\n")
	printFlags(c.out, connectionFlags())
	fmt.Fprint(c.out, "\nexit status:\n")
	exits := slices.Clone(v.exits)
	if !v.raw {
		exits = append(exits, commonExits...)
	}
	slices.SortStableFunc(exits, func(a, b exitStatus) int { return a.code - b.code })
	for _, e := range exits {
		fmt.Fprintf(c.out, "  %d  %s\n", e.code, e.means)
	}
}

func (c *cli) globalHelp() {
	fmt.Fprint(c.out, "usage: leasectl [connection flags] command [flags] [arguments]\n       leasectl --version\n\ncommands:\n")
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	for _, v := range verbs {
		fmt.Fprintf(w, "  %s\t%s\n", v.name, v.summary)
	}
	w.Flush()
	fmt.Fprint(c.out, "\n'leasectl COMMAND --help' (or 'leasectl help COMMAND') shows a command's flags and exit statuses.\n")
	fmt.Fprint(c.out, "\nconnection flags (before the command or among its flags):\n")
	printFlags(c.out, connectionFlags())
	fmt.Fprint(c.out, `
exit status:
  0  done
  1  an error: the backend could not be reached, refused, or failed
  2  usage: an unknown command or flag, a missing argument, an invalid key
  3  the answer is "no" (each command's help says when)

With --json, stdout holds JSON (watch: one object a line); when a command
fails before it has an answer, an error object {"error", "kind", "exit"}.
`)
}

// connectionFlags returns a flag set with only the connection flags.
func connectionFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("leasectl", flag.ContinueOnError)
	new(config).register(fs)
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// printFlags prints the flags of fs, sorted, with their usage and their
// default when it is not the zero value.
func printFlags(out io.Writer, fs *flag.FlagSet) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if arg != "" {
			name += " " + arg
		}
		switch f.DefValue {
		case "", "0", "false", "0s":
		default:
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  %s\t%s\n", name, usage)
	})
	w.Flush()
}
