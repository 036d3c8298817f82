// Package topics names every Kafka topic of a stream in one place and
// creates and checks them: partition counts (all of a stream's topics are
// co-partitioned), cleanup policies (design §4), and durability: replication
// factor, min.insync.replicas and unclean leader election.
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
)

// Names are the topics of one stream.
type Names struct {
	In        string // accepted webhooks, keyed by entity
	Table     string // goka group table (goka's own "<group>-table" naming)
	State     string // public state per entity
	Outcomes  string // one record per decision
	DLQ       string // poison input, overflow, expired orphans
	Replay    string // replay requests to the producer (gapless)
	Ephemeral string // ephemeral signals such as typing (assign)
}

// For returns the topic names of stream.
func For(stream string) Names {
	return Names{
		In:        stream + ".in",
		Table:     stream + "-table",
		State:     stream + ".state",
		Outcomes:  stream + ".outcomes",
		DLQ:       stream + ".dlq",
		Replay:    stream + ".replay",
		Ephemeral: stream + ".ephemeral",
	}
}

// Group is the goka group (and so the consumer group) of stream.
func Group(stream string) string { return stream }

// Spec is one topic as driftguard wants it.
type Spec struct {
	Name       string
	Stream     string
	Partitions int32
	Configs    map[string]string
}

// CleanupPolicy of the spec.
func (s Spec) CleanupPolicy() string { return s.Configs["cleanup.policy"] }

const day = 24 * time.Hour

func ms(d time.Duration) *string {
	v := strconv.FormatInt(d.Milliseconds(), 10)
	return &v
}

// Specs lists every topic of the stream: the five every policy uses, plus
// replay for gapless and ephemeral for streams with ephemeral event types.
func Specs(s *config.Stream) []Spec {
	n := For(s.Name)
	p := int32(s.Limits.Partitions)
	deleteAfter := func(name string, d time.Duration) Spec {
		return Spec{Name: name, Stream: s.Name, Partitions: p, Configs: map[string]string{"cleanup.policy": "delete", "retention.ms": *ms(d)}}
	}
	compact := func(name string) Spec {
		return Spec{Name: name, Stream: s.Name, Partitions: p, Configs: map[string]string{"cleanup.policy": "compact"}}
	}
	specs := []Spec{
		deleteAfter(n.In, 7*day),
		compact(n.Table),
		compact(n.State),
		deleteAfter(n.Outcomes, 7*day),
		deleteAfter(n.DLQ, 14*day),
	}
	if s.Policy == config.PolicyGapless {
		specs = append(specs, deleteAfter(n.Replay, 7*day))
	}
	if len(s.EphemeralTypes) > 0 {
		specs = append(specs, deleteAfter(n.Ephemeral, 10*time.Minute))
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
	var errs []error
	for _, s := range statuses {
		for _, w := range s.Weak {
			errs = append(errs, fmt.Errorf("%w: topic %s %s", ErrWeak, s.Spec.Name, w))
		}
	}
	return errors.Join(errs...)
}

// ErrMismatch marks a topic that exists with the wrong shape. It is never
// fixed automatically: repartitioning moves keys away from their state.
var ErrMismatch = errors.New("topic does not match the catalogue")

// Ensure creates the missing topics of the streams (when create is true),
// with durability d, and checks that existing ones have the stream's
// partition count and cleanup policy. Every problem is reported, each
// naming the topic and the fix. It also checks every topic's durability
// against d; those findings are in the statuses (Weak), not in the error.
func Ensure(ctx context.Context, adm *kadm.Client, streams []*config.Stream, d Durability, create bool) ([]Status, error) {
	var specs []Spec
	for _, s := range streams {
		specs = append(specs, Specs(s)...)
	}
	for i := range specs {
		specs[i].Configs[configMinInsync] = strconv.Itoa(d.MinInsyncReplicas)
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	details, err := listUncached(ctx, adm, names)
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
			errs = append(errs, fmt.Errorf("topic %s is missing; run `driftguard topics` to create it", spec.Name))
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
	if err != nil {
		return append(errs, fmt.Errorf("describing topic configs: %w", err))
	}
	byName := map[string]Spec{}
	for _, spec := range specs {
		byName[spec.Name] = spec
	}
	for _, rc := range configs {
		if rc.Err != nil {
			errs = append(errs, fmt.Errorf("describing topic %s: %w", rc.Name, rc.Err))
			continue
		}
		want := byName[rc.Name].CleanupPolicy()
		st := status[rc.Name]
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
