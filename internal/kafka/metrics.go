package kafka

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kprom"
)

// ClientMetrics are the options a component adds to a client it builds:
// a client id, "driftguard-" + role, which brokers log and quotas can
// name, and, with reg not nil, franz-go's client metrics (plugin/kprom) on
// reg as driftguard_kafka_*, labelled with that client id.
//
// kprom registers a set of collectors per client, so two clients on one
// registry need distinct ids: each role is one client at a time in a
// process (`dev` runs every component on one registry, hence roles such
// as "ingest", "sink", "process-<stream>"). A client built while another
// of its id is open (a bridge's catch-up readers, which run side by side)
// counts nothing until that one closes, instead of failing: a metric is
// never worth a client. Labels stay few: per broker (node_id) and per
// topic (fetch and produce), never per partition; no histograms.
func ClientMetrics(reg prometheus.Registerer, role string) []kgo.Opt {
	id := "driftguard-" + role
	if reg == nil {
		return []kgo.Opt{kgo.ClientID(id)}
	}
	registerer := &clientRegisterer{reg: reg, mine: map[prometheus.Collector]bool{}}
	m := kprom.NewMetrics("driftguard",
		kprom.Subsystem("kafka"),
		kprom.Registerer(registerer),
		kprom.WithClientLabel(),
		kprom.FetchAndProduceDetail(kprom.ByNode, kprom.ByTopic, kprom.Batches, kprom.Records, kprom.UncompressedBytes, kprom.CompressedBytes),
	)
	return []kgo.Opt{kgo.ClientID(id), kgo.WithHooks(m, newRequestCounter(registerer, id))}
}

// requestCounter counts the requests a client writes to the brokers by
// their kind (Produce, Fetch, EndTxn…), as
// driftguard_kafka_requests_total{client_id,request}: what a webhook
// costs the broker is its requests more than its records, and kprom
// counts bytes and records only.
type requestCounter struct {
	reg  *clientRegisterer
	sent *prometheus.CounterVec
	// byKey holds each kind's counter once looked up: a write is a hot
	// path.
	byKey [kmsg.MaxKey + 1]atomic.Pointer[prometheus.Counter]
}

func newRequestCounter(reg *clientRegisterer, id string) *requestCounter {
	c := &requestCounter{reg: reg, sent: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "driftguard_kafka_requests_total",
		Help:        "Requests the client wrote to the brokers, by kind (the Kafka protocol's request name).",
		ConstLabels: prometheus.Labels{"client_id": id},
	}, []string{"request"})}
	reg.MustRegister(c.sent)
	return c
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil || key < 0 || int(key) >= len(c.byKey) {
		return
	}
	counter := c.byKey[key].Load()
	if counter == nil {
		made := c.sent.WithLabelValues(kmsg.NameForKey(key))
		counter = &made
		c.byKey[key].Store(counter)
	}
	(*counter).Inc()
}

// OnClientClosed implements kgo.HookClientClosed: a closed client's series
// go, as kprom's do.
func (c *requestCounter) OnClientClosed(*kgo.Client) { c.reg.Unregister(c.sent) }

// clientRegisterer registers one client's kprom collectors on a shared
// registry. A collector already registered there (another open client of
// the same id) is skipped, not a panic, and only the collectors it
// registered are unregistered when its client closes, never the other
// client's of the same names.
type clientRegisterer struct {
	reg  prometheus.Registerer
	mu   sync.Mutex
	mine map[prometheus.Collector]bool
}

func (r *clientRegisterer) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mine[c] = true
	return nil
}

func (r *clientRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		var already prometheus.AlreadyRegisteredError
		if err := r.Register(c); err != nil && !errors.As(err, &already) {
			panic(err)
		}
	}
}

func (r *clientRegisterer) Unregister(c prometheus.Collector) bool {
	r.mu.Lock()
	mine := r.mine[c]
	delete(r.mine, c)
	r.mu.Unlock()
	return mine && r.reg.Unregister(c)
}
