package chaos

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is an in-process toxiproxy proxy in front of one server, on a
// loopback address that stays the same for its life. Its methods are safe
// for concurrent use.
//
// Every change (adding toxics, healing, cutting, a new upstream) replaces
// the running toxiproxy proxy with a new one on the same address, with its
// toxics in place before it accepts a connection, and so closes every open
// connection. toxiproxy 2.5.0 can deadlock when a toxic is added to or
// removed from a connection that is closing (a toxic blocked sending to a
// link whose writer has gone never takes the interrupt, and the writer
// waits for the lock the change holds); a proxy that never changes under
// its connections avoids that. The goroutines of such dead links stay
// blocked for good; TestMain ignores them.
type Proxy struct {
	name string

	mu       sync.Mutex
	listen   string
	upstream string
	toxics   []Toxic
	cur      *toxiproxy.Proxy
}

// quiet silences toxiproxy's toxics, which log through zerolog's global
// logger.
var quiet sync.Once

// NewProxy starts a proxy to upstream (host:port) on a free loopback port.
func NewProxy(name, upstream string) (*Proxy, error) {
	quiet.Do(func() { zerolog.SetGlobalLevel(zerolog.Disabled) })
	p := &Proxy{name: name, listen: "127.0.0.1:0", upstream: upstream}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p, p.restart(nil)
}

// restart replaces the running proxy with one that has toxics. The caller
// holds p.mu.
func (p *Proxy) restart(toxics []Toxic) error {
	if p.cur != nil {
		p.cur.Stop()
		p.cur = nil
	}
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	tp := toxiproxy.NewProxy(server, p.name, p.listen, p.upstream)
	for i, t := range toxics {
		b, err := json.Marshal(struct {
			Toxic
			Name string `json:"name"`
		}{t, fmt.Sprintf("%s_%s_%d", t.Type, t.Stream, i)})
		if err != nil {
			return err
		}
		if _, err := tp.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
			return fmt.Errorf("chaos: add toxic %v: %w", t, err)
		}
	}
	if err := tp.Start(); err != nil {
		return fmt.Errorf("chaos: start proxy on %s to %s: %w", p.listen, p.upstream, err)
	}
	p.listen, p.cur, p.toxics = tp.Listen, tp, toxics
	return nil
}

// Addr returns the address clients dial instead of the upstream.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listen
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

// Add adds toxics for every new connection; open connections are closed.
func (p *Proxy) Add(toxics ...Toxic) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restart(append(append([]Toxic(nil), p.toxics...), toxics...))
}

// Heal removes every toxic; open connections are closed, as the kernel
// closes connections that outlived a long enough fault.
func (p *Proxy) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.toxics) == 0 {
		return nil
	}
	return p.restart(nil)
}

// Cut closes every connection through the proxy; new ones are accepted
// as before.
func (p *Proxy) Cut() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restart(p.toxics)
}

// SetUpstream closes every connection through the proxy and forwards new
// ones to upstream, on the same address.
func (p *Proxy) SetUpstream(upstream string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = upstream
	return p.restart(p.toxics)
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		p.cur.Stop()
		p.cur = nil
	}
}
