// Package topics creates and checks every Kafka topic of the catalogue,
// named by internal/naming: partition counts (all of a stream's topics are
// co-partitioned), cleanup policies (design §4), retention, and
// durability: replication factor, min.insync.replicas and unclean leader
// election.
package topics

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
)

// Spec is one topic as driftguard wants it.
type Spec struct {
	Name       string
	Stream     string
	Partitions int32
	Configs    map[string]string
	// RetentionKey is the config path of a delete-policy topic's
	// retention (streams.<stream>.retention.in); empty for a compacted one.
	RetentionKey string
}

// CleanupPolicy of the spec.
func (s Spec) CleanupPolicy() string { return s.Configs["cleanup.policy"] }

// Retention of the spec: its retention.ms, "" for a compacted topic.
func (s Spec) Retention() string { return s.Configs[configRetention] }

// RetentionText is the spec's retention as a duration (168h), "-" for a
// compacted topic.
func (s Spec) RetentionText() string {
	if s.Retention() == "" {
		return "-"
	}
	return msText(s.Retention())
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// Specs lists every topic of the stream, named by n: the five every policy
// uses, plus replay for gapless and ephemeral for streams with ephemeral
// event types.
func Specs(n naming.Prefixes, s *config.Stream) []Spec {
	t := n.For(s.Name)
	p := int32(s.Limits.Partitions)
	r := s.Retention
	deleteAfter := func(name, key string, d time.Duration) Spec {
		return Spec{Name: name, Stream: s.Name, Partitions: p, RetentionKey: "streams." + s.Name + ".retention." + key,
			Configs: map[string]string{"cleanup.policy": "delete", configRetention: ms(d)}}
	}
	compact := func(name string) Spec {
		return Spec{Name: name, Stream: s.Name, Partitions: p, Configs: map[string]string{"cleanup.policy": "compact"}}
	}
	specs := []Spec{
		deleteAfter(t.In, "in", r.In),
		compact(t.Table),
		compact(t.State),
		deleteAfter(t.Outcomes, "outcomes", r.Outcomes),
		deleteAfter(t.DLQ, "dlq", r.DLQ),
	}
	if s.Policy == config.PolicyGapless {
		specs = append(specs, deleteAfter(t.Replay, "replay", r.Replay))
	}
	if len(s.EphemeralTypes) > 0 {
		specs = append(specs, deleteAfter(t.Ephemeral, "ephemeral", r.Ephemeral))
	}
	return specs
}

// Durability is what every topic driftguard creates is given, and what
// every existing one is checked to have at least.
type Durability struct {
	// ReplicationFactor is the replicas of each partition.
	ReplicationFactor int
	// MinInsyncReplicas is the topic's min.insync.replicas: with acks=all
	// the broker acks a record only once this many replicas hold it, and
	// refuses writes while fewer are in sync.
	MinInsyncReplicas int
}

// Topic configs of durability. Unclean leader election is disabled
// explicitly on every topic driftguard creates, whatever the broker's
// default: an out-of-sync replica made leader truncates records the broker
// had acknowledged, and so webhooks ingest had answered 202.
const (
	configMinInsync = "min.insync.replicas"
	configUnclean   = "unclean.leader.election.enable"
	configRetention = "retention.ms"
)

// Status of one topic after Ensure.
type Status struct {
	Spec    Spec
	Created bool
	// Replicas is the fewest replicas of any of its partitions.
	Replicas int
	// MinInsync is its min.insync.replicas (0 when the broker does not
	// say), Unclean whether it allows unclean leader election.
	MinInsync int
	Unclean   bool
	// Weak says, each with its fix, how the topic is less durable than
	// configured; empty when it is not.
	Weak []string
	// Drift says, each with its fix, which of the topic's settings differ
	// from the catalogue (its retention); empty when none does.
	Drift []string
	// Unchecked says why the topic's configs could not be read (the
	// principal may not describe them), so neither its cleanup policy nor
	// its durability nor its retention was checked; empty when they were.
	Unchecked string
}

// ErrWeak marks topics less durable than configured: fewer replicas, a
// lower min.insync.replicas, or unclean leader election enabled. Unlike a
// mismatch it does not stop the processors: an operator may lower
// min.insync.replicas on purpose to keep accepting webhooks through an
// outage. `driftguard topics` reports it and exits 1.
var ErrWeak = errors.New("topic is less durable than configured")

// Weak returns an error wrapping ErrWeak that names every weakness of the
// statuses, or nil when there is none.
func Weak(statuses []Status) error {
	return report(statuses, ErrWeak, func(s Status) []string { return s.Weak })
}

// report returns an error joining, for each finding of each status, one
// that wraps sentinel and names the topic; nil without findings.
func report(statuses []Status, sentinel error, findings func(Status) []string) error {
	var errs []error
	for _, s := range statuses {
		for _, f := range findings(s) {
			errs = append(errs, fmt.Errorf("%w: topic %s %s", sentinel, s.Spec.Name, f))
		}
	}
	return errors.Join(errs...)
}

// ErrDrift marks a topic whose retention differs from the catalogue's. It
// is reported, never changed by driftguard (a shorter retention deletes
// records), and it does not stop the processors: `driftguard topics`
// reports it with the command that fixes it and exits 1.
var ErrDrift = errors.New("topic setting differs from the catalogue")

// Drift returns an error wrapping ErrDrift that names every setting of the
// statuses that differs from the catalogue, or nil when none does.
func Drift(statuses []Status) error {
	return report(statuses, ErrDrift, func(s Status) []string { return s.Drift })
}

// ErrUnchecked marks a topic whose configs the principal may not read.
var ErrUnchecked = errors.New("topic configs not read")

// Unchecked returns an error wrapping ErrUnchecked for every status whose
// configs could not be read, or nil.
func Unchecked(statuses []Status) error {
	return report(statuses, ErrUnchecked, func(s Status) []string {
		if s.Unchecked == "" {
			return nil
		}
		return []string{s.Unchecked}
	})
}

// ErrMissing marks a topic of the catalogue that does not exist where it
// was not to be created: `driftguard topics --check`, and the processors
// under `process --no-create`.
var ErrMissing = errors.New("missing")

// ErrMismatch marks a topic that exists with the wrong shape. It is never
// fixed automatically: repartitioning moves keys away from their state.
var ErrMismatch = errors.New("topic does not match the catalogue")

// Ensure creates the missing topics of the streams, named by n (when
// create is true), with durability d, and checks that existing ones have
// the stream's partition count and cleanup policy. Every problem is
// reported, each naming the topic and the fix. It also checks every
// topic's durability against d and its retention against the catalogue;
// those findings are in the statuses (Weak, Drift, Unchecked), not in the
// error.
func Ensure(ctx context.Context, adm *kadm.Client, n naming.Prefixes, streams []*config.Stream, d Durability, create bool) ([]Status, error) {
	var specs []Spec
	for _, s := range streams {
		specs = append(specs, Specs(n, s)...)
	}
	for i := range specs {
		specs[i].Configs[configMinInsync] = strconv.Itoa(d.MinInsyncReplicas)
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	details, err := listUncached(ctx, adm, names)
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		// Kafka says so of a topic that does not exist too, to whoever may
		// not know whether it does.
		return nil, fmt.Errorf("listing topics: %w: this principal lacks DESCRIBE on some of %s, or they are missing; an admin creates them with `driftguard topics` and grants DESCRIBE on them (docs/deploy.md)",
			err, strings.Join(names, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("listing topics: %w", err)
	}
	var statuses []Status
	var missing []Spec
	for _, spec := range specs {
		if d, ok := details[spec.Name]; ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			if d.Err != nil {
				return nil, fmt.Errorf("topic %s: %w", spec.Name, d.Err)
			}
			statuses = append(statuses, Status{Spec: spec})
			continue
		}
		missing = append(missing, spec)
	}
	var errs []error
	if len(missing) > 0 && !create {
		for _, spec := range missing {
			errs = append(errs, fmt.Errorf("topic %s is %w; create the catalogue's topics with `driftguard topics` (an admin's task where the processors run with --no-create)", spec.Name, ErrMissing))
		}
	}
	// Listed again only when topics were created: the first listing holds
	// every topic that existed.
	if create && len(missing) > 0 {
		// Asked of the broker only when there is a topic to create with it.
		unclean, err := brokerKnows(ctx, adm, configUnclean)
		if err != nil {
			return nil, err
		}
		for _, spec := range missing {
			if unclean {
				spec.Configs[configUnclean] = "false"
			}
			configs := map[string]*string{}
			for k, v := range spec.Configs {
				configs[k] = &v
			}
			resp, err := adm.CreateTopic(ctx, spec.Partitions, int16(d.ReplicationFactor), configs, spec.Name)
			if err == nil {
				err = resp.Err
			}
			if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				errs = append(errs, fmt.Errorf("creating topic %s: %w", spec.Name, err))
				continue
			}
			statuses = append(statuses, Status{Spec: spec, Created: err == nil})
		}
		if details, err = waitVisible(ctx, adm, names); err != nil {
			return nil, fmt.Errorf("listing topics: %w", err)
		}
		for _, spec := range specs {
			if d, ok := details[spec.Name]; !ok || d.Err != nil {
				errs = append(errs, fmt.Errorf("topic %s: not in the broker's metadata after creating it, so not checked: %v", spec.Name, d.Err))
			}
		}
	}
	errs = append(errs, check(ctx, adm, specs, details, d, statuses)...)
	return statuses, errors.Join(errs...)
}

// brokerKnows reports whether a broker lists the broker config key. Every
// Kafka broker lists unclean.leader.election.enable; franz-go's kfake (the
// embedded broker of `dev` and of fast tests, one replica in memory) has
// no unclean election and refuses the topic config.
func brokerKnows(ctx context.Context, adm *kadm.Client, key string) (bool, error) {
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return false, fmt.Errorf("listing the brokers: %w", err)
	}
	if len(brokers) == 0 {
		return false, errors.New("listing the brokers: the cluster named none")
	}
	// One broker by id: without an id Kafka describes only the cluster's
	// dynamic defaults, which leave out every static setting.
	configs, err := adm.DescribeBrokerConfigs(ctx, brokers[0].NodeID)
	if err != nil {
		return false, fmt.Errorf("describing the broker's configs: %w", err)
	}
	for _, rc := range configs {
		if rc.Err != nil {
			return false, fmt.Errorf("describing the broker's configs: %w", rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == key {
				return true, nil
			}
		}
	}
	return false, nil
}

// check checks the shape (partitions, cleanup policy) of every existing
// topic, returning the mismatches, and fills in the durability of its
// status.
func check(ctx context.Context, adm *kadm.Client, specs []Spec, details kadm.TopicDetails, d Durability, statuses []Status) []error {
	status := map[string]*Status{}
	for i := range statuses {
		status[statuses[i].Spec.Name] = &statuses[i]
	}
	var errs []error
	var existing []string
	for _, spec := range specs {
		td, ok := details[spec.Name]
		if !ok || td.Err != nil {
			continue
		}
		existing = append(existing, spec.Name)
		if st := status[spec.Name]; st != nil {
			st.Replicas = fewestReplicas(td)
			if st.Replicas < d.ReplicationFactor {
				st.Weak = append(st.Weak, fmt.Sprintf("has %d replicas of a partition but kafka.replication_factor is %d: add replicas with kafka-reassign-partitions", st.Replicas, d.ReplicationFactor))
			}
		}
		if got := int32(len(td.Partitions)); got != spec.Partitions {
			errs = append(errs, fmt.Errorf("%w: topic %s has %d partitions but stream %s needs %d (streams.%s.limits.partitions): every topic of a stream must have the same count so a key's input, table and outputs share a partition",
				ErrMismatch, spec.Name, got, spec.Stream, spec.Partitions, spec.Stream))
		}
	}
	if len(existing) == 0 {
		return errs
	}
	configs, err := describeConfigs(ctx, adm, existing)
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		// Not fatal: a principal that may use the topics need not read
		// their configs (processors with --no-create on a shared cluster).
		for _, name := range existing {
			if st := status[name]; st != nil {
				st.Unchecked = fmt.Sprintf("is not checked (%v): this principal lacks DESCRIBE_CONFIGS on the topics, so their cleanup policy, durability and retention are not known", err)
			}
		}
		return errs
	}
	if err != nil {
		return append(errs, fmt.Errorf("describing topic configs: %w", err))
	}
	byName := map[string]Spec{}
	for _, spec := range specs {
		byName[spec.Name] = spec
	}
	for _, rc := range configs {
		st := status[rc.Name]
		if rc.Err != nil {
			errs = append(errs, fmt.Errorf("describing topic %s: %w", rc.Name, rc.Err))
			continue
		}
		spec := byName[rc.Name]
		want := spec.CleanupPolicy()
		for _, c := range rc.Configs {
			if c.Value == nil {
				continue
			}
			switch c.Key {
			case "cleanup.policy":
				if !samePolicy(*c.Value, want) {
					errs = append(errs, fmt.Errorf("%w: topic %s has cleanup.policy=%s but needs %s", ErrMismatch, rc.Name, *c.Value, want))
				}
			case configMinInsync:
				if st != nil {
					st.MinInsync, _ = strconv.Atoi(*c.Value)
				}
			case configUnclean:
				if st != nil {
					st.Unclean = *c.Value == "true"
				}
			case configRetention:
				if want := spec.Retention(); st != nil && want != "" && *c.Value != want {
					st.Drift = append(st.Drift, fmt.Sprintf("has retention.ms=%s but %s is %s (retention.ms=%s); driftguard changes no retention, since a shorter one deletes records: fix with kafka-configs --alter --entity-type topics --entity-name %s --add-config retention.ms=%s, or set %s to the topic's",
						*c.Value, spec.RetentionKey, msText(want), want, rc.Name, want, spec.RetentionKey))
				}
			}
		}
		if st == nil {
			continue
		}
		if st.MinInsync < d.MinInsyncReplicas {
			st.Weak = append(st.Weak, fmt.Sprintf("has min.insync.replicas=%d but kafka.min_insync_replicas is %d: an acknowledged webhook may be on fewer brokers than configured; fix with kafka-configs --alter --entity-type topics --entity-name %s --add-config min.insync.replicas=%d",
				st.MinInsync, d.MinInsyncReplicas, rc.Name, d.MinInsyncReplicas))
		}
		if st.Unclean {
			st.Weak = append(st.Weak, fmt.Sprintf("has unclean.leader.election.enable=true: a leader elected out of sync truncates acknowledged webhooks; fix with kafka-configs --alter --entity-type topics --entity-name %s --add-config unclean.leader.election.enable=false", rc.Name))
		}
	}
	return errs
}

