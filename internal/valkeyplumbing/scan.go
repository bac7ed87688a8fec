package valkeyplumbing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	valkey "github.com/valkey-io/valkey-go"
)

// This file walks the keys of every primary behind a client with SCAN,
// for backends/valkey's List and Sweep, fence's and cache's sweepers.

// ErrWalk is matched by the errors of ScanPrimaries that are not the
// server's: a cursor it did not return, or a primary that went away
// during the walk. Nothing was sent for them.
var ErrWalk = errors.New("SCAN walk")

// CommandError is the error of ScanPrimaries when the server refused or
// failed one of the walk's own commands, ROLE or SCAN: Command names it,
// so that a caller can name the grant a refusal (NoPermission) asks for.
type CommandError struct {
	// Command is "ROLE" or "SCAN".
	Command string
	// Addr is the node's address.
	Addr string
	// Err is valkey-go's error.
	Err error
}

func (e *CommandError) Error() string { return e.Command + " on " + e.Addr + ": " + e.Err.Error() }

// Unwrap returns e.Err.
func (e *CommandError) Unwrap() error { return e.Err }

// globEscaper quotes the bytes that are special in a SCAN MATCH pattern.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

// GlobEscape returns s quoted for a SCAN MATCH pattern: it matches s
// itself and nothing else.
func GlobEscape(s string) string { return globEscaper.Replace(s) }

// Primaries returns the addresses of the primaries behind client, sorted,
// asking each node the client knows for its ROLE: on a cluster, every
// primary the client knows; standalone or with a sentinel, the one
// primary. The server's error to ROLE is a *CommandError.
func Primaries(ctx context.Context, client valkey.Client) ([]string, error) {
	var out []string
	for addr, c := range client.Nodes() {
		vals, err := c.Do(ctx, c.B().Role().Build()).ToArray()
		if err != nil {
			return nil, &CommandError{Command: "ROLE", Addr: addr, Err: err}
		}
		if len(vals) > 0 {
			if role, _ := vals[0].ToString(); role == "master" {
				out = append(out, addr)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// ScanPrimaries runs one SCAN, with MATCH match, TYPE typ (unless empty)
// and COUNT count, on one primary behind client, and returns the keys it
// found (possibly none, possibly repeated across pages) and the cursor of
// the next page, "" once every primary was scanned to its end. cursor is
// "" for the first page, then what the previous page returned: the SCAN
// cursor and the primary's address, "cursor@address". The primaries are
// scanned one after the other, in the order of Primaries. Replicas are
// never scanned.
//
// If the primary a cursor names is no longer one (a failover, a
// resharding), ScanPrimaries fails and the walk must start again: SCAN's
// own promise (every key present throughout the walk is returned) holds
// only within one primary's slots. The user needs SCAN and ROLE; the
// server's errors to them are *CommandError.
func ScanPrimaries(ctx context.Context, client valkey.Client, cursor, match, typ string, count int) (keys []string, next string, err error) {
	primaries, err := Primaries(ctx, client)
	if err != nil {
		return nil, "", err
	}
	if len(primaries) == 0 {
		return nil, "", fmt.Errorf("%w: the client knows no primary", ErrWalk)
	}
	addr, scan := primaries[0], uint64(0)
	if cursor != "" {
		n, a, ok := strings.Cut(cursor, "@")
		u, err := strconv.ParseUint(n, 10, 64)
		if !ok || err != nil {
			return nil, "", fmt.Errorf("%w: cursor %q is not one this walk returned", ErrWalk, cursor)
		}
		if !slices.Contains(primaries, a) {
			return nil, "", fmt.Errorf("%w: cursor names %s, which is no longer a primary (failover or resharding); start again from the first page", ErrWalk, a)
		}
		addr, scan = a, u
	}
	node := client.Nodes()[addr]
	if node == nil {
		return nil, "", fmt.Errorf("%w: the client no longer knows node %s; start again from the first page", ErrWalk, addr)
	}
	b := node.B().Scan().Cursor(scan).Match(match).Count(int64(count))
	var cmd valkey.Completed
	if typ != "" {
		cmd = b.Type(typ).Build()
	} else {
		cmd = b.Build()
	}
	entry, err := node.Do(ctx, cmd).AsScanEntry()
	if err != nil {
		return nil, "", &CommandError{Command: "SCAN", Addr: addr, Err: err}
	}
	switch i := slices.Index(primaries, addr); {
	case entry.Cursor != 0:
		next = strconv.FormatUint(entry.Cursor, 10) + "@" + addr
	case i+1 < len(primaries):
		next = "0@" + primaries[i+1]
	}
	return entry.Elements, next, nil
}
