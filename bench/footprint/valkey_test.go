package footprint_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

func valkeyClient(b *testing.B, addr string) valkey.Client {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// A valkeyMeter takes the footprint of a whole Valkey server: used_memory
// (INFO memory) and DBSIZE, and the largest of each seen every half
// second while it runs.
type valkeyMeter struct {
	client    valkey.Client
	version   string
	startKeys int64

	mu               sync.Mutex
	maxUsed, maxKeys int64
}

func newValkeyMeter(b *testing.B, client valkey.Client) *valkeyMeter {
	m := &valkeyMeter{client: client}
	info, err := client.Do(context.Background(), client.B().Info().Section("server").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	m.version = infoField(info, "valkey_version")
	if m.version == "" {
		m.version = "redis " + infoField(info, "redis_version")
	}
	return m
}

// start waits, up to a retention, for the server to hold no key, and for
// used_memory to hold still, notes the keys at the start, which should be
// none, and starts watching the peak: records end during the drive, so the largest
// footprint is not necessarily the one after it.
func (m *valkeyMeter) start(b *testing.B, cfg config) {
	ctx := context.Background()
	// Records of an earlier story on the same server (the last point's)
	// end within a retention.
	for deadline := time.Now().Add(cfg.retention + 5*time.Second); ; {
		_, keys, err := m.memory(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if keys == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := m.steady(ctx); err != nil {
		b.Fatal(err)
	}
	_, keys, err := m.memory(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if keys != 0 {
		progress("valkey: the server holds %d keys before the run: its footprint is not only this run's", keys)
	}
	m.startKeys = keys
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			if used, keys, err := m.memory(sctx); err == nil {
				m.mu.Lock()
				m.maxUsed, m.maxKeys = max(m.maxUsed, used), max(m.maxKeys, keys)
				m.mu.Unlock()
			}
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	b.Cleanup(func() { stop(); <-done })
}

// steady waits, up to a minute, until used_memory moves by less than 0.2%
// in a second: the server frees and shrinks in the background after big
// deletions (the warm-up's, the expiry's, a prune's).
func (m *valkeyMeter) steady(ctx context.Context) error {
	var last int64
	for range 60 {
		used, _, err := m.memory(ctx)
		if err != nil {
			return err
		}
		if last > 0 && math.Abs(float64(used-last)) <= 0.002*float64(last) {
			return nil
		}
		last = used
		time.Sleep(time.Second)
	}
	return nil
}

// memory returns the server's used_memory (INFO memory) and DBSIZE.
func (m *valkeyMeter) memory(ctx context.Context) (used, keys int64, err error) {
	info, err := m.client.Do(ctx, m.client.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		return 0, 0, err
	}
	if used, err = strconv.ParseInt(infoField(info, "used_memory"), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("INFO memory: used_memory: %w", err)
	}
	keys, err = m.client.Do(ctx, m.client.B().Dbsize().Build()).AsInt64()
	return used, keys, err
}

func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (m *valkeyMeter) work(ctx context.Context) ([]figure, error) {
	info, err := m.client.Do(ctx, m.client.B().Info().Section("stats").Build()).ToString()
	if err != nil {
		return nil, err
	}
	n, err := strconv.ParseInt(infoField(info, "expired_keys"), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("INFO stats: expired_keys: %w", err)
	}
	return []figure{{"keys expired meanwhile", "expired-keys", float64(n)}}, nil
}

func (m *valkeyMeter) beforeSweep(context.Context) error { return nil }

func (m *valkeyMeter) snapshot(ctx context.Context, name string) (stage, error) {
	used, keys, err := m.memory(ctx)
	if err != nil {
		return stage{}, err
	}
	st := stage{name: name, figs: []figure{
		{"used_memory", "used-bytes", float64(used)},
		{"keys (DBSIZE)", "keys", float64(keys)},
	}}
	if name == "peak" {
		m.mu.Lock()
		st.figs = append(st.figs,
			figure{"largest used_memory seen so far", "max-used-bytes", float64(max(m.maxUsed, used))},
			figure{"most keys seen so far", "max-keys", float64(max(m.maxKeys, keys))})
		m.mu.Unlock()
	}
	return st, nil
}

// settle waits until the server holds at most one key more than at the
// start (the sweep's own lease record, kept for its retention) or wait
// has passed, and until used_memory has stopped moving (the server
// shrinks its key table in the background), then takes the stage
// "after".
func (m *valkeyMeter) settle(ctx context.Context, wait time.Duration) ([]stage, error) {
	start := time.Now()
	for {
		_, keys, err := m.memory(ctx)
		if err != nil {
			return nil, err
		}
		if keys <= m.startKeys+1 {
			break
		}
		if time.Since(start) > wait {
			progress("valkey: %d keys left after %v; taking the footprint anyway", keys, time.Since(start).Round(time.Second))
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := m.steady(ctx); err != nil {
		return nil, err
	}
	took := time.Since(start)
	progress("valkey: keys and memory settled in %v", took.Round(time.Millisecond))
	st, err := m.snapshot(ctx, "after")
	if err != nil {
		return nil, err
	}
	st.figs = append(st.figs, figure{"keys and memory settled after the sweep in", "settle-s", took.Seconds()})
	return []stage{st}, nil
}

func (m *valkeyMeter) footprintGoal(stages []stage) (string, bool) {
	start, after := stages[0], stages[len(stages)-1]
	r := after.get("used-bytes") / start.get("used-bytes")
	return fmt.Sprintf("used_memory after the retention and a sweep within 5%% of the start: %.3f MB / %.3f MB = %.3f; keys %d (start %d; the sweep's own lease record is kept for its retention)",
		after.get("used-bytes")/1e6, start.get("used-bytes")/1e6, r, int64(after.get("keys")), int64(start.get("keys"))), math.Abs(r-1) <= 0.05
}

// valkeyBackend measures the lease records on the shared Valkey server
// of the test harness (or LEASE_VALKEY_ADDR): used_memory and DBSIZE are
// the whole server's, so point LEASE_VALKEY_ADDR only at a server of its
// own. The control is a dedicated server, flushed before each point.
type valkeyBackend struct {
	*valkeyMeter
	store     *leasevalkey.Store
	ctlClient valkey.Client
	tgt, ctl  *side
}

func openValkey(b *testing.B, cfg config) backend {
	ctx := context.Background()
	client := valkeyClient(b, testserver.Valkey(b).Addr())
	be := &valkeyBackend{valkeyMeter: newValkeyMeter(b, client)}
	var err error
	if be.store, err = leasevalkey.New(client, leasevalkey.Options{Retention: cfg.retention}); err != nil {
		b.Fatal(err)
	}
	be.ctlClient = valkeyClient(b, testserver.StartValkey(b, testserver.ValkeyOptions{}).Addr())
	ctlStore, err := leasevalkey.New(be.ctlClient, leasevalkey.Options{Retention: cfg.retention})
	if err != nil {
		b.Fatal(err)
	}
	be.tgt, be.ctl = newSide(b, be.store, "k"), newSide(b, ctlStore, "c")

	// The start is the server with the client connected and every script
	// of the run loaded (warm-up pairs and one sweep), but no record: those
	// the warm-up wrote are deleted.
	for _, s := range []*side{be.tgt, be.ctl} {
		if err := warmUp(ctx, s, cfg); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := be.tgt.client.Sweep(ctx); err != nil {
		b.Fatal(err)
	}
	records := []string{be.store.RecordKey(lease.SweepKey)}
	for i := range cfg.warmups() {
		records = append(records, be.store.RecordKey(fmt.Sprintf("w%07d", i)))
	}
	for chunk := range slices.Chunk(records, 1000) {
		if err := client.Do(ctx, client.B().Del().Key(chunk...).Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
	be.start(b, cfg)
	return be
}

func (be *valkeyBackend) target() driver  { return be.tgt }
func (be *valkeyBackend) control() driver { return be.ctl }
func (be *valkeyBackend) what() string    { return "acquire→release pairs (latency: the pair)" }

func (be *valkeyBackend) resetControl(ctx context.Context) error {
	return be.ctlClient.Do(ctx, be.ctlClient.B().Flushall().Sync().Build()).Error()
}

func (be *valkeyBackend) sweep(ctx context.Context) (int, string, error) {
	n, err := be.tgt.client.Sweep(ctx)
	return n, "Client.Sweep", err
}

// settle waits for the server's expiry to delete the released records
// (their TTL is the retention) for up to three minutes.
func (be *valkeyBackend) settle(ctx context.Context) ([]stage, error) {
	return be.valkeyMeter.settle(ctx, 3*time.Minute)
}

func (be *valkeyBackend) describe(cfg config) string {
	return fmt.Sprintf("lease records, Valkey %s, standalone, Retention %v, used_memory and DBSIZE of the whole server; control: a dedicated server", be.version, cfg.retention)
}
