// Package obscheck checks the observability adapters, leaseprom and
// leaseotel, on a real run against a real Valkey server: a lease held, a
// lease lost while the server is paused, a cache stampede and queue work.
// The Prometheus side is scraped over HTTP as a Prometheus server would;
// the OpenTelemetry side is read with the SDK's manual reader and in-memory
// span exporter.
//
// It also makes every alert of docs/lease.rules.yml fire and clear: each
// replica's registry is scraped over HTTP into a small in-memory store at
// a virtual time the test moves, and the rules are evaluated with
// Prometheus' own PromQL engine; and it checks that docs/operations.md
// shows the rules file as it is.
//
// It is a module of its own so that the OpenTelemetry SDK and Prometheus'
// engine, which only these checks need, never enter the product's module
// graph.
package obscheck
