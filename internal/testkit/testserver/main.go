package testserver

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// mainRunning is set while [Main] runs the tests.
var mainRunning atomic.Bool

// Main runs the tests of m, then stops the shared servers and deletes their
// data. It first deletes directories left behind by earlier test binaries that
// were killed. A package's TestMain calls it as
//
//	os.Exit(testserver.Main(m))
//
// and returns its result as the exit code. Dedicated servers don't need Main:
// they are stopped when their test ends.
func Main(m *testing.M) int {
	removeStaleDirs()
	mainRunning.Store(true)
	defer mainRunning.Store(false)
	defer stopShared()
	return m.Run()
}

var shared struct {
	mu    sync.Mutex
	stops []func()
}

// onStopShared registers stop to run, in reverse order of registration, when
// [Main] has run the tests.
func onStopShared(stop func()) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.stops = append(shared.stops, stop)
}

func stopShared() {
	shared.mu.Lock()
	stops := shared.stops
	shared.stops = nil
	shared.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	// Dedicated servers went with their tests, so the spawner can go too.
	stopSpawner()
	valkeyShared.reset()
	clusterShared.reset()
	postgresShared.reset()
}

// lazy holds a shared server that is started by the first test that asks for
// it. A start that failed is remembered too: the tests after it get the same
// error at once instead of each waiting for another failed start.
type lazy[T any] struct {
	mu   sync.Mutex
	done bool
	val  T
	err  error
}

// get returns the value, calling start if no earlier call did. Concurrent
// callers wait for the one that starts it.
func (l *lazy[T]) get(start func() (T, error)) (T, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.val, l.err = start()
		l.done = true
	}
	return l.val, l.err
}

// reset forgets the value, so the next get starts again.
func (l *lazy[T]) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	var zero T
	l.done, l.val, l.err = false, zero, nil
}

// dirPrefix starts the name of every directory this package creates in
// [os.TempDir]; the creating process's ID follows it.
const dirPrefix = "lease-testserver-"

// makeDir creates a fresh directory for one server.
func makeDir(kind string) (string, error) {
	return os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-"+kind+"-")
}

// removeStaleDirs deletes the directories of test binaries that are no longer
// running. Their servers died with them (see the parent-death signal in
// proc.go); a directory whose process still runs, or whose name doesn't
// parse, is left alone.
func removeStaleDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range matches {
		rest := strings.TrimPrefix(filepath.Base(dir), dirPrefix)
		pidText, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}
