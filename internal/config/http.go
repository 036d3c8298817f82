package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/record"
)

// LargeBodyShare is the share of http.max_in_flight_bytes that bodies over
// SmallBodyBytes(budget) may hold together: the rest is kept for small
// ones, so that a flood of bodies at the limit cannot crowd out the
// webhooks of typical size (a few KiB) that make most traffic.
const (
	LargeBodyShareNum = 3
	LargeBodyShareDen = 4
)

// SmallBodyBytes is the largest body that may use the whole in-flight
// budget: 1/256 of it (64 KiB of the default 16 MiB).
func SmallBodyBytes(budget int64) int64 { return budget / 256 }

// LargeBodiesBudget is how many bytes bodies over SmallBodyBytes may hold
// together.
func LargeBodiesBudget(budget int64) int64 { return budget / LargeBodyShareDen * LargeBodyShareNum }

// TrustedPrefixes parses http.trusted_proxies: an address stands for
// itself alone.
func (h *HTTP) TrustedPrefixes() ([]netip.Prefix, error) {
	return parsePrefixes("http.trusted_proxies", h.TrustedProxies)
}

// parsePrefixes parses the list at path of addresses and CIDR prefixes.
func parsePrefixes(path string, list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range list {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %q is neither an address nor a CIDR prefix", path, i, s)
		}
		out = append(out, p)
	}
	return out, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// MaxBodyFor is the largest limits.max_body_bytes a stream's records can
// carry into a topic of Kafka's default max.message.bytes, beside their
// key, event id, type and headers.
func MaxBodyFor(s *Stream) int64 {
	return int64(record.MaxInputBody(len(s.Name), len(s.Signature.Scheme), record.DefaultMaxMessageBytes))
}

func (h *HTTP) validate(streams []*Stream) []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("in %s: %s", path, fmt.Sprintf(format, args...)))
	}
	if h.ReadTimeout < time.Second {
		add("http.read_timeout", "must be at least 1s, got %s", h.ReadTimeout)
	}
	if h.MaxPerSource < 0 {
		add("http.max_per_source", "must be 0 (off) or positive, got %d", h.MaxPerSource)
	}
	validateConnectionCaps(add, "http.max_connections", h.MaxConnections, h.MaxConnectionsPerSource, "http.idle_timeout", h.IdleTimeout)
	if h.MinBodyRate < 1 {
		add("http.min_body_rate", "must be at least 1 byte a second, got %d", h.MinBodyRate)
	}
	if h.RefusalLogLines < 1 {
		add("http.refusal_log_lines", "must be at least 1, got %d", h.RefusalLogLines)
	}
	if h.RefusalLogInterval < time.Second {
		add("http.refusal_log_interval", "must be at least 1s, got %s", h.RefusalLogInterval)
	}
	if _, err := h.TrustedPrefixes(); err != nil {
		errs = append(errs, fmt.Errorf("in %v", err))
	}
	if h.MaxInFlightBytes < 1 {
		add("http.max_in_flight_bytes", "must be positive, got %d", h.MaxInFlightBytes)
		return errs
	}
	if largest := largestBody(streams); h.MaxInFlightBytesPerSource < largest || h.MaxInFlightBytesPerSource > h.MaxInFlightBytes {
		add("http.max_in_flight_bytes_per_source", "must be from the largest limits.max_body_bytes (%d) to http.max_in_flight_bytes (%d), got %d",
			largest, h.MaxInFlightBytes, h.MaxInFlightBytesPerSource)
	}
	for _, s := range streams {
		body := s.Limits.MaxBodyBytes
		if body > SmallBodyBytes(h.MaxInFlightBytes) && body > LargeBodiesBudget(h.MaxInFlightBytes) {
			add("http.max_in_flight_bytes", "%d leaves bodies over %d bytes %d together, less than one body at streams.%s.limits.max_body_bytes (%d): raise it to at least %d",
				h.MaxInFlightBytes, SmallBodyBytes(h.MaxInFlightBytes), LargeBodiesBudget(h.MaxInFlightBytes), s.Name, body,
				LargeBodyShareDen*((body+LargeBodyShareNum-1)/LargeBodyShareNum))
		}
	}
	return errs
}

// validateConnectionCaps checks the caps of a public listener: its
// connections (at the path capPath), those of one source (capPath +
// "_per_source") within them, and its idle timeout.
func validateConnectionCaps(add func(path, format string, args ...any), capPath string, maxOpen, perSource int, idlePath string, idle time.Duration) {
	if maxOpen < 1 {
		add(capPath, "must be positive, got %d", maxOpen)
	} else if perSource < 1 || perSource > maxOpen {
		add(capPath+"_per_source", "must be from 1 to %s (%d), got %d", capPath, maxOpen, perSource)
	}
	if idle < time.Second {
		add(idlePath, "must be at least 1s, got %s", idle)
	}
}
