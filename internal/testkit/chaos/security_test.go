package chaos_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/fence"
	"github.com/golib/lease/internal/testkit/chaos"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestImpersonation checks that knowing a holder's owner string and token
// is not enough to act for it: a forged acquisition (same owner, guessed
// secret) can neither renew nor release the lease, an old acquisition
// can't touch its successor's lease, and the fence refuses the old token.
func TestImpersonation(t *testing.T) {
	for _, kind := range []string{"valkey", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			target := valkeyTarget(testserver.Valkey(t).Addr())
			if kind == "postgres" {
				target = chaos.Target{Kind: "postgres", URL: postgresDB(t)}
			}
			ctx := ctxT(t)
			b, s, closeFn, err := target.Open(ctx, "chaos-impersonation")
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			const key, owner = "k1", "billing-worker/host-1"
			old := lease.AcquireRequest{Key: key, Owner: owner, Nonce: "old-secret", TTL: time.Minute}
			oldTok, err := b.Acquire(ctx, old)
			if err != nil {
				t.Fatal(err)
			}
			oldAcq := lease.Acquisition{Key: key, Owner: owner, Nonce: old.Nonce, Token: oldTok}
			if err := s.Write(ctx, lease.Snapshot{Key: key, Owner: owner, Token: oldTok}, "res-k1", "old"); err != nil {
				t.Fatal(err)
			}
			if err := b.Release(ctx, oldAcq); err != nil {
				t.Fatal(err)
			}
			cur := lease.AcquireRequest{Key: key, Owner: owner, Nonce: "current-secret", TTL: time.Minute}
			tok, err := b.Acquire(ctx, cur)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Write(ctx, lease.Snapshot{Key: key, Owner: owner, Token: tok}, "res-k1", ""); err != nil {
				t.Fatal(err)
			}
			for _, forged := range []lease.Acquisition{
				{Key: key, Owner: owner, Nonce: "", Token: tok},
				{Key: key, Owner: owner, Nonce: "guess", Token: tok},
				{Key: key, Owner: owner, Nonce: "guess", Token: 0},
				{Key: key, Owner: owner, Nonce: "current-secret", Token: oldTok},
				oldAcq,
				{Key: key, Owner: owner, Nonce: old.Nonce, Token: 0},
			} {
				if err := b.Renew(ctx, forged, time.Hour); !errors.Is(err, lease.ErrLost) {
					t.Errorf("Renew(nonce %q, token %d) of a lease it does not hold: %v, want ErrLost", forged.Nonce, forged.Token, err)
				}
				if err := b.Release(ctx, forged); !errors.Is(err, lease.ErrLost) {
					t.Errorf("Release(nonce %q, token %d) of a lease it does not hold: %v, want ErrLost", forged.Nonce, forged.Token, err)
				}
			}
			if _, err := b.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: owner, Nonce: "guess", TTL: time.Minute}); !errors.Is(err, lease.ErrNotAcquired) {
				t.Errorf("Acquire with the holder's owner string: %v, want ErrNotAcquired", err)
			}
			rec, err := b.Inspect(ctx, key)
			if err != nil || !rec.Held || rec.Token != tok || rec.Remaining < 50*time.Second {
				t.Errorf("after the forgeries the lease is %+v, %v; want it held with token %d for about a minute", rec, err, tok)
			}
			err = s.Write(ctx, lease.Snapshot{Key: key, Owner: owner, Token: oldTok}, "res-k1", "forged")
			var stale *fence.StaleError
			if !errors.As(err, &stale) || stale.Current != tok {
				t.Errorf("write with the old token: %v, want a StaleError at %d", err, tok)
			}
			if mark, v, err := s.Read(ctx, "res-k1"); err != nil || mark != tok || v != "old" {
				t.Errorf("resource after the forged write: %d %q %v, want %d \"old\"", mark, v, err, tok)
			}
		})
	}
}

// aclAdmin runs commands as the default user on the server at addr.
func aclAdmin(t *testing.T, addr string, args ...string) {
	t.Helper()
	do(t, addr, args...)
}

