package fxmodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golib/lease/lease"
)

// BackendKind names the store that holds the leases.
type BackendKind string

// The backends the module can build. Valkey and Postgres coordinate
// replicas; Memory is process-local, for tests and single-process programs.
const (
	// Valkey keeps leases on the valkey.Client that the application
	// provides to the graph.
	Valkey BackendKind = "valkey"
	// Postgres keeps leases in a table reached through the *pgxpool.Pool
	// that the application provides to the graph.
	Postgres BackendKind = "postgres"
	// Memory keeps leases in this process only. It never coordinates
	// replicas.
	Memory BackendKind = "memory"
)

// DefaultTTL is the lease TTL when PolicyConfig.TTL is zero.
const DefaultTTL = 15 * time.Second

// Config configures the module. It is a plain struct so that it can be
// supplied with fx.Supply or decoded from the application's own
// configuration; like zap.Config it carries json and yaml tags. The zero
// value of every field except Owner and Backend means its default.
//
// Durations are time.Duration. gopkg.in/yaml.v3, mapstructure's duration
// hook and encoding/json (through UnmarshalJSON) read them as "15s";
// encoding/json also accepts integer nanoseconds.
//
// New validates the whole Config, so an invalid one fails fx.New with an
// error that names the field.
type Config struct {
	// Owner names this process to other holders and in logs, for example
	// "billing-worker/" + hostname. Required; it must pass
	// lease.ValidateOwner.
	Owner string `json:"owner" yaml:"owner"`

	// Preferred makes this process a preferred candidate for the leases it
	// waits for (lease.ClientOptions.Preferred): a newer version during a
	// rolling deploy, a replica in the primary's zone. A leader run with
	// RunOptions.Service.YieldToPreferred hands its lease over at its next
	// safe point; nothing takes a lease by force. Default false.
	Preferred bool `json:"preferred" yaml:"preferred"`

	// Backend chooses the store: Valkey, Postgres or Memory. Required.
	// Valkey needs a valkey.Client in the graph and Postgres a
	// *pgxpool.Pool; the module uses them and never closes them.
	Backend BackendKind `json:"backend" yaml:"backend"`

	// KeyPrefix is put in front of every key given to Leases (Acquire,
	// TryAcquire and Go), so that services sharing one store keep their
	// leases apart, for example "billing/". The *lease.Client in the graph
	// takes keys as they are. Default "".
	KeyPrefix string `json:"keyPrefix" yaml:"keyPrefix"`

	// Policy is the default lease policy: the lease.Policy in the graph
	// and the one Leases uses.
	Policy PolicyConfig `json:"policy" yaml:"policy"`

	// ReleaseTimeout bounds each release when the app stops (and at the
	// end of a term of a function run with Leases.Go). Releases run under
	// a context detached from the stop context, so that a lease is handed
	// back even when the stop deadline has passed. Default the policy's
	// OperationTimeout.
	ReleaseTimeout time.Duration `json:"releaseTimeout" yaml:"releaseTimeout"`

	// Valkey configures the Valkey backend; it is ignored by the others.
	Valkey ValkeyConfig `json:"valkey" yaml:"valkey"`

	// Postgres configures the PostgreSQL backend; it is ignored by the
	// others.
	Postgres PostgresConfig `json:"postgres" yaml:"postgres"`
}

// PolicyConfig holds the fields of lease.PolicyOptions. Zero means the
// default that lease.NewPolicy documents, except that a zero TTL means
// DefaultTTL.
type PolicyConfig struct {
	TTL              time.Duration `json:"ttl" yaml:"ttl"`
	RenewEvery       time.Duration `json:"renewEvery" yaml:"renewEvery"`
	SafetyMargin     time.Duration `json:"safetyMargin" yaml:"safetyMargin"`
	OperationTimeout time.Duration `json:"operationTimeout" yaml:"operationTimeout"`
	Retry            time.Duration `json:"retry" yaml:"retry"`
	Poll             time.Duration `json:"poll" yaml:"poll"`
	Wait             time.Duration `json:"wait" yaml:"wait"`
	MaxAttempts      int           `json:"maxAttempts" yaml:"maxAttempts"`
}

// Options returns p as lease.PolicyOptions, with DefaultTTL for a zero TTL.
func (p PolicyConfig) Options() lease.PolicyOptions {
	o := lease.PolicyOptions(p)
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	return o
}

// ValkeyConfig configures the Valkey backend.
type ValkeyConfig struct {
	// Prefix starts the name of every Valkey key and channel of the
	// backend (leasevalkey.Options.Prefix). Default "lease:".
	Prefix string `json:"prefix" yaml:"prefix"`

	// Check makes the app's start run the backend's server check
	// (leasevalkey.Store.Check: eviction policy, server version, ACL), so
	// that a server that could lose a held lease fails the start. Default
	// false.
	Check bool `json:"check" yaml:"check"`
}

