package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
)

// The topic half of the config-drift check (issue 16): every topic
// driftguard creates, for streams of every policy, has the configured
// replicas on every partition, all in sync, min.insync.replicas and
// unclean.leader.election.enable=false set on the topic itself, on one
// broker with the defaults and on the three-broker cluster with
// replication factor 3 (min.insync.replicas 2 by default). On the cluster
// the broker's own topics that the processors' transactions and the
// consumer groups' offsets live in are replicated the same way.
func TestTopicSettingsOnEveryCreatedTopic(t *testing.T) {
	t.Run("broker", func(t *testing.T) {
		checkCreatedTopicSettings(t, testenv.Kafka(t), 1, 1)
	})
	t.Run("cluster", func(t *testing.T) {
		brokers := testenv.KafkaCluster(t).Brokers
		adm := checkCreatedTopicSettings(t, brokers, 3, 2)
		makeInternalTopics(t, brokers)
		for _, internal := range []string{"__transaction_state", "__consumer_offsets"} {
			checkTopicSettings(t, adm, internal, 3, "2", false)
		}
	})
}

// checkCreatedTopicSettings creates the topics of a copy of every shipped
// stream with replication factor rf and checks each of them; it returns an
// admin client of the brokers.
func checkCreatedTopicSettings(t *testing.T, brokers []string, rf, minISR int) *kadm.Client {
	t.Helper()
	ctx := testenv.Context(t, 2*time.Minute)
	cfg, specs := catalogueCopies(t, brokers, rf)
	if got := cfg.Kafka.MinInsyncReplicasOrDefault(); got != minISR {
		t.Fatalf("min.insync.replicas by default %d with %d replicas, want %d", got, rf, minISR)
	}
	cl := testenv.Topics(t, ctx, cfg, brokers)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	deleteAtEnd(t, adm, specs)
	for _, spec := range specs {
		checkTopicSettings(t, adm, spec.Name, rf, strconv.Itoa(minISR), true)
	}
	return adm
}

// checkTopicSettings wants topic's every partition on rf replicas, all in
// sync, and min.insync.replicas minISR; when created, both it and
// unclean.leader.election.enable=false set on the topic rather than
// inherited.
func checkTopicSettings(t *testing.T, adm *kadm.Client, topic string, rf int, minISR string, created bool) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	var details kadm.TopicDetails
	// A new topic's followers join its ISRs a moment after it is created.
	testenv.Poll(ctx, func() bool {
		var err error
		details, err = adm.ListTopics(kadm.WithAuthorizedOps(ctx), topic)
		if err != nil || details[topic].Err != nil {
			return false
		}
		for _, p := range details[topic].Partitions {
			if len(p.ISR) < rf {
				return false
			}
		}
		return true
	})
	d, ok := details[topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		t.Fatalf("%s: not listed: %v", topic, d.Err)
	}
	for _, p := range d.Partitions {
		if len(p.Replicas) != rf || len(p.ISR) != rf {
			t.Errorf("%s/%d: replicas %v, in sync %v; want %d of each", topic, p.Partition, p.Replicas, p.ISR, rf)
		}
	}
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil || len(configs) != 1 || configs[0].Err != nil {
		t.Fatalf("%s: describing its configs: %v %v", topic, err, configs)
	}
	want := map[string]string{"min.insync.replicas": minISR, "unclean.leader.election.enable": "false"}
	for _, c := range configs[0].Configs {
		v, checked := want[c.Key]
		if !checked {
			continue
		}
		delete(want, c.Key)
		if c.MaybeValue() != v {
			t.Errorf("%s: %s=%s, want %s", topic, c.Key, c.MaybeValue(), v)
		}
		if created && c.Source != kmsg.ConfigSourceDynamicTopicConfig {
			t.Errorf("%s: %s comes from %s, want it set on the topic", topic, c.Key, c.Source)
		}
	}
	for key := range want {
		t.Errorf("%s: %s not described", topic, key)
	}
}

// makeInternalTopics has the brokers create their transaction and offset
// topics, which they do on first use: a transaction, and a group's
// coordinator looked up.
func makeInternalTopics(t *testing.T, brokers []string) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	topic := testenv.UniqueName("internal")
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.TransactionalID(topic), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, topic); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topic)
	testenv.Transact(t, ctx, cl, true, &kgo.Record{Value: []byte("x")})
	testenv.WaitFor(t, ctx, "a group coordinator", func() bool {
		_, err := adm.FetchOffsets(ctx, topic)
		return err == nil
	})
}