// TestValkeyACL runs the backend as a Valkey user limited to the lease
// prefix. Inside it everything works; outside it, and after the user's
// keys are revoked while it holds a lease, every call fails with an error
// that names the missing permission, and that is not ErrLost,
// ErrNotAcquired or ErrIndeterminate: a configuration error, never "the
// lease is lost" or "someone else holds it".
func TestValkeyACL(t *testing.T) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	const user, password, prefix = "leaser", "s3cret-for-tests", "app:lease:"
	aclAdmin(t, srv.Addr(), "ACL", "SETUSER", user, "on", ">"+password, "resetkeys", "~"+prefix+"*",
		"resetchannels", "&"+prefix+"*", "-@all", "+@connection", "+@scripting", "+hmget", "+hset", "+persist", "+pexpire", "+time", "+spublish", "+info")
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, Username: user, Password: password, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	inside, err := leasevalkey.New(c, leasevalkey.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ci, err := lease.NewClient(inside, lease.ClientOptions{Owner: "acl"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ci.TryAcquire(ctx, "k1", p)
	if err != nil {
		t.Fatalf("inside the prefix: %v", err)
	}
	if err := h.Renew(ctx); err != nil {
		t.Fatalf("inside the prefix: renew: %v", err)
	}

	configError := func(what string, err error) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: no error", what)
		case errors.Is(err, lease.ErrLost), errors.Is(err, lease.ErrNotAcquired), errors.Is(err, lease.ErrIndeterminate):
			t.Errorf("%s: %v: reads as a lease outcome, not as a configuration error", what, err)
		case !strings.Contains(err.Error(), "permission"):
			t.Errorf("%s: %v: does not say that a permission is missing", what, err)
		}
	}
	outside, err := leasevalkey.New(c, leasevalkey.Options{Prefix: "other:"})
	if err != nil {
		t.Fatal(err)
	}
	co, err := lease.NewClient(outside, lease.ClientOptions{Owner: "acl"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = co.TryAcquire(ctx, "k1", p)
	configError("acquire outside the prefix", err)
	a := lease.Acquisition{Key: "k1", Owner: "acl", Nonce: "n", Token: 1}
	configError("renew outside the prefix", outside.Renew(ctx, a, time.Second))
	configError("release outside the prefix", outside.Release(ctx, a))
	configError("check outside the prefix", outside.Check(ctx))

	// Revoke the user's keys while it holds a lease.
	m, err := h.StartManaged(ctx)
	if err != nil {
		t.Fatalf("StartManaged: %v", err)
	}
	aclAdmin(t, srv.Addr(), "ACL", "SETUSER", user, "resetkeys")
	configError("renew after the keys were revoked", h.Renew(ctx))
	select {
	case <-m.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Managed did not give the lease up after its renewals were refused")
	}
	var lost *lease.LostError
	if !errors.As(m.Err(), &lost) || lost.Reason != lease.DeadlinePassed || !strings.Contains(m.Err().Error(), "permission") {
		t.Errorf("Managed.Err() = %v; want the local deadline passed, carrying the permission error", m.Err())
	}
	configError("release after the keys were revoked", h.Release(ctx))
}

// TestValkeyTLS runs the backend over TLS on a dedicated server with a
// certificate from a throwaway CA made in the test. With the right CA it
// works; with another CA, or without TLS, every call fails, nothing is
// acquired, and the error is not a lease outcome.
func TestValkeyTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t, "lease test CA")
	other, _ := newCA(t, "another CA")
	cert, key := newServerCert(t, ca, caKey)
	files := map[string][]byte{"ca.pem": pemCert(ca), "server.pem": cert, "server.key": key}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tlsPort := freePort(t)
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{ExtraArgs: []string{
		"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", filepath.Join(dir, "server.pem"),
		"--tls-key-file", filepath.Join(dir, "server.key"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
		"--tls-auth-clients", "no",
	}})
	tlsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
	ctx := ctxT(t)
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	client := func(cfg *tls.Config) *lease.Client {
		t.Helper()
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{tlsAddr}, TLSConfig: cfg, DisableCache: true,
			Dialer: net.Dialer{Timeout: 2 * time.Second}, ConnWriteTimeout: 2 * time.Second})
		if err != nil {
			// valkey-go dials at once: a failed handshake fails here.
			t.Logf("valkey.NewClient: %v", err)
			return nil
		}
		t.Cleanup(c.Close)
		s, err := leasevalkey.New(c, leasevalkey.Options{Prefix: "tls:"})
		if err != nil {
			t.Fatal(err)
		}
		lc, err := lease.NewClient(s, lease.ClientOptions{Owner: "tls"})
		if err != nil {
			t.Fatal(err)
		}
		return lc
	}
	pool := func(certs ...*x509.Certificate) *x509.CertPool {
		cp := x509.NewCertPool()
		for _, c := range certs {
			cp.AddCert(c)
		}
		return cp
	}

	good := client(&tls.Config{RootCAs: pool(ca), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if good == nil {
		t.Fatal("no client with the right CA")
	}
	h, err := good.TryAcquire(ctx, "k1", p)
	if err != nil {
		t.Fatalf("with the right CA: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}

	for name, cfg := range map[string]*tls.Config{
		"another CA":   {RootCAs: pool(other), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
		"no CA at all": {RootCAs: pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
		"wrong name":   {RootCAs: pool(ca), ServerName: "valkey.example", MinVersion: tls.VersionTLS12},
		"plain TCP":    nil,
	} {
		c := client(cfg)
		if c == nil {
			continue // refused at once: fails closed
		}
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := c.TryAcquire(actx, "k1", p)
		cancel()
		if err == nil || errors.Is(err, lease.ErrNotAcquired) || errors.Is(err, lease.ErrLost) {
			t.Errorf("%s: TryAcquire: %v; want a connection error", name, err)
		}
	}
	if rec, err := good.Inspect(ctx, "k1"); err != nil || rec.Held {
		t.Errorf("after the refused clients, k1 is %+v, %v; want free", rec, err)
	}
	_ = srv
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func newCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func newServerCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}
