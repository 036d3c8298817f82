// Package topics names every Kafka topic of a stream in one place and
// creates and checks them: partition counts (all of a stream's topics are
// co-partitioned) and cleanup policies (design §4).
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

// Status of one topic after Ensure.
type Status struct {
	Spec    Spec
	Created bool
}

// ErrMismatch marks a topic that exists with the wrong shape. It is never
// fixed automatically: repartitioning moves keys away from their state.
var ErrMismatch = errors.New("topic does not match the catalogue")

// Ensure creates the missing topics of the streams (when create is true) and
// checks that existing ones have the stream's partition count and cleanup
// policy. Every problem is reported, each naming the topic and the fix.
func Ensure(ctx context.Context, adm *kadm.Client, streams []*config.Stream, replication int16, create bool) ([]Status, error) {
	var specs []Spec
	for _, s := range streams {
		specs = append(specs, Specs(s)...)
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
		for _, spec := range missing {
			configs := map[string]*string{}
			for k, v := range spec.Configs {
				configs[k] = &v
			}
			resp, err := adm.CreateTopic(ctx, spec.Partitions, replication, configs, spec.Name)
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
	errs = append(errs, checkShapes(ctx, adm, specs, details)...)
	return statuses, errors.Join(errs...)
}

func checkShapes(ctx context.Context, adm *kadm.Client, specs []Spec, details kadm.TopicDetails) []error {
	var errs []error
	var existing []string
	for _, spec := range specs {
		d, ok := details[spec.Name]
		if !ok || d.Err != nil {
			continue
		}
		existing = append(existing, spec.Name)
		if got := int32(len(d.Partitions)); got != spec.Partitions {
			errs = append(errs, fmt.Errorf("%w: topic %s has %d partitions but stream %s needs %d (streams.%s.limits.partitions): every topic of a stream must have the same count so a key's input, table and outputs share a partition",
				ErrMismatch, spec.Name, got, spec.Stream, spec.Partitions, spec.Stream))
		}
	}
	if len(existing) == 0 {
		return errs
	}
	configs, err := adm.DescribeTopicConfigs(ctx, existing...)
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
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil && !samePolicy(*c.Value, want) {
				errs = append(errs, fmt.Errorf("%w: topic %s has cleanup.policy=%s but needs %s", ErrMismatch, rc.Name, *c.Value, want))
			}
		}
	}
	return errs
}

func samePolicy(got, want string) bool {
	return strings.ReplaceAll(got, " ", "") == want
}

// listUncached lists topics from a broker. kadm.ListTopics otherwise answers
// from the client's metadata cache for MetadataMinAge (5s by default), which
// may still say "unknown topic" for a topic created since.
func listUncached(ctx context.Context, adm *kadm.Client, names []string) (kadm.TopicDetails, error) {
	return adm.ListTopics(kadm.WithAuthorizedOps(ctx), names...)
}

// waitVisible lists until every topic is in the broker's metadata, which
// trails CreateTopics by a moment, or gives up after a while.
func waitVisible(ctx context.Context, adm *kadm.Client, names []string) (kadm.TopicDetails, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		details, err := listUncached(ctx, adm, names)
		if err != nil {
			return nil, err
		}
		visible := true
		for _, name := range names {
			if d, ok := details[name]; !ok || d.Err != nil || len(d.Partitions) == 0 {
				visible = false
			}
		}
		if visible || time.Now().After(deadline) {
			return details, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
