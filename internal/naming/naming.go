// Package naming builds every name driftguard gives a Kafka resource, in one
// place: the topics of a stream, the consumer groups and the transactional
// ids, each under the prefixes of kafka.topic_prefix and kafka.group_prefix,
// so that a shared cluster can grant a team's ACLs by prefix. No caller puts
// a name together itself.
package naming

import "fmt"

// Prefixes are kafka.topic_prefix and kafka.group_prefix. The zero value
// names everything as driftguard always has: `<stream>.in`, group
// `<stream>`.
type Prefixes struct {
	// TopicPrefix starts every topic name, the group table included.
	TopicPrefix string
	// GroupPrefix starts every consumer group and every transactional id.
	GroupPrefix string
	// Generations are kafka.generations: a stream of generation N above 1
	// is decided anew, from its unchanged `<stream>.in`, by a new group
	// into new topics (see Generation). Streams not listed are of
	// generation 1.
	Generations map[string]int
}

// Generation is the suffix a stream's derived names carry: none for
// generation 0 or 1, ".gN" for N above. Everything the processors derive
// from `<stream>.in` (the table, the state, outcomes, DLQ, replay and
// ephemeral topics, the group and its transactional ids) takes it, so a
// new generation re-decides the input beside the old one, which keeps
// running until its readers are switched; `<stream>.in` never does, as
// it is what both decide.
func (p Prefixes) Generation(stream string) string {
	if n := p.Generations[stream]; n > 1 {
		return fmt.Sprintf(".g%d", n)
	}
	return ""
}

// Topics are the topics of one stream.
type Topics struct {
	In        string // accepted webhooks, keyed by entity
	Table     string // the goka group table: full per-key state
	State     string // public state per entity
	Outcomes  string // one record per decision
	DLQ       string // poison input, overflow, expired orphans
	Replay    string // replay requests to the producer (gapless)
	Ephemeral string // ephemeral signals such as typing (assign)
}

// All lists the topics, every one a stream may have.
func (t Topics) All() []string {
	return []string{t.In, t.Table, t.State, t.Outcomes, t.DLQ, t.Replay, t.Ephemeral}
}

// For returns the topics of stream. The table is topic prefix + stream +
// "-table": goka names a group's table "<group>-table", which it is when
// both prefixes are the same; with different prefixes the table still
// starts with the topic prefix, so that every topic a team owns matches
// one prefix ACL. A goka view reads it by this name (goka.Table). Every
// topic but In carries the stream's generation.
func (p Prefixes) For(stream string) Topics {
	in := p.TopicPrefix + stream + ".in"
	t := p.TopicPrefix + stream + p.Generation(stream)
	return Topics{
		In:        in,
		Table:     t + "-table",
		State:     t + ".state",
		Outcomes:  t + ".outcomes",
		DLQ:       t + ".dlq",
		Replay:    t + ".replay",
		Ephemeral: t + ".ephemeral",
	}
}

// Group is the consumer group (the goka group) of stream's processors.
func (p Prefixes) Group(stream string) string { return p.GroupPrefix + stream + p.Generation(stream) }

// ConsumerGroup is the consumer group configured by name, such as the
// sink's clickhouse.consumer_group, under the group prefix.
func (p Prefixes) ConsumerGroup(name string) string { return p.GroupPrefix + name }

// TransactionalID is the transactional id of stream's processor on
// instance (processing.instance_id): stable across the instance's
// restarts, so a restarted instance fences its predecessor at once, and
// under the group prefix, so one prefix ACL on transactional ids covers a
// team's processors.
func (p Prefixes) TransactionalID(instance, stream string) string {
	return p.GroupPrefix + "driftguard-" + stream + p.Generation(stream) + "-" + instance
}

// RelayGroup is the consumer group of the relay of stream's replay
// requests (`driftguard relay`), one per stream so that one publisher's
// outage holds back no other stream's requests.
func (p Prefixes) RelayGroup(stream string) string {
	return p.GroupPrefix + "driftguard-relay-" + stream
}

// RelayTransactionalID is the transactional id of the relay of stream on
// instance, stable across its restarts like TransactionalID. A stream name
// has no '-', so it never equals a processor's.
func (p Prefixes) RelayTransactionalID(instance, stream string) string {
	return p.GroupPrefix + "driftguard-relay-" + stream + "-" + instance
}

// MaxTopicLength is the longest topic name Kafka accepts.
const MaxTopicLength = 249

// CheckPrefix reports why prefix cannot start Kafka names, or nil. Only
// Kafka's topic characters are allowed, for the group prefix too: one
// prefix may then serve both, and ACL patterns stay plain.
func CheckPrefix(prefix string) error {
	for _, r := range prefix {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q has %q: only letters, digits, '.', '_' and '-' are allowed (Kafka's topic characters)", prefix, r)
		}
	}
	return nil
}