// describeConfigs describes the topics' configs, asking again for a while
// while a broker says a topic is unknown: on a cluster, the broker asked
// may not have learnt yet of a topic that another's metadata lists.
func describeConfigs(ctx context.Context, adm *kadm.Client, names []string) (kadm.ResourceConfigs, error) {
	return askUntil(ctx, func() (kadm.ResourceConfigs, error) { return adm.DescribeTopicConfigs(ctx, names...) },
		func(configs kadm.ResourceConfigs) bool {
			for _, rc := range configs {
				if errors.Is(rc.Err, kerr.UnknownTopicOrPartition) {
					return false
				}
			}
			return true
		})
}

// askUntil asks again every 50ms until the answer is done, for at most 10s
// (brokers learn of topics a moment after the controller), and returns
// the last answer; an error ends it at once.
func askUntil[T any](ctx context.Context, ask func() (T, error), done func(T) bool) (T, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		answer, err := ask()
		if err != nil || done(answer) || time.Now().After(deadline) {
			return answer, err
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fewestReplicas is the replica count of the topic's least replicated
// partition.
func fewestReplicas(td kadm.TopicDetail) int {
	fewest := -1
	for _, p := range td.Partitions {
		if fewest < 0 || len(p.Replicas) < fewest {
			fewest = len(p.Replicas)
		}
	}
	return max(fewest, 0)
}

// msText is a retention.ms as a duration, as the config writes it: 168h,
// 10m.
func msText(v string) string {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return v
	}
	d := (time.Duration(n) * time.Millisecond).String()
	if strings.HasSuffix(d, "m0s") {
		d = strings.TrimSuffix(d, "0s")
	}
	if strings.HasSuffix(d, "h0m") {
		d = strings.TrimSuffix(d, "0m")
	}
	return d
}

func samePolicy(got, want string) bool {
	return strings.ReplaceAll(got, " ", "") == want
}

// listUncached lists topics from a broker. kadm.ListTopics otherwise answers
// from the client's metadata cache for MetadataMinAge (a second in
// internal/kafka's clients, 5s in franz-go's default), which
// may still say "unknown topic" for a topic created since.
func listUncached(ctx context.Context, adm *kadm.Client, names []string) (kadm.TopicDetails, error) {
	return adm.ListTopics(kadm.WithAuthorizedOps(ctx), names...)
}

// waitVisible lists until every topic is in the broker's metadata, which
// trails CreateTopics by a moment, or gives up after a while.
func waitVisible(ctx context.Context, adm *kadm.Client, names []string) (kadm.TopicDetails, error) {
	return askUntil(ctx, func() (kadm.TopicDetails, error) { return listUncached(ctx, adm, names) },
		func(details kadm.TopicDetails) bool {
			for _, name := range names {
				if d, ok := details[name]; !ok || d.Err != nil || len(d.Partitions) == 0 {
					return false
				}
			}
			return true
		})
}
