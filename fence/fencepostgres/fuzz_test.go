package fencepostgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencepostgres"
	"github.com/golib/lease/lease"
)

// FuzzPostgresResource: any valid resource name is stored and found again
// byte for byte, and any value written under the fence reads back exactly.
func FuzzPostgresResource(f *testing.F) {
	f.Add("invoice/42", []byte("total=250"), uint64(1))
	f.Add("quote ' \" \\ ; --", []byte{0, 1, 2, 0xff}, uint64(1<<53-1))
	f.Add("日本語/🙂", []byte(""), uint64(1<<63-1))
	f.Add("x", []byte("y"), uint64(1<<63))
	pool := newPool(f)
	if _, err := pool.Exec(ctxT(f), `CREATE TABLE blobs (resource text PRIMARY KEY, body bytea NOT NULL)`); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, resource string, value []byte, token uint64) {
		ctx := ctxT(t)
		s := snap("fuzz", lease.Token(token))
		err := fencepostgres.Tx(ctx, pool, s, []string{resource}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO blobs VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET body = EXCLUDED.body`, resource, value)
			return err
		})
		switch {
		case fence.ValidateResource(resource) != nil || token == 0 || token >= 1<<63:
			if !errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("Tx(%q, token %d) = %v; want ErrInvalid", resource, token, err)
			}
			return
		case errors.Is(err, fence.ErrImplausibleToken):
			if token < uint64(time.Now().Add(fence.MaxTokenLead-time.Minute).UnixMicro()) {
				t.Fatalf("Tx(%q, token %d) = %v; the token is plausible", resource, token, err)
			}
			return
		case errors.Is(err, fence.ErrStale):
			return // an earlier input wrote this resource with a higher token
		case err != nil:
			t.Fatalf("Tx(%q, token %d): %v", resource, token, err)
		case token > uint64(time.Now().Add(fence.MaxTokenLead+time.Minute).UnixMicro()):
			t.Fatalf("Tx(%q, token %d) wrote with an implausible token", resource, token)
		}
		var got []byte
		var m fence.Mark
		err = pool.QueryRow(ctx, `SELECT b.body, f.lease_key, f.token FROM blobs b JOIN public.lease_fences f USING (resource) WHERE resource = $1`, resource).
			Scan(&got, &m.Key, &m.Token)
		if err != nil || string(got) != string(value) || m != (fence.Mark{Key: "fuzz", Token: lease.Token(token)}) {
			t.Fatalf("read back %q: %q %v, %v; want %q and token %d", resource, got, m, err, value, token)
		}
	})
}
