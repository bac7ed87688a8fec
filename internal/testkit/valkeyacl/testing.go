package valkeyacl

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"
)

// Login creates (or replaces) the user name with rule on the server at
// addr, through admin, and returns a client logged in as that user, with
// valkey-go's default options otherwise (client-side caching on), closed
// when t ends. The password in every rule of this package is "secret".
func Login(t testing.TB, admin valkey.Client, addr, name, rule string) valkey.Client {
	t.Helper()
	return LoginCluster(t, []valkey.Client{admin}, []string{addr}, name, rule)
}

// LoginCluster is Login on the nodes of a cluster, at addrs: it creates
// the user through each client of admins (one per node; ACL rules are
// not shared between nodes).
func LoginCluster(t testing.TB, admins []valkey.Client, addrs []string, name, rule string) valkey.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, admin := range admins {
		if err := admin.Do(ctx, admin.B().AclSetuser().Username(name).Rule(strings.Fields(rule)...).Build()).Error(); err != nil {
			t.Fatalf("ACL SETUSER %s %s: %v", name, rule, err)
		}
	}
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, Username: name, Password: "secret"})
	if err != nil {
		t.Fatalf("log in as %s: %v", name, err)
	}
	t.Cleanup(c.Close)
	return c
}

// Forbidden lists commands that a user with any rule of this package must
// be refused, as they would read, destroy or reconfigure other tenants'
// data: the key is a key outside every prefix of the rules.
func Forbidden(key string) [][]string {
	return [][]string{
		{"KEYS", "*"},
		{"SCAN", "0"},
		{"FLUSHALL"},
		{"FLUSHDB"},
		{"SWAPDB", "0", "1"},
		{"SCRIPT", "FLUSH"},
		{"SCRIPT", "KILL"},
		{"FUNCTION", "FLUSH"},
		{"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"},
		{"CONFIG", "GET", "*"},
		{"DEBUG", "SLEEP", "0"},
		{"ACL", "SETUSER", "intruder", "on", "nopass", "+@all", "~*"},
		{"SHUTDOWN", "NOSAVE"},
		{"MONITOR"},
		{"CLIENT", "KILL", "TYPE", "normal"},
		{"MIGRATE", "127.0.0.1", "1", key, "0", "1000"},
		{"GET", key},
		{"HMGET", key, "token"},
		{"HSET", key, "token", "1"},
		{"DEL", key},
		{"PUBLISH", key, "x"},
		{"SPUBLISH", key, "x"},
		// A script may call only what the user may call, on its keys.
		{"EVAL", "return redis.call('HSET', KEYS[1], 'token', '1')", "1", key},
		{"EVAL", "return redis.call('FLUSHALL')", "0"},
	}
}

// CheckForbidden runs every command of Forbidden(key) as c and fails t
// for each one that is not refused with NOPERM (or, inside a script, the
// server's ACL failure), and afterwards checks, through admin, that key
// still holds what it held.
func CheckForbidden(t testing.TB, admin, c valkey.Client, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin.Do(ctx, admin.B().Set().Key(key).Value("other tenant").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range Forbidden(key) {
		err := c.Do(ctx, c.B().Arbitrary(cmd...).Build()).Error()
		if !Refused(err) {
			t.Errorf("%s as the ACL user: %v; want NOPERM", strings.Join(cmd, " "), err)
		}
	}
	if v, err := admin.Do(ctx, admin.B().Get().Key(key).Build()).ToString(); err != nil || v != "other tenant" {
		t.Errorf("the other tenant's key %q holds %q, %v after the refused commands", key, v, err)
	}
}

// Refused reports whether err is the server refusing a command for want
// of an ACL permission.
func Refused(err error) bool {
	if e, ok := valkey.IsValkeyErr(err); ok {
		msg := e.Error()
		return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "NOPERM") || strings.Contains(msg, "ACL failure in script")
	}
	return false
}

// CheckAllUsed fails t for each command that rule grants and that the
// server at admin has not run since its start (INFO commandstats counts
// the commands of scripts too), except those in unused: a rule is only
// command-minimal if every grant is needed by what the test ran. Run the
// test on a server of its own, started for it.
//
// SCRIPT LOAD is never required to have run: valkey-go loads each script
// once per process, with the first call on any server (refused, that
// call fails), and uses EVALSHA and EVAL afterwards, so in a test binary
// an earlier test may have loaded it on another server.
func CheckAllUsed(t testing.TB, admin valkey.Client, rule string, unused ...string) {
	unused = append(unused, "script|load")
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stats, err := admin.Do(ctx, admin.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(rule) {
		cmd, ok := strings.CutPrefix(f, "+")
		if !ok || slices.Contains(unused, cmd) {
			continue
		}
		if !strings.Contains(stats, "cmdstat_"+cmd+":calls=") {
			t.Errorf("the rule grants %s, which nothing ran", cmd)
		}
	}
}
