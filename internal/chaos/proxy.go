package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is an in-process toxiproxy proxy in front of one server, on a free
// loopback port. Its methods are safe for concurrent use.
type Proxy struct {
	p *toxiproxy.Proxy
}

// quiet silences toxiproxy's toxics, which log through zerolog's global
// logger.
var quiet sync.Once

// NewProxy starts a proxy to upstream (host:port).
func NewProxy(name, upstream string) (*Proxy, error) {
	quiet.Do(func() { zerolog.SetGlobalLevel(zerolog.Disabled) })
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(server, name, "127.0.0.1:0", upstream)
	if err := server.Collection.Add(p, true); err != nil {
		return nil, fmt.Errorf("chaos: start proxy to %s: %w", upstream, err)
	}
	return &Proxy{p: p}, nil
}

// Addr returns the address clients dial instead of the upstream.
func (p *Proxy) Addr() string {
	p.p.Lock()
	defer p.p.Unlock()
	return p.p.Listen
}

// Toxic is one toxiproxy toxic: its type ("latency", "timeout",
// "reset_peer", "limit_data", "slicer", "bandwidth"), its stream
// ("upstream" from client to server, "downstream" back) and its
// attributes, as toxiproxy's HTTP API takes them.
type Toxic struct {
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Attributes map[string]any `json:"attributes"`
}

func (t Toxic) String() string {
	b, _ := json.Marshal(t.Attributes)
	return fmt.Sprintf("%s %s %s", t.Type, t.Stream, b)
}

// Both returns the toxic on both streams.
func Both(typ string, attrs map[string]any) []Toxic {
	return []Toxic{{typ, "upstream", attrs}, {typ, "downstream", attrs}}
}

// Add adds toxics to every connection, open or new.
func (p *Proxy) Add(toxics ...Toxic) error {
	for _, t := range toxics {
		b, err := json.Marshal(struct {
			Toxic
			Name string `json:"name"`
		}{t, t.Type + "_" + t.Stream})
		if err != nil {
			return err
		}
		if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
			return fmt.Errorf("chaos: add toxic %v: %w", t, err)
		}
	}
	return nil
}

// Heal removes every toxic.
func (p *Proxy) Heal() { p.p.Toxics.ResetToxics(context.Background()) }

// Cut closes every connection through the proxy; new ones are accepted
// as before.
func (p *Proxy) Cut() error { return p.SetUpstream(p.upstream()) }

func (p *Proxy) upstream() string {
	p.p.Lock()
	defer p.p.Unlock()
	return p.p.Upstream
}

// SetUpstream closes every connection through the proxy and forwards new
// ones to upstream, on the same address.
func (p *Proxy) SetUpstream(upstream string) error {
	addr := p.Addr()
	p.p.Stop()
	return p.p.Update(&toxiproxy.Proxy{Listen: addr, Upstream: upstream, Enabled: true})
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() { p.p.Stop() }