// `driftguard topics --check` on the cluster: a topic with fewer replicas,
// a lower min.insync.replicas or unclean leader election is named, with
// its fix, its row says weak, and the command fails; the processors'
// check (Ensure) does not refuse it.
func TestTopicsCheckReportsWeakTopicsOnTheCluster(t *testing.T) {
	brokers := testenv.KafkaCluster(t).Brokers
	ctx := testenv.Context(t, 2*time.Minute)
	cfg, specs := catalogueCopies(t, brokers, 3)
	cfg.Streams = map[string]*config.Stream{specs[0].Stream: cfg.Streams[specs[0].Stream]}
	names := naming.Prefixes{}.For(specs[0].Stream)
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	deleteAtEnd(t, adm, specs)

	// The state topic made by hand on two replicas (with the min ISR
	// driftguard wants), the rest by driftguard, then two of them
	// weakened.
	compact, two := "compact", "2"
	if resp, err := adm.CreateTopic(ctx, 3, 2, map[string]*string{"cleanup.policy": &compact, "min.insync.replicas": &two}, names.State); err != nil || resp.Err != nil {
		t.Fatalf("creating %s: %v %v", names.State, err, resp.Err)
	}
	if _, err := kafka.EnsureTopics(ctx, cl, cfg, true); err != nil {
		t.Fatalf("weak topics stop Ensure: %v", err)
	}
	one, yes := "1", "true"
	alter := func(topic, key string, value *string) {
		resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: value}}, topic)
		if err == nil {
			err = resp[0].Err
		}
		if err != nil {
			t.Fatalf("altering %s of %s: %v", key, topic, err)
		}
	}
	alter(names.In, "min.insync.replicas", &one)
	alter(names.Table, "unclean.leader.election.enable", &yes)

	wants := []string{
		"topic " + names.In + " has min.insync.replicas=1 but kafka.min_insync_replicas is 2",
		"--entity-name " + names.In + " --add-config min.insync.replicas=2",
		"topic " + names.Table + " has unclean.leader.election.enable=true",
		"topic " + names.State + " has 2 replicas of a partition but kafka.replication_factor is 3",
	}
	// A broker answers a topic's configs from its copy of the cluster's
	// metadata, which takes the alterations a moment after the
	// controller: the check is run until it has seen both, as an operator
	// would see them a moment after weakening the topics.
	var stdout bytes.Buffer
	check := func() error {
		stdout.Reset()
		return runTopics(ctx, &environment{cfg: cfg, stdout: &stdout, stderr: &bytes.Buffer{}}, false)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	testenv.Poll(waitCtx, func() bool { err = check(); return err == nil || containsAll(err.Error(), wants) })
	cancel()
	if !errors.Is(err, topics.ErrWeak) {
		t.Fatalf("topics --check = %v, want an error wrapping ErrWeak", err)
	}
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	rows := topicTable(t, stdout.String())
	for topic, want := range map[string]string{
		names.In: "3 1 weak", names.Table: "3 2 weak", names.State: "2 2 weak", names.Outcomes: "3 2 ok", names.DLQ: "3 2 ok",
	} {
		if got := strings.Join(rows[topic][3:], " "); got != want {
			t.Errorf("%s: row %v, want replicas, min ISR and status %s", topic, rows[topic], want)
		}
	}
}

// catalogueCopies is the default configuration with a copy of each shipped
// stream under a name of its own, three partitions each, on brokers with
// replication factor rf, and the topics of the copies.
func catalogueCopies(t *testing.T, brokers []string, rf int) (*config.Config, []topics.Spec) {
	t.Helper()
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	copies := map[string]*config.Stream{}
	var specs []topics.Spec
	for _, base := range slices.Sorted(maps.Keys(cfg.Streams)) {
		s := *cfg.Streams[base]
		s.Name = testenv.UniqueName("topics_" + base)
		s.Limits.Partitions = 3
		copies[s.Name] = &s
		specs = append(specs, topics.Specs(naming.Prefixes{}, &s)...)
	}
	cfg.Streams = copies
	cfg.Kafka.Brokers = brokers
	cfg.Kafka.ReplicationFactor = rf
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg, specs
}

// deleteAtEnd deletes the topics of specs when the test ends.
func deleteAtEnd(t *testing.T, adm *kadm.Client, specs []topics.Spec) {
	t.Cleanup(func() {
		names := make([]string, len(specs))
		for i, s := range specs {
			names[i] = s.Name
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, names...)
	})
}

// containsAll says whether s contains every one of subs.
func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
