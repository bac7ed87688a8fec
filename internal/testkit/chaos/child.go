package chaos

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/golib/lease/lease"
)

// EnvChild names the variable that, when set, makes the test binary run as
// a child client (see RunChild) instead of running tests. Its value is the
// ChildConfig as JSON.
const EnvChild = "LEASE_CHAOS_CHILD"

// ChildConfig configures a child client process.
type ChildConfig struct {
	// Name prefixes the child's lanes ("c1") and names its clients.
	Name   string `json:"name"`
	Target Target `json:"target"`
	Keys   []string
	Policy lease.PolicyOptions
	// Clients is the number of clients in the child. Default 1.
	Clients int    `json:"clients,omitempty"`
	Seed    uint64 `json:"seed,omitempty"`
	// StopInTxEvery makes the child stop itself with SIGSTOP inside every
	// n-th fenced PostgreSQL transaction that writes a value, after the
	// write, with its row locks held, once it has recorded a KindEvent
	// "stopped inside a transaction". The parent continues it. 0: never.
	StopInTxEvery int `json:"stop_in_tx_every,omitempty"`
	// Semaphore, Permits and SetSize are the Options of the same names:
	// the child's clients take permits and sets too.
	Semaphore string `json:"semaphore,omitempty"`
	Permits   int    `json:"permits,omitempty"`
	SetSize   int    `json:"set_size,omitempty"`
}

// EventStoppedInTx is the KindEvent a child records just before it stops
// itself inside a transaction (see ChildConfig.StopInTxEvery).
const EventStoppedInTx = "stopped inside a transaction"

// IsChild reports whether this process was started as a child client.
func IsChild() bool { return os.Getenv(EnvChild) != "" }

// RunChild runs this process as a child client, as configured by
// LEASE_CHAOS_CHILD, and returns its exit code. The clients make late
// writes (see workerOptions.LateWrites) and write every operation to
// standard output as a JSON line; they stop when standard input reaches
// its end or on SIGTERM.
func RunChild() int {
	var cfg ChildConfig
	if err := json.Unmarshal([]byte(os.Getenv(EnvChild)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaos child: %s: %v\n", EnvChild, err)
		return 2
	}
	if err := runChild(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaos child %s: %v\n", cfg.Name, err)
		return 1
	}
	return 0
}

func runChild(cfg ChildConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
		cancel()
	}()
	p, err := lease.NewPolicy(cfg.Policy)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	rec := NewRecorder(flushWriter{out})
	lanes := NewLanes(cfg.Name)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	var writes atomic.Int64
	open := func(ctx context.Context, name string) (lease.Backend, Store, func(), error) {
		b, s, closeFn, err := cfg.Target.Open(ctx, name)
		if err != nil || cfg.StopInTxEvery <= 0 {
			return b, s, closeFn, err
		}
		stop := func() {
			if writes.Add(1)%int64(cfg.StopInTxEvery) != 0 {
				return
			}
			rec.Add(Op{Lane: cfg.Name + "/stop", Kind: KindEvent, Fault: EventStoppedInTx, Outcome: OK, Call: rec.Now(), Return: rec.Now()})
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
		switch s := s.(type) {
		case *PostgresStore:
			s.InTx = stop
		case *GuardedPostgresStore:
			s.InTx = stop
		}
		return b, s, closeFn, nil
	}
	for i := range max(cfg.Clients, 1) {
		w, closeFn, err := newWorker(ctx, workerOptions{
			Options: Options{Keys: cfg.Keys, Policy: p, Open: open, Clock: lease.SystemClock(), Hold: 2 * p.TTL(),
				Semaphore: cfg.Semaphore, Permits: cmp.Or(cfg.Permits, 2), SetSize: min(cfg.SetSize, len(cfg.Keys))},
			Name: fmt.Sprintf("chaos-%s-%d", cfg.Name, i), Lanes: lanes, Rec: rec, Seed: cfg.Seed*1000 + uint64(i), LateWrites: true,
		})
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer closeFn()
			if err := w.run(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// flushWriter flushes after every write, so that the parent sees each
// operation as soon as it is recorded.
type flushWriter struct{ w *bufio.Writer }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.w.Flush()
	}
	return n, err
}

// Child is a child client process started by StartChild.
type Child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *syncBuffer
	read   chan struct{} // closed when its output has been read to the end
	waited chan struct{} // closed when it has exited
	err    error         // from Wait, set before waited is closed
}

// StartChild starts the test binary again as a child client configured by
// cfg; the operations it prints go to rec. The child is in a process group of its own, so that
// if this process dies while the child is stopped, the kernel ends it.
func StartChild(rec *Recorder, cfg ChildConfig) (*Child, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvChild+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c := &Child{cmd: cmd, stderr: &syncBuffer{}, read: make(chan struct{}), waited: make(chan struct{})}
	cmd.Stderr = c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(c.read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var op Op
			if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
				fmt.Fprintf(c.stderr, "chaos: unreadable line from the child: %q\n", sc.Bytes())
				continue
			}
			rec.Add(op)
		}
	}()
	go func() {
		<-c.read // Wait closes stdout; read it all first
		c.err = cmd.Wait()
		close(c.waited)
	}()
	return c, nil
}

// PID returns the child's process ID.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Pause stops the child with SIGSTOP.
func (c *Child) Pause() error { return c.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues the child with SIGCONT.
func (c *Child) Resume() error { return c.cmd.Process.Signal(syscall.SIGCONT) }

// Stop resumes the child, asks it to stop by closing its standard input,
// and waits up to timeout for it to exit, then kills it. It returns an
// error if the child failed, with what it printed on standard error.
func (c *Child) Stop(timeout time.Duration) error {
	_ = c.Resume()
	_ = c.stdin.Close()
	select {
	case <-c.waited:
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.waited
		return fmt.Errorf("chaos: the child did not stop within %v; killed it\n%s", timeout, c.stderr)
	}
	if c.err != nil {
		return fmt.Errorf("chaos: the child failed: %w\n%s", c.err, c.stderr)
	}
	return nil
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
