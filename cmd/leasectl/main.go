package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

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

// usageError is an error in the command line. verb is the command whose
// help explains it, "" for the global help.
type usageError struct {
	verb string
	msg  string
}

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// negative is a "no" answer: exit status 3 with a message.
type negative struct{ msg string }

func (e *negative) Error() string { return e.msg }

// helpRequest asks for the help of verb ("" for the global help).
type helpRequest struct{ verb string }

func (h *helpRequest) Error() string { return "help requested" }

// countingWriter is an io.Writer that remembers whether anything was
// written, so that run prints a JSON error object only on an empty stdout.
type countingWriter struct {
	w io.Writer
	n int64
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}

// cli is one run of the command.
type cli struct {
	cfg    config
	out    *countingWriter
	errOut io.Writer
	getenv func(string) string
}

// run runs leasectl with args and returns its exit status.
func run(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) int {
	c := &cli{out: &countingWriter{w: out}, errOut: errOut, getenv: getenv}
	err := c.dispatch(ctx, args)
	if err == nil {
		return exitOK
	}
	var (
		help *helpRequest
		ue   *usageError
		neg  *negative
		st   *statusError
	)
	if errors.As(err, &help) {
		c.help(help.verb)
		return exitOK
	}
	if errors.As(err, &st) {
		if st.msg != "" {
			fmt.Fprintf(errOut, "leasectl: %s\n", st.msg)
		}
		return st.code
	}
	code, kind := exitError, "error"
	switch {
	case errors.As(err, &ue), errors.Is(err, lease.ErrInvalidKey):
		code, kind = exitUsage, "usage"
	case errors.As(err, &neg):
		code, kind = exitNegative, "negative"
	case errors.Is(err, lease.ErrIndeterminate):
		kind = "indeterminate"
	}
	fmt.Fprintf(errOut, "leasectl: %v\n", err)
	if ue != nil {
		if ue.verb != "" {
			fmt.Fprintf(errOut, "run 'leasectl %s --help' for its usage\n", ue.verb)
		} else {
			fmt.Fprint(errOut, "run 'leasectl --help' for usage\n")
		}
	}
	// With --json, stdout always holds a JSON document: the command's
	// answer, or, when it has none, this error object.
	if (c.cfg.json || jsonRequested(args)) && c.out.n == 0 {
		enc := json.NewEncoder(c.out)
		enc.SetEscapeHTML(false)
		enc.Encode(struct {
			Error string `json:"error"`
			Kind  string `json:"kind"`
			Exit  int    `json:"exit"`
		}{err.Error(), kind, code})
	}
	return code
}

// jsonRequested reports whether args ask for --json, for the errors that
// end the run before the flags are parsed (an unknown flag, say).
func jsonRequested(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		on = true
		if hasVal {
			on, _ = strconv.ParseBool(val)
		}
	}
	return on
}

// version returns the module version leasectl was built from, "(devel)"
// when the build does not say (go build in a checkout, go run).
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok || info.Main.Version == "" {
		return "(devel)"
	}
	return info.Main.Version
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
// ("--" ends the flags), and returns the arguments. verb names the command
// in errors.
func parse(fs *flag.FlagSet, verb string, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &helpRequest{verb: verb}
			}
			return nil, &usageError{verb: verb, msg: fmt.Sprintf("%s: %v", verb, err)}
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
	showVersion := global.Bool("version", false, "print leasectl's version and exit")
	runs := make(map[string]func(context.Context, *cli, []string) error, len(verbs))
	sets := make(map[string]*flag.FlagSet, len(verbs))
	raw := make(map[string]bool)
	for _, v := range verbs {
		fs := c.newFlags(v.name)
		runs[v.name], sets[v.name], raw[v.name] = v.flags(fs), fs, v.raw
	}

	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &helpRequest{}
		}
		return usagef("%v", err)
	}
	if *showVersion {
		fmt.Fprintf(c.out, "leasectl %s\n", version())
		return nil
	}
	rest := global.Args()
	if len(rest) == 0 {
		return usagef("no command")
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		if len(rest) > 0 {
			if _, ok := sets[rest[0]]; !ok {
				return usagef("help: unknown command %q", rest[0])
			}
			return &helpRequest{verb: rest[0]}
		}
		return &helpRequest{}
	}
	fs, ok := sets[name]
	if !ok {
		return usagef("unknown command %q", name)
	}
	pos := rest
	if !raw[name] {
		var err error
		if pos, err = parse(fs, name, rest); err != nil {
			return err
		}
	}
	err := runs[name](ctx, c, pos)
	var ue *usageError
	if errors.As(err, &ue) && ue.verb == "" {
		ue.verb = name
	}
	return err
}

// one returns the one positional argument of verb, what it is.
func one(verb, what string, pos []string) (string, error) {
	if len(pos) != 1 {
		return "", usagef("%s takes one %s, got %d arguments", verb, what, len(pos))
	}
	return pos[0], nil
}

// oneKey returns the one positional argument of verb, a lease key,
// checked before any I/O.
func oneKey(verb string, pos []string) (string, error) {
	key, err := one(verb, "key", pos)
	if err != nil {
		return "", err
	}
	return key, lease.ValidateKey(key)
}

// none fails unless verb got no positional argument.
func none(verb string, pos []string) error {
	if len(pos) != 0 {
		return usagef("%s takes no arguments, got %q", verb, pos)
	}
	return nil
}

// withTarget connects, runs f and disconnects.
func (c *cli) withTarget(ctx context.Context, f func(*target) error) error {
	t, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer t.close()
	return grantHint(f(t))
}

// op returns a context bounding one operation by --timeout.
func (c *cli) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.timeout)
}
