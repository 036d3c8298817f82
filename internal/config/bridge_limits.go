package config

import (
	"fmt"
	"math"
	"net/netip"
	"time"
)

// Defaults of the bridge's public listener (docs/bridge.md, "Limits" says
// why these).
const (
	DefaultBridgeMaxTCPConnections          = 25_000
	DefaultBridgeMaxTCPConnectionsPerSource = 4096
	DefaultBridgeIdleTimeout                = 20 * time.Second
	DefaultBridgeMaxStreamsPerToken         = 32
	DefaultBridgeSourceRate                 = 1000
	DefaultBridgeSourceBurst                = 2000
)

func (b *Bridge) limitDefaults() {
	orDefault(&b.MaxTCPConnections, DefaultBridgeMaxTCPConnections)
	orDefault(&b.MaxTCPConnectionsPerSource, min(DefaultBridgeMaxTCPConnectionsPerSource, b.MaxTCPConnections))
	orDefault(&b.IdleTimeout, DefaultBridgeIdleTimeout)
	orDefault(&b.MaxStreamsPerToken, min(DefaultBridgeMaxStreamsPerToken, b.MaxConnectionsPerUser))
	if b.SourceRate.Rate == 0 {
		b.SourceRate.Rate = DefaultBridgeSourceRate
		orDefault(&b.SourceRate.Burst, DefaultBridgeSourceBurst)
	}
	b.SourceRate.applyDefaults()
}

// TrustedPrefixes parses bridge.trusted_proxies: an address stands for
// itself alone.
func (b *Bridge) TrustedPrefixes() ([]netip.Prefix, error) {
	return parsePrefixes("bridge.trusted_proxies", b.TrustedProxies)
}

// validateLimits checks the public listener's keys, each error naming its
// path.
func (b *Bridge) validateLimits() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("in %s: %s", path, fmt.Sprintf(format, args...)))
	}
	validateConnectionCaps(add, "bridge.max_tcp_connections", b.MaxTCPConnections, b.MaxTCPConnectionsPerSource, "bridge.idle_timeout", b.IdleTimeout)
	if b.MaxStreamsPerToken < 1 {
		add("bridge.max_streams_per_token", "must be at least 1, got %d", b.MaxStreamsPerToken)
	}
	// A rate of 0 is the default, not off: the limit is always on.
	if r := b.SourceRate.Rate; !(r > 0) || math.IsInf(r, 0) {
		add("bridge.source_rate.rate", "must be a positive number of requests a second (it is always on), got %v", r)
	}
	if b.SourceRate.Burst < 1 {
		add("bridge.source_rate.burst", "must be at least 1, got %d", b.SourceRate.Burst)
	}
	if _, err := b.TrustedPrefixes(); err != nil {
		errs = append(errs, fmt.Errorf("in %v", err))
	}
	return errs
}
