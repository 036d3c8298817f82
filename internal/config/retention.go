package config

import "time"

// Retention is how long each delete-policy topic of a stream keeps its
// records: the topic's retention.ms, set when `driftguard topics` creates
// it and checked by `driftguard topics --check`. The compacted topics
// (the table, the state) keep each key's last record instead.
type Retention struct {
	// In is `<stream>.in`'s: how long accepted webhooks can be decided
	// again from the log. Default 168h (7 days).
	In time.Duration `yaml:"in"`
	// Outcomes is `<stream>.outcomes`'s. Default 168h.
	Outcomes time.Duration `yaml:"outcomes"`
	// DLQ is `<stream>.dlq`'s: time to look at and redrive dead letters.
	// Default 336h (14 days).
	DLQ time.Duration `yaml:"dlq"`
	// Replay is `<stream>.replay`'s (gapless streams). Default 168h.
	Replay time.Duration `yaml:"replay"`
	// Ephemeral is `<stream>.ephemeral`'s (streams with ephemeral types):
	// signals such as typing are stale within minutes. Default 10m.
	Ephemeral time.Duration `yaml:"ephemeral"`
}

func (r *Retention) applyDefaults() {
	const week = 7 * 24 * time.Hour
	orDefault(&r.In, week)
	orDefault(&r.Outcomes, week)
	orDefault(&r.DLQ, 2*week)
	orDefault(&r.Replay, week)
	orDefault(&r.Ephemeral, 10*time.Minute)
}

// ByKey maps each key under retention to its duration.
func (r Retention) ByKey() map[string]time.Duration {
	return map[string]time.Duration{"in": r.In, "outcomes": r.Outcomes, "dlq": r.DLQ, "replay": r.Replay, "ephemeral": r.Ephemeral}
}
