package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/webhook"
)

// loop relays one stream's requests.
type loop struct {
	stream *config.Stream
	topics naming.Topics
	conn   kafka.Conn
	opts   []kgo.Opt
	pub    *webhook.Publisher
	m      *metrics
	log    *slog.Logger
	// gaps are the gaps the publisher accepted, per key.
	gaps *gaps
	// now is the clock of the records the loop writes.
	now func() time.Time
}

func newLoop(cfg *config.Config, s *config.Stream, conn kafka.Conn, secret string, transport http.RoundTripper, m *metrics, log *slog.Logger) (*loop, error) {
	if _, err := webhook.NewSigner(config.SchemeStandardWebhooks, secret); err != nil {
		return nil, fmt.Errorf("in streams.%s.replay.secret: %w", s.Name, err)
	}
	names := cfg.Kafka.Naming()
	l := &loop{
		stream: s, topics: names.For(s.Name), conn: conn, m: m, log: log.With("stream", s.Name), now: time.Now, gaps: newGaps(s.Replay.ResendAfter),
		pub: &webhook.Publisher{URL: s.Replay.URL, Secret: secret, Client: &http.Client{Timeout: s.Replay.Timeout, Transport: transport}},
	}
	l.opts = kafka.Options(conn,
		kgo.ConsumerGroup(names.RelayGroup(s.Name)),
		kgo.ConsumeTopics(l.topics.Replay),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.TransactionalID(names.RelayTransactionalID(cfg.Processing.InstanceID, s.Name)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.OnPartitionsAssigned(l.recall),
	)
	return l, nil
}

// recallTimeout bounds reading back a partition's deliveries when it is
// assigned, well within the group's rebalance timeout (1m).
const recallTimeout = 20 * time.Second

// recall reads, before the loop fetches partitions newly assigned to it,
// their delivery records of the last replay.resend_after, so that a relay
// started again, or taking partitions over from another, remembers the
// gaps accepted before the group's committed offsets as well as after.
// Without them it would only send such a gap's re-ask once more, with
// the same webhook-id: a failure is logged, not fatal.
func (l *loop) recall(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
	partitions := assigned[l.topics.Replay]
	if len(partitions) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, recallTimeout)
	defer cancel()
	since := l.now().Add(-l.stream.Replay.ResendAfter)
	err := kafka.ReadCommittedSince(ctx, l.conn, l.topics.Replay, partitions, since, func(r *kgo.Record) error {
		l.gaps.observe(r)
		return nil
	})
	if err != nil {
		l.log.Warn("the deliveries of the assigned partitions could not be read; their gaps may be asked for once more", "partitions", partitions, "err", err)
	}
}

// run polls, delivers and records until ctx is done. A batch cut short by
// ctx is not recorded: its requests are sent again, with the same ids, by
// whichever relay reads the partitions next.
func (l *loop) run(ctx context.Context) error {
	sess, err := kgo.NewGroupTransactSession(l.opts...)
	if err != nil {
		return fmt.Errorf("kafka session: %w", err)
	}
	defer sess.Close()
	for {
		fetches := sess.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if fetches.IsClientClosed() {
			return errors.New("the Kafka client closed")
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			l.log.Warn("fetch failed; retried", "topic", topic, "partition", partition, "err", err)
		})
		records := fetches.Records()
		if len(records) == 0 {
			continue
		}
		out := l.handle(ctx, records)
		if ctx.Err() != nil {
			return nil
		}
		if len(out) == 0 {
			// Only the relay's own delivery records: their offsets are
			// committed with the next batch's, and read again and skipped
			// after a restart meanwhile.
			continue
		}
		committed, err := l.record(ctx, sess, out)
		if err != nil {
			return err
		}
		if committed {
			for _, r := range out {
				l.gaps.observe(r)
			}
		}
	}
}

// record writes out and commits the batch's offsets in one transaction,
// and reports whether it committed. A transaction the session aborts (the
// group rebalanced meanwhile) leaves the batch to be read and sent again.
func (l *loop) record(ctx context.Context, sess *kgo.GroupTransactSession, out []*kgo.Record) (bool, error) {
	// A stop does not cut the transaction short: one left open would hold
	// the group's offsets unstable, and the next relay with them, until
	// the broker aborts it after the transaction timeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	if err := sess.Begin(); err != nil {
		return false, fmt.Errorf("begin transaction: %w", err)
	}
	promise := kgo.AbortingFirstErrPromise(sess.Client())
	for _, r := range out {
		sess.Produce(ctx, r, promise.Promise())
	}
	commit := kgo.TryCommit
	if err := promise.Err(); err != nil {
		l.log.Warn("writing the deliveries failed; the batch is sent again", "err", err)
		commit = kgo.TryAbort
	}
	committed, err := sess.End(ctx, commit)
	if err != nil {
		return false, fmt.Errorf("end transaction: %w", err)
	}
	if !committed {
		l.log.Info("the batch was not recorded (the group rebalanced); its requests are sent again")
	}
	return committed, nil
}

// endTimeout bounds writing and committing one batch's records.
const endTimeout = 30 * time.Second

