package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	valkey "github.com/valkey-io/valkey-go"
)

// This file holds the client options of the quickstart's sections on ACL
// users and TLS: pass withACL(opt, user, password) or withTLS(opt, caFile)
// to run instead of the plain options main builds.

// docs:begin acl
// withACL logs in as an ACL user, created on the server with, for this
// program's leases and its fenced SET of report:{reports/daily},
//
//	ACL SETUSER reports reset on >secret ~lease:* &lease:* ~fence:* ~report:* +client|tracking +evalsha +evalsha_ro +eval +eval_ro +script|load +hmget +hset +persist +pexpire +time +spublish +ssubscribe +sunsubscribe +info +set
func withACL(opt valkey.ClientOption, user, password string) valkey.ClientOption {
	opt.Username = user
	opt.Password = password
	return opt
}

// docs:end acl

// docs:begin tls
// withTLS connects over TLS, trusting the CA in caFile (or the system's
// CAs if it is empty).
func withTLS(opt valkey.ClientOption, caFile string) (valkey.ClientOption, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return opt, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return opt, fmt.Errorf("%s: no PEM certificate", caFile)
		}
	}
	opt.TLSConfig = cfg
	return opt, nil
}

// docs:end tls
