package fxmodule_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	leasefx "github.com/golib/lease/fxmodule"
	"github.com/golib/lease/lease"
)

func TestInvalidConfigFailsNew(t *testing.T) {
	valid := leasefx.Config{Owner: "test", Backend: leasefx.Memory}
	tests := []struct {
		name   string
		change func(*leasefx.Config)
		want   string // in the error
		is     error
	}{
		{"no owner", func(c *leasefx.Config) { c.Owner = "" }, "Config.Owner", lease.ErrInvalidOwner},
		{"owner with newline", func(c *leasefx.Config) { c.Owner = "a\nb" }, "Config.Owner", lease.ErrInvalidOwner},
		{"no backend", func(c *leasefx.Config) { c.Backend = "" }, "Config.Backend: empty", nil},
		{"unknown backend", func(c *leasefx.Config) { c.Backend = "etcd" }, `Config.Backend: "etcd" is not one of`, nil},
		{"key prefix with control character", func(c *leasefx.Config) { c.KeyPrefix = "a\x00" }, "Config.KeyPrefix", lease.ErrInvalidKey},
		{"TTL too short", func(c *leasefx.Config) { c.Policy.TTL = time.Millisecond }, "Config.Policy: lease: invalid policy: TTL (1ms)", lease.ErrInvalidPolicy},
		{"renewal too late", func(c *leasefx.Config) { c.Policy.RenewEvery = 14 * time.Second }, "Config.Policy: lease: invalid policy: RenewEvery (14s)", lease.ErrInvalidPolicy},
		{"negative release timeout", func(c *leasefx.Config) { c.ReleaseTimeout = -time.Second }, "Config.ReleaseTimeout", nil},
		{"valkey prefix with brace", func(c *leasefx.Config) { c.Backend, c.Valkey.Prefix = leasefx.Valkey, "a{" }, "Config.Valkey.Prefix", nil},
		{"valkey without client", func(c *leasefx.Config) { c.Backend = leasefx.Valkey }, "the graph has no valkey.Client", nil},
		{"postgres without pool", func(c *leasefx.Config) { c.Backend = leasefx.Postgres }, "the graph has no *pgxpool.Pool", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid
			tt.change(&cfg)
			app := fx.New(fx.NopLogger, fx.Supply(cfg), leasefx.Module, fx.Invoke(func(*lease.Client) {}))
			err := app.Err()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("fx.New error = %v, want one containing %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v does not match %v", err, tt.is)
			}
			if _, err := leasefx.New(leasefx.Params{Config: cfg}); err == nil {
				t.Error("New succeeded")
			}
		})
	}
}

// TestBackendOptionsFailNew checks that options only the backend knows
// are also checked by New, before any I/O.
func TestBackendOptionsFailNew(t *testing.T) {
	// pgxpool.New connects lazily: this pool never dials.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cfg := leasefx.Config{Owner: "test", Backend: leasefx.Postgres, Postgres: leasefx.PostgresConfig{Table: strings.Repeat("t", 100)}}
	app := fx.New(fx.NopLogger, fx.Supply(cfg, pool), leasefx.Module, fx.Invoke(func(*lease.Client) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "Config.Postgres") {
		t.Fatalf("fx.New error = %v, want one naming Config.Postgres", err)
	}
}

func TestValidate(t *testing.T) {
	if err := (leasefx.Config{Owner: "test", Backend: leasefx.Postgres}).Validate(); err != nil {
		t.Errorf("Validate of a valid config = %v", err)
	}
	if err := (leasefx.Config{Owner: "test"}).Validate(); err == nil || !strings.Contains(err.Error(), "Config.Backend") {
		t.Errorf("Validate without a backend = %v, want an error naming Config.Backend", err)
	}
}

func TestPolicyDefaults(t *testing.T) {
	var policy lease.Policy
	app := fx.New(fx.NopLogger, fx.Supply(leasefx.Config{Owner: "test", Backend: leasefx.Memory}), leasefx.Module, fx.Populate(&policy))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if policy.TTL() != leasefx.DefaultTTL {
		t.Errorf("TTL = %v, want DefaultTTL", policy.TTL())
	}
	o := (leasefx.PolicyConfig{TTL: time.Minute, Wait: time.Second, MaxAttempts: 3}).Options()
	if o.TTL != time.Minute || o.Wait != time.Second || o.MaxAttempts != 3 {
		t.Errorf("Options() = %+v", o)
	}
}

func TestConfigFromJSON(t *testing.T) {
	in := `{
		"owner": "billing/host-1",
		"preferred": true,
		"backend": "postgres",
		"keyPrefix": "billing/",
		"releaseTimeout": "2s",
		"policy": {"ttl": "30s", "renewEvery": 5000000000, "maxAttempts": 3, "wait": "1m", "poll": "10s"},
		"postgres": {"migrate": true, "table": "billing_leases"}
	}`
	c := leasefx.Config{Policy: leasefx.PolicyConfig{Retry: time.Second}}
	if err := json.Unmarshal([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	want := leasefx.Config{
		Owner: "billing/host-1", Preferred: true, Backend: leasefx.Postgres, KeyPrefix: "billing/", ReleaseTimeout: 2 * time.Second,
		Policy:   leasefx.PolicyConfig{TTL: 30 * time.Second, RenewEvery: 5 * time.Second, Retry: time.Second, Poll: 10 * time.Second, Wait: time.Minute, MaxAttempts: 3},
		Postgres: leasefx.PostgresConfig{Migrate: true, Table: "billing_leases"},
	}
	if c != want {
		t.Errorf("decoded\n%+v\nwant\n%+v", c, want)
	}
	// What encoding/json writes, it reads back.
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var back leasefx.Config
	if err := json.Unmarshal(b, &back); err != nil || back != want {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	for _, bad := range []string{`{"releaseTimeout": "soon"}`, `{"policy": {"ttl": true}}`} {
		if err := json.Unmarshal([]byte(bad), &c); err == nil {
			t.Errorf("%s decoded without error", bad)
		}
	}
}