// request is one replay request of a batch: id names its record,
// webhookID its gap.
type request struct {
	rec       *kgo.Record
	req       record.ReplayRequest
	id        string
	webhookID string
}

// handle delivers the batch's requests and returns what records them:
// a delivery record each, and a dead letter for those that could not be
// delivered or read. Of each key's requests, only the newest is sent, and
// only if the publisher has not accepted its gap, or a later one, within
// replay.resend_after.
func (l *loop) handle(ctx context.Context, records []*kgo.Record) []*kgo.Record {
	var out []*kgo.Record
	var reqs []*request
	for _, rec := range records {
		if IsDelivery(rec) {
			l.gaps.observe(rec)
			continue
		}
		var req record.ReplayRequest
		if err := json.Unmarshal(rec.Value, &req); err != nil {
			l.log.Error("replay request cannot be decoded; sent to the DLQ", "partition", rec.Partition, "offset", rec.Offset, "err", err)
			out = append(out, l.deadLetter(rec, record.ReplayRequest{Key: string(rec.Key)}, "undecodable: "+err.Error()))
			continue
		}
		reqs = append(reqs, &request{rec: rec, req: req,
			id:        record.ReplayRequestID(l.stream.Name, rec.Partition, rec.Offset, req.RequestedAtMs),
			webhookID: record.ReplayWebhookID(l.stream.Name, string(rec.Key), req.FirstMissing)})
	}
	// notSent records a request that is not POSTed, superseded or a
	// duplicate, and counts it.
	notSent := func(r *request, result string) {
		out = append(out, l.delivery(r, outcome{result: result}))
		counter := l.m.superseded
		if result == record.ReplayDuplicate {
			counter = l.m.duplicates
		}
		counter.WithLabelValues(l.stream.Name).Inc()
	}
	newest, superseded := newestPerKey(reqs)
	for _, r := range superseded {
		notSent(r, record.ReplaySuperseded)
	}
	now := l.now()
	l.gaps.sweep(now)
	var send []*request
	for _, r := range newest {
		if result := l.gaps.verdict(string(r.rec.Key), r.req.FirstMissing, now); result != "" {
			notSent(r, result)
			continue
		}
		send = append(send, r)
	}
	results := make([]outcome, len(send))
	var wg sync.WaitGroup
	slots := make(chan struct{}, l.stream.Replay.Concurrency)
	for i, r := range send {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			results[i] = l.deliver(ctx, r)
		}()
	}
	wg.Wait()
	for i, r := range send {
		o := results[i]
		out = append(out, l.delivery(r, o))
		if o.result == record.ReplayRefused || o.result == record.ReplayGaveUp {
			out = append(out, l.deadLetter(r.rec, r.req, o.detail))
		}
	}
	return out
}

// newestPerKey splits a batch's requests, in log order, into each key's
// newest and the older ones they supersede, both in log order. A key's
// records are in one partition, in order, so its last request is its
// newest.
func newestPerKey(reqs []*request) (send, superseded []*request) {
	last := map[string]int{}
	for i, r := range reqs {
		last[string(r.rec.Key)] = i
	}
	for i, r := range reqs {
		if last[string(r.rec.Key)] == i {
			send = append(send, r)
		} else {
			superseded = append(superseded, r)
		}
	}
	return send, superseded
}

// IsDelivery reports whether rec is the relay's delivery record rather
// than a processor's request.
func IsDelivery(rec *kgo.Record) bool {
	for _, h := range rec.Headers {
		if h.Key == record.HeaderReplayDelivery {
			return true
		}
	}
	return false
}

// delivery is the record of what became of r.
func (l *loop) delivery(r *request, o outcome) *kgo.Record {
	d := record.ReplayDelivery{
		Stream: l.stream.Name, Key: string(r.rec.Key), RequestID: r.id, WebhookID: r.webhookID, Partition: r.rec.Partition, Offset: r.rec.Offset,
		FromSequence: r.req.FirstMissing, RequestedAtMs: r.req.RequestedAtMs,
		Result: o.result, Status: o.status, Attempts: o.attempts, AtMs: l.now().UnixMilli(),
	}
	value, _ := json.Marshal(d) // strings and numbers: never fails
	return &kgo.Record{Topic: l.topics.Replay, Key: r.rec.Key, Value: value,
		Headers: []kgo.RecordHeader{{Key: record.HeaderReplayDelivery, Value: []byte(r.webhookID)}}}
}

// deadLetter is the dead letter of the request rec.
func (l *loop) deadLetter(rec *kgo.Record, req record.ReplayRequest, detail string) *kgo.Record {
	value, _ := json.Marshal(record.DeadLetter{
		Stream: l.stream.Name, Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: string(rec.Key),
		Reason: record.ReasonReplayUndeliverable, Detail: detail, ReceivedAtMs: req.RequestedAtMs, AtMs: l.now().UnixMilli(),
		Payload: rec.Value,
	})
	l.m.deadLetters.WithLabelValues(l.stream.Name).Inc()
	return &kgo.Record{Topic: l.topics.DLQ, Key: rec.Key, Value: value}
}
