package config

import (
	"fmt"
	"time"
)

// ClickHouseRetention is how long ClickHouse keeps each table's rows,
// counted from the row's time column (events: processed_at, dlq: dead_at,
// orphans: expired_at, ordering_minute: minute, replay_requests:
// requested_at). Zero, the default for
// every table, keeps rows forever. entity_state holds each entity's latest
// state and has no retention. Applied by `driftguard retention`, and by
// the sink every Every: as a TTL on servers that have one (19.6 and
// later), else by dropping each month's partition once all of it is
// older than the retention.
type ClickHouseRetention struct {
	Events         time.Duration `yaml:"events"`
	DLQ            time.Duration `yaml:"dlq"`
	Orphans        time.Duration `yaml:"orphans"`
	OrderingMinute time.Duration `yaml:"ordering_minute"`
	ReplayRequests time.Duration `yaml:"replay_requests"`
	// Every is how often the sink applies the retention; 0 (the default):
	// never, only `driftguard retention` does.
	Every time.Duration `yaml:"every"`
}

// ByTable maps each table with a retention setting to it.
func (r ClickHouseRetention) ByTable() map[string]time.Duration {
	return map[string]time.Duration{"events": r.Events, "dlq": r.DLQ, "orphans": r.Orphans, "ordering_minute": r.OrderingMinute,
		"replay_requests": r.ReplayRequests}
}

// Any reports whether some table has a retention.
func (r ClickHouseRetention) Any() bool {
	for _, d := range r.ByTable() {
		if d > 0 {
			return true
		}
	}
	return false
}

// validate checks the retention settings, each error prefixed with its path.
func (r ClickHouseRetention) validate() []error {
	var errs []error
	for table, d := range r.ByTable() {
		// Under an hour a TTL would be rounded by the server's merges
		// anyway, and a mistyped unit (1m for a month) would empty a
		// table.
		if d != 0 && d < time.Hour {
			errs = append(errs, fmt.Errorf("in clickhouse.retention.%s: must be 0 (keep forever) or at least 1h, got %s", table, d))
		}
	}
	if r.Every != 0 && r.Every < time.Minute {
		errs = append(errs, fmt.Errorf("in clickhouse.retention.every: must be 0 (only `driftguard retention`) or at least 1m, got %s", r.Every))
	}
	return errs
}
