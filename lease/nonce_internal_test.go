package lease

import (
	"strings"
	"sync"
	"testing"
)

// TestNonces draws secrets from several goroutines, across many batches,
// and checks that each has crypto/rand.Text's form and that none repeats.
func TestNonces(t *testing.T) {
	if n := len(newNonceBatch().text); n != noncesPerBatch*nonceLen {
		t.Fatalf("a batch has %d characters, want %d secrets of %d", n, noncesPerBatch, nonceLen)
	}
	const goroutines, each = 8, 10 * noncesPerBatch
	got := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range got {
		wg.Go(func() {
			for range each {
				got[g] = append(got[g], newNonce())
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*each)
	for _, s := range got {
		for _, n := range s {
			if len(n) != nonceLen || strings.Trim(n, nonceAlphabet) != "" {
				t.Fatalf("nonce %q: want %d characters of %s", n, nonceLen, nonceAlphabet)
			}
			if seen[n] {
				t.Fatalf("nonce %q handed out twice", n)
			}
			seen[n] = true
		}
	}
}

// TestNonceAlphabet checks that every letter of the alphabet occurs, so a
// mapping that lost bits (fewer than 32 letters) fails.
func TestNonceAlphabet(t *testing.T) {
	var all strings.Builder
	for range 4 * noncesPerBatch {
		all.WriteString(newNonce())
	}
	for _, r := range nonceAlphabet {
		if !strings.ContainsRune(all.String(), r) {
			t.Fatalf("%q never occurs in %d characters", r, all.Len())
		}
	}
}
