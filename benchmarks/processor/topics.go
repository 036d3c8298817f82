package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
)

// presenceConfig is the default configuration with the shipped presence
// stream under each of names, so that their topics and groups are theirs
// alone, and processing.commit_interval commitInterval when positive.
func presenceConfig(commitInterval time.Duration, names ...string) (*config.Config, error) {
	cfg, err := config.Default()
	if err != nil {
		return nil, err
	}
	shipped := cfg.Streams["presence"]
	if shipped == nil {
		return nil, errors.New("the shipped catalogue has no presence stream")
	}
	cfg.Streams = map[string]*config.Stream{}
	for _, name := range names {
		s := *shipped
		s.Name = name
		cfg.Streams[name] = &s
	}
	if commitInterval > 0 {
		cfg.Processing.CommitInterval = commitInterval
	}
	return cfg, nil
}

// createStreams creates every topic driftguard gives the streams names,
// for either contender: the Kafka Streams application writes the same
// outcomes, state and dlq topics, with the same partitions and configs.
func createStreams(ctx context.Context, cl *kgo.Client, names ...string) error {
	cfg, err := presenceConfig(0, names...)
	if err != nil {
		return err
	}
	_, err = kafka.EnsureTopics(ctx, cl, cfg, true)
	return err
}

// placed is where a delivery landed in `<stream>.in`.
type placed struct {
	partition int32
	offset    int64
}

// preload writes ds to name's input as ingest would (key = user_id, the
// body as value, ingest's headers) and returns where each landed.
func preload(ctx context.Context, brokers []string, name string, ds []Delivery) ([]placed, error) {
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	in := naming.Prefixes{}.For(name).In
	at := make([]placed, len(ds))
	errc := make(chan error, 1)
	receivedAt := []byte(strconv.FormatInt(time.Now().UnixMilli(), 10))
	for i := range ds {
		d := &ds[i]
		rec := &kgo.Record{Topic: in, Key: []byte(d.User), Value: d.Body, Headers: []kgo.RecordHeader{
			{Key: record.HeaderStream, Value: []byte(name)},
			{Key: record.HeaderEventID, Value: []byte(d.EventID)},
			{Key: record.HeaderType, Value: []byte("presence.changed")},
			{Key: record.HeaderReceivedAt, Value: receivedAt},
			{Key: record.HeaderScheme, Value: []byte(config.SchemeStandardWebhooks)},
		}}
		cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
				return
			}
			at[i] = placed{r.Partition, r.Offset}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return nil, err
	}
	select {
	case err := <-errc:
		return nil, fmt.Errorf("preloading %s: %w", in, err)
	default:
	}
	return at, nil
}

// dropRun deletes the topics and groups of the runs' streams, Kafka
// Streams' internal topics included, so that a long benchmark does not
// fill the broker.
func dropRun(ctx context.Context, adm *kadm.Client, names ...string) error {
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		return err
	}
	var drop []string
	for _, t := range listed.Names() {
		for _, n := range names {
			if len(t) > len(n) && t[:len(n)] == n && (t[len(n)] == '.' || t[len(n)] == '-') {
				drop = append(drop, t)
			}
		}
	}
	if len(drop) > 0 {
		if _, err := adm.DeleteTopics(ctx, drop...); err != nil {
			return err
		}
	}
	// The groups are empty once their members left; a group still being
	// left is not worth failing the benchmark over.
	_, _ = adm.DeleteGroups(ctx, names...)
	return nil
}

// logBytesPerEvent is the size on the broker of each of stream name's
// topics, per input event, by what the topic holds: "in", "outcomes",
// "state" and "table", the store's changelog (driftguard's `<name>-table`,
// Kafka Streams' `<name>-presence-changelog`). It shows what each
// contender makes the broker write.
func logBytesPerEvent(ctx context.Context, adm *kadm.Client, name string, events int) (map[string]float64, error) {
	dirs, err := adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		return nil, err
	}
	n := naming.Prefixes{}.For(name)
	kinds := map[string]string{n.In: "in", n.Outcomes: "outcomes", n.State: "state", n.Table: "table", name + "-presence-changelog": "table"}
	out := map[string]float64{}
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if kind, ok := kinds[p.Topic]; ok {
				out[kind] += float64(p.Size) / float64(events)
			}
		})
	})
	return out, nil
}
