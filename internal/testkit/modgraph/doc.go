// Package modgraph holds tests, and nothing else: that a program which
// imports every package of this module gets none of the modules that only
// this module's tests, benchmarks and tools need (the fault-matrix
// harness's proxy and checker, migration tools, peer libraries), and that
// the observability adapters link no store's client.
package modgraph
