// Package oncall holds the tools an on-call engineer reaches for first:
// redrive (dead letters back into `<stream>.in` as new deliveries),
// explain (where an event is and every decision made for it) and the
// decisions behind `inspect` (a key's last decisions), with the admin
// endpoints that serve explain and inspect as JSON. It reads and writes
// Kafka only through the record contract (internal/record), so it
// imports no component: what a processor holds for a key is read by
// package processors, and the composition root (cmd/driftguard) hands
// it in.
package oncall
