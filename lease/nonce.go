package lease

import (
	"crypto/rand"
	"sync/atomic"
)

// An acquisition's secret (AcquireRequest.Nonce) is made as
// crypto/rand.Text makes its strings: 26 characters, each chosen from a
// 32-letter alphabet by 5 bits read from crypto/rand, so 130 bits from
// the operating system's generator, and no code of ours between the
// generator and the secret but the alphabet lookup.
//
// What differs is the batching: one crypto/rand read fills
// noncesPerBatch secrets at once, and each acquisition takes its own
// substring of the batch, so that a secret costs neither an allocation
// nor a call into the generator of its own. Secrets of one batch are as
// independent as the generator's bytes: knowing any number of them says
// nothing about the others. Each is handed out exactly once. The cost is
// memory: a secret kept by a long-lived Handle (or stored by the memory
// backend) keeps its whole batch, 832 bytes, alive.

const (
	nonceLen       = 26 // ⌈128/5⌉ characters, as crypto/rand.Text
	noncesPerBatch = 32
)

// nonceAlphabet is crypto/rand.Text's alphabet (RFC 4648 base32).
const nonceAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// A nonceBatch is noncesPerBatch secrets back to back; next counts the
// ones handed out.
type nonceBatch struct {
	text string
	next atomic.Int32
}

// nonces is the process's current batch, shared by every Client.
var nonces atomic.Pointer[nonceBatch]

// newNonce returns a fresh acquisition secret. It is safe for concurrent
// use, and never returns the same secret twice.
func newNonce() string {
	b := nonces.Load()
	if b != nil {
		if i := int(b.next.Add(1)) - 1; i < noncesPerBatch {
			return b.text[i*nonceLen : (i+1)*nonceLen]
		}
	}
	// The batch is used up (or there is none yet): draw a new one, keep its
	// first secret and publish the rest. If another goroutine published a
	// batch meanwhile, ours serves only this call; secrets are never shared.
	nb := newNonceBatch()
	nb.next.Store(1)
	nonces.CompareAndSwap(b, nb)
	return nb.text[:nonceLen]
}

func newNonceBatch() *nonceBatch {
	buf := make([]byte, noncesPerBatch*nonceLen)
	rand.Read(buf) // never fails: crypto/rand crashes the program instead
	for i, c := range buf {
		buf[i] = nonceAlphabet[c%32]
	}
	return &nonceBatch{text: string(buf)}
}