// PostgresConfig configures the PostgreSQL backend.
type PostgresConfig struct {
	// Schema and Table name the lease table (leasepostgres.Options).
	// Default public.leases.
	Schema string `json:"schema" yaml:"schema"`
	Table  string `json:"table" yaml:"table"`

	// Migrate makes the app's start create or upgrade the lease table with
	// leasepostgres.Migrate, which is safe when several replicas start at
	// once. Leave it false when migrations are applied by another tool.
	// Default false.
	Migrate bool `json:"migrate" yaml:"migrate"`

	// Unlogged makes Migrate create the table UNLOGGED; read the trade-off
	// in package leasepostgres first. Default false.
	Unlogged bool `json:"unlogged" yaml:"unlogged"`

	// DisableNotify turns off release notifications
	// (leasepostgres.Options.DisableNotify), for example behind a
	// connection pooler in transaction mode. Default false.
	DisableNotify bool `json:"disableNotify" yaml:"disableNotify"`
}

// Validate checks every field of c that can be checked without the graph,
// and returns an error that names the first bad field, or nil.
func (c Config) Validate() error {
	_, err := c.policy()
	return err
}

// policy validates c and returns the default policy it describes.
func (c Config) policy() (lease.Policy, error) {
	bad := func(field string, err error) (lease.Policy, error) {
		return lease.Policy{}, fmt.Errorf("leasefx: Config.%s: %w", field, err)
	}
	if err := lease.ValidateOwner(c.Owner); err != nil {
		return bad("Owner", err)
	}
	switch c.Backend {
	case Valkey, Postgres, Memory:
	case "":
		return bad("Backend", fmt.Errorf("empty; set it to %q, %q or %q", Valkey, Postgres, Memory))
	default:
		return bad("Backend", fmt.Errorf("%q is not one of %q, %q and %q", c.Backend, Valkey, Postgres, Memory))
	}
	if c.KeyPrefix != "" {
		// A prefix is valid if a one-letter key after it is.
		if err := lease.ValidateKey(c.KeyPrefix + "x"); err != nil {
			return bad("KeyPrefix", err)
		}
	}
	p, err := lease.NewPolicy(c.Policy.Options())
	if err != nil {
		return bad("Policy", err)
	}
	if c.ReleaseTimeout < 0 {
		return bad("ReleaseTimeout", fmt.Errorf("%v must not be negative", c.ReleaseTimeout))
	}
	if c.Backend == Valkey && strings.ContainsAny(c.Valkey.Prefix, "{}") {
		return bad("Valkey.Prefix", errors.New("must not contain '{' or '}'"))
	}
	return p, nil
}

// UnmarshalJSON decodes c, reading ReleaseTimeout as a duration string
// such as "2s" (see time.ParseDuration) or as integer nanoseconds. Fields
// missing from the JSON keep their values.
func (c *Config) UnmarshalJSON(b []byte) error {
	type plain Config // without this method
	aux := struct {
		*plain
		ReleaseTimeout duration `json:"releaseTimeout"`
	}{plain: (*plain)(c), ReleaseTimeout: duration(c.ReleaseTimeout)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	c.ReleaseTimeout = time.Duration(aux.ReleaseTimeout)
	return nil
}

// UnmarshalJSON decodes p, reading each duration as a string such as
// "15s" (see time.ParseDuration) or as integer nanoseconds. Fields missing
// from the JSON keep their values.
func (p *PolicyConfig) UnmarshalJSON(b []byte) error {
	type plain PolicyConfig // without this method
	aux := struct {
		*plain
		TTL              duration `json:"ttl"`
		RenewEvery       duration `json:"renewEvery"`
		SafetyMargin     duration `json:"safetyMargin"`
		OperationTimeout duration `json:"operationTimeout"`
		Retry            duration `json:"retry"`
		Poll             duration `json:"poll"`
		Wait             duration `json:"wait"`
	}{
		plain:            (*plain)(p),
		TTL:              duration(p.TTL),
		RenewEvery:       duration(p.RenewEvery),
		SafetyMargin:     duration(p.SafetyMargin),
		OperationTimeout: duration(p.OperationTimeout),
		Retry:            duration(p.Retry),
		Poll:             duration(p.Poll),
		Wait:             duration(p.Wait),
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	p.TTL = time.Duration(aux.TTL)
	p.RenewEvery = time.Duration(aux.RenewEvery)
	p.SafetyMargin = time.Duration(aux.SafetyMargin)
	p.OperationTimeout = time.Duration(aux.OperationTimeout)
	p.Retry = time.Duration(aux.Retry)
	p.Poll = time.Duration(aux.Poll)
	p.Wait = time.Duration(aux.Wait)
	return nil
}

// duration is a time.Duration in JSON: a string for time.ParseDuration,
// or integer nanoseconds.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("duration %s: want a string such as \"15s\" or integer nanoseconds", b)
		}
		*d = duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}
