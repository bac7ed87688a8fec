// Package obscheck checks the observability adapters, leaseprom and
// leaseotel, on a real run against a real Valkey server: a lease held, a
// lease lost while the server is paused, a cache stampede and queue work.
// The Prometheus side is scraped over HTTP as a Prometheus server would;
// the OpenTelemetry side is read with the SDK's manual reader and in-memory
// span exporter.
//
// It is a module of its own so that the OpenTelemetry SDK, which only these
// checks need, never enters the product's module graph.
package obscheck
