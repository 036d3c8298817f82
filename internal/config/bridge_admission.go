package config

import (
	"fmt"
	"math"
)

// Defaults of the bridge's admission of SSE streams (docs/bridge.md,
// "Admission" says why these).
const (
	DefaultBridgeMaxConnections        = 20_000
	DefaultBridgeMaxConnectionsPerUser = 64
	DefaultBridgeAcceptRate            = 1000
	DefaultBridgeCatchupReaders        = 2
)

func (b *Bridge) admissionDefaults() {
	orDefault(&b.MaxConnections, DefaultBridgeMaxConnections)
	orDefault(&b.MaxConnectionsPerUser, DefaultBridgeMaxConnectionsPerUser)
	orDefault(&b.AcceptRate, DefaultBridgeAcceptRate)
	if b.AcceptRate > 0 {
		orDefault(&b.AcceptBurst, int(math.Ceil(b.AcceptRate)))
	}
	orDefault(&b.CatchupReaders, DefaultBridgeCatchupReaders)
}

// validateAdmission checks the admission keys, each error naming its path.
func (b *Bridge) validateAdmission() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("in %s: %s", path, fmt.Sprintf(format, args...)))
	}
	if b.MaxConnections < 1 {
		add("bridge.max_connections", "must be at least 1, got %d", b.MaxConnections)
	}
	if b.MaxConnectionsPerUser < 1 || b.MaxConnectionsPerUser > b.MaxConnections {
		add("bridge.max_connections_per_user", "must be from 1 to bridge.max_connections (%d), got %d", b.MaxConnections, b.MaxConnectionsPerUser)
	}
	if !(b.AcceptRate > 0) || math.IsInf(b.AcceptRate, 0) {
		add("bridge.accept_rate", "must be a positive number of new streams a second, got %v", b.AcceptRate)
	}
	if b.AcceptBurst < 1 {
		add("bridge.accept_burst", "must be at least 1, got %d", b.AcceptBurst)
	}
	if b.CatchupReaders < 1 {
		add("bridge.catchup_readers", "must be at least 1, got %d", b.CatchupReaders)
	}
	return errs
}
