package main

// Shared-cluster naming on the real broker: prefixes on every topic, group
// and transactional id; processors that create no topic; retention per
// stream, checked by `driftguard topics --check`.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// namedStream loads a config file defining stream (a latest stream like
// presence, two partitions) plus extra YAML under it, with environ, kept
// to that stream alone and pointed at the real broker; it returns the
// config, the file and an admin client of the broker that deletes the
// stream's topics when the test ends.
func namedStream(t *testing.T, stream, head, extra string, environ ...string) (*config.Config, string, *kadm.Client) {
	t.Helper()
	brokers := testenv.Kafka(t)
	entry := strings.Replace(presenceStreamYAML(stream), "partitions: 6", "partitions: 2", 1)
	file := testenv.WriteConfig(t, "", head+"streams:\n"+entry+extra)
	cfg, err := config.Load(file, environ)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Streams = map[string]*config.Stream{stream: cfg.Streams[stream]}
	cfg.Kafka.Brokers = brokers
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	deleteAtEnd(t, adm, topics.Specs(cfg.Kafka.Naming(), cfg.Streams[stream]))
	return cfg, file, adm
}

// With kafka.topic_prefix and kafka.group_prefix team-a. (from the
// environment): `driftguard topics` creates every topic of the stream
// under the prefix and no other; a webhook goes through ingest, the
// processors and the sink into ClickHouse, which it can only do if each
// of them read and wrote the prefixed topics, and the bridge serves its
// entity from the prefixed state topic; the processors' and the
// sink's groups, the processors' static member id and their transactional
// id carry the group prefix, and nothing of the stream is named without it.
func TestPrefixesOnEveryTopicGroupAndTransactionalID(t *testing.T) {
	const prefix = "team-a."
	ctx := testenv.Context(t, 2*time.Minute)
	stream := testenv.UniqueName("prefixed")
	cfg, _, adm := namedStream(t, stream,
		fmt.Sprintf("clickhouse:\n  consumer_group: %s-sink\n  batch_period: 100ms\nprocessing:\n  instance_id: pod-0\n", stream), "",
		"DRIFTGUARD_KAFKA_TOPIC_PREFIX="+prefix, "DRIFTGUARD_KAFKA_GROUP_PREFIX="+prefix,
		"DRIFTGUARD_SECRETS_"+strings.ToUpper(stream)+"="+testSecret)
	cfg.ClickHouse.Addr = testenv.ClickHouse(t)
	cfg.ClickHouse.Database = testenv.UniqueName("dg_prefixed")
	// Written out, not built by the code under test.
	wantTopics := []string{prefix + stream + "-table", prefix + stream + ".dlq", prefix + stream + ".in", prefix + stream + ".outcomes", prefix + stream + ".state"}
	wantGroups := []string{prefix + stream, prefix + stream + "-sink"}
	wantTxn := prefix + "driftguard-" + stream + "-pod-0"

	var out bytes.Buffer
	if err := runTopics(ctx, &environment{cfg: cfg, stdout: &out, stderr: io.Discard}, true); err != nil {
		t.Fatalf("topics: %v\n%s", err, out.String())
	}
	rows := topicTable(t, out.String())
	if got := slices.Sorted(maps.Keys(rows)); !slices.Equal(got, wantTopics) {
		t.Errorf("topics created %q, want %q", got, wantTopics)
	}
	for topic, row := range rows {
		if row[len(row)-1] != "created" {
			t.Errorf("%s: row %v, want created", topic, row)
		}
	}

	conn := openDroppedAtEnd(t, ctx, cfg.ClickHouse)
	if _, err := sinkch.Migrate(ctx, conn, cfg.ClickHouse, nil); err != nil {
		t.Fatal(err)
	}
	p := runPipeline(t, ctx, cfg, conn)
	p.send(t, ctx, []delivery{{ID: "p-1", Key: "alice", Version: 1,
		Body: testenv.Presence{EventID: "p-1", User: "alice", Version: 1}.Body()}})

	var topic string
	testenv.WaitFor(t, ctx, "the webhook's outcome in ClickHouse", func() bool {
		err := conn.QueryRow(ctx, fmt.Sprintf("SELECT topic FROM %s.events WHERE stream = '%s' AND event_id = 'p-1'", cfg.ClickHouse.Database, stream)).Scan(&topic)
		return err == nil
	})
	if want := prefix + stream + ".outcomes"; topic != want {
		t.Errorf("the outcome came from %s, want %s", topic, want)
	}

	// The bridge serves the entity, read from the prefixed state topic.
	cfg.Bridge.Addr = "127.0.0.1:0"
	bridge, page, err := devBridge(cfg, cfg.Kafka.Brokers, testenv.Logger(t), telemetry.NewOps())
	if err != nil {
		t.Fatal(err)
	}
	runServices(t, ctx, "bridge", bridge)
	base, token, _ := strings.Cut(page, "/#token=")
	testenv.WaitFor(t, ctx, "alice's state from the bridge", func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/streams/"+stream+"/entities/alice", nil)
		if err != nil {
			return false
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// Groups and transactions the broker knows of, for this stream alone.
	var groups, txns []string
	testenv.WaitFor(t, ctx, "the groups and the transactional id", func() bool {
		listed, err := adm.ListGroups(ctx)
		if err != nil {
			return false
		}
		txnsListed, err := adm.ListTransactions(ctx, nil, nil)
		if err != nil {
			return false
		}
		groups = slices.DeleteFunc(listed.Groups(), func(g string) bool { return !strings.Contains(g, stream) })
		txns = slices.DeleteFunc(txnsListed.TransactionalIDs(), func(id string) bool { return !strings.Contains(id, stream) })
		return len(groups) >= len(wantGroups) && len(txns) >= 1
	})
	slices.Sort(groups)
	if !slices.Equal(groups, wantGroups) {
		t.Errorf("groups %q, want %q", groups, wantGroups)
	}
	if !slices.Equal(txns, []string{wantTxn}) {
		t.Errorf("transactional ids %q, want %q", txns, wantTxn)
	}
	described, err := adm.DescribeGroups(ctx, wantGroups...)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range wantGroups {
		if d := described[g]; d.Err != nil || len(d.Members) == 0 {
			t.Errorf("group %s: %d members, err %v; want the running component", g, len(d.Members), d.Err)
		}
	}
	for _, m := range described[prefix+stream].Members {
		if m.InstanceID == nil || *m.InstanceID != wantTxn {
			t.Errorf("processor member's instance id %v, want %s", m.InstanceID, wantTxn)
		}
	}

	all, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ours := slices.DeleteFunc(all.Names(), func(name string) bool { return !strings.Contains(name, stream) })
	slices.Sort(ours)
	if !slices.Equal(ours, wantTopics) {
		t.Errorf("the broker has topics %q of the stream, want only %q", ours, wantTopics)
	}
}

// `driftguard process --no-create` with one topic of its stream missing
// stops at once with an error naming that topic (under the prefix) and
// the command that creates it, and creates nothing; once `driftguard
// topics` has made it, the same command starts and joins its group.
func TestProcessNoCreate(t *testing.T) {
	isolateEnv(t)
	const prefix = "team-a."
	stream := testenv.UniqueName("nocreate")
	cfg, file, adm := namedStream(t, stream, "", "", "DRIFTGUARD_KAFKA_TOPIC_PREFIX="+prefix)
	ctx := testenv.Context(t, time.Minute)
	for name, value := range map[string]string{
		"DRIFTGUARD_KAFKA_BROKERS": strings.Join(cfg.Kafka.Brokers, ","), "DRIFTGUARD_KAFKA_TOPIC_PREFIX": prefix,
		"DRIFTGUARD_TELEMETRY_ADDR": "127.0.0.1:0", "DRIFTGUARD_DATA_DIR": t.TempDir(),
	} {
		t.Setenv(name, value)
	}
	dlq := prefix + stream + ".dlq"
	var made []string
	for _, spec := range topics.Specs(cfg.Kafka.Naming(), cfg.Streams[stream]) {
		if spec.Name == dlq {
			continue
		}
		configs := map[string]*string{}
		for k, v := range spec.Configs {
			configs[k] = &v
		}
		if _, err := adm.CreateTopic(ctx, spec.Partitions, 1, configs, spec.Name); err != nil {
			t.Fatal(err)
		}
		made = append(made, spec.Name)
	}
	testenv.WaitFor(t, ctx, "the topics made by hand", func() bool {
		details, err := adm.ListTopics(ctx, made...)
		return err == nil && details.Error() == nil && len(details) == len(made)
	})

	args := []string{"process", "--config", file, "--streams", stream, "--no-create"}
	r := runCLI(t, args...)
	if r.code != 1 {
		t.Fatalf("process --no-create with a topic missing: %v", r)
	}
	for _, want := range []string{"topic " + dlq + " is missing", "`driftguard topics`", "--no-create"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the error does not say %q:\n%s", want, r.stderr)
		}
	}
	for _, name := range made {
		if strings.Contains(r.stderr, name+" is missing") {
			t.Errorf("the error calls %s missing:\n%s", name, r.stderr)
		}
	}
	if details, err := adm.ListTopics(ctx, dlq); err != nil || !errors.Is(details[dlq].Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("%s after process --no-create: %+v %v; want it still missing", dlq, details[dlq], err)
	}

	if err := runTopics(ctx, &environment{cfg: cfg, stdout: io.Discard, stderr: io.Discard}, true); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	code := make(chan int, 1)
	go func() { code <- run(runCtx, args, io.Discard, io.Discard) }()
	testenv.WaitFor(t, ctx, "the processor in its group", func() bool {
		described, err := adm.DescribeGroups(ctx, stream)
		return err == nil && len(described[stream].Members) == 1
	})
	stop()
	if c := <-code; c != 0 {
		t.Errorf("process --no-create with every topic there exited %d", c)
	}
}

// A topic is created with its stream's retention, and `driftguard topics
// --check` reports one whose retention.ms an operator changed: the error
// names it, the catalogue's value and the command that sets it, its row
// says differs, and the topic is left as it is.
func TestTopicsCheckReportsOtherRetention(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	stream := testenv.UniqueName("retention")
	cfg, _, adm := namedStream(t, stream, "", "    retention: {dlq: 48h}\n")
	in, dlq := stream+".in", stream+".dlq"
	if err := runTopics(ctx, &environment{cfg: cfg, stdout: io.Discard, stderr: io.Discard}, true); err != nil {
		t.Fatal(err)
	}
	retention := func(topic string) string {
		configs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil || len(configs) != 1 || configs[0].Err != nil {
			t.Fatalf("describing %s: %v %v", topic, err, configs)
		}
		for _, c := range configs[0].Configs {
			if c.Key == "retention.ms" {
				return c.MaybeValue()
			}
		}
		return ""
	}
	for topic, want := range map[string]string{in: "604800000", dlq: "172800000"} {
		if got := retention(topic); got != want {
			t.Errorf("%s created with retention.ms=%s, want %s", topic, got, want)
		}
	}

	hour := "3600000"
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: &hour}}, in)
	if err == nil {
		err = resp[0].Err
	}
	if err != nil {
		t.Fatal(err)
	}
	// The broker describes the alteration a moment after it is made.
	var stdout bytes.Buffer
	testenv.WaitFor(t, ctx, "the check to see the new retention", func() bool {
		stdout.Reset()
		err = runTopics(ctx, &environment{cfg: cfg, stdout: &stdout, stderr: io.Discard}, false)
		return err != nil
	})
	if !errors.Is(err, topics.ErrDrift) || errors.Is(err, topics.ErrMismatch) {
		t.Fatalf("topics --check = %v, want ErrDrift alone", err)
	}
	for _, want := range []string{
		"topic " + in + " has retention.ms=3600000 but streams." + stream + ".retention.in is 168h",
		"kafka-configs --alter --entity-type topics --entity-name " + in + " --add-config retention.ms=604800000",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	rows := topicTable(t, stdout.String())
	for topic, want := range map[string]string{in: "delete 168h 1 1 differs", dlq: "delete 48h 1 1 ok", stream + ".state": "compact - 1 1 ok"} {
		if got := strings.Join(rows[topic][1:], " "); got != want {
			t.Errorf("%s: row %v, want %s", topic, rows[topic], want)
		}
	}
	if got := retention(in); got != hour {
		t.Errorf("%s: retention.ms=%s after the check, want it left at %s", in, got, hour)
	}
}
