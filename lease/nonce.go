package lease

import (
	"crypto/rand"
	"encoding/base32"
	"sync/atomic"
)

// An acquisition's secret (AcquireRequest.Nonce) has the form of a
// crypto/rand.Text string: 26 characters of the RFC 4648 base32 alphabet,
// each carrying 5 bits read from crypto/rand, so 130 bits from the
// operating system's generator.
//
// What differs is the batching: one crypto/rand read of 520 bytes,
// base32-encoded, gives noncesPerBatch secrets at once (520 bytes are 832
// characters, 26 for each of 32), and each acquisition takes its own
// substring of the batch, so that a secret costs neither an allocation
// nor a call into the generator of its own, and the generator is asked
// for the 130 bits a secret carries instead of the 208 that rand.Text
// reads (it keeps 5 bits of each of its 26 bytes). The characters of
// base32 over random bytes are independent and uniform, so secrets of one
// batch are as independent as the generator's bytes: knowing any number
// of them says nothing about the others. Each is handed out exactly once.
// The cost is memory: a secret kept by a long-lived Handle (or stored by
// the memory backend) keeps its whole batch, 832 bytes, alive.

const (
	nonceLen       = 26 // ⌈128/5⌉ characters, as crypto/rand.Text
	noncesPerBatch = 32
	// nonceBatchBytes is how many random bytes make a batch: 5 bits per
	// character.
	nonceBatchBytes = noncesPerBatch * nonceLen * 5 / 8
)

// nonceAlphabet is crypto/rand.Text's alphabet, base32.StdEncoding's.
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
	var src [nonceBatchBytes]byte
	rand.Read(src[:]) // never fails: crypto/rand crashes the program instead
	var text [noncesPerBatch * nonceLen]byte
	nonceEncoding.Encode(text[:], src[:])
	return &nonceBatch{text: string(text[:])} // the batch's one copy
}

var nonceEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)
