package main

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
)

// MetricsReporter is an Instance whose processes serve Prometheus metrics,
// the Kafka requests they write among them
// (driftguard_kafka_requests_total{request}, and franz-go's produce
// batches and records): what each hop asks of the broker per webhook.
type MetricsReporter interface {
	// MetricsURLs are the processes' /metrics, by process.
	MetricsURLs() map[string]string
}

// Series of the Kafka clients' metrics the runner reads.
const (
	requestsSeries       = "driftguard_kafka_requests_total{"
	produceBatchesSeries = "driftguard_kafka_produce_batches_total{"
	produceRecordsSeries = "driftguard_kafka_produce_records_total{"
	produceBytesSeries   = "driftguard_kafka_produce_compressed_bytes_total{"
	produceRawSeries     = "driftguard_kafka_produce_bytes_total{"
)

// kafkaCounts reads each process's Kafka client counters, summed over its
// clients, as "process/kind": kinds are the requests' (Produce, Fetch,
// EndTxn…) and the produce batches and records. A process that does not
// answer counts nothing.
func kafkaCounts(ctx context.Context, urls map[string]string) map[string]float64 {
	out := map[string]float64{}
	hc := &http.Client{Timeout: 5 * time.Second}
	for process, url := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			continue
		}
		resp, err := hc.Do(req)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if kind, v, ok := kafkaCount(sc.Text()); ok {
				out[process+"/"+kind] += v
			}
		}
		resp.Body.Close()
	}
	return out
}

// kafkaCount reads one line of the text format: the kind it counts and
// its value, when it is one of the series kafkaCounts reads.
func kafkaCount(line string) (kind string, v float64, ok bool) {
	labels, value, found := strings.Cut(line, "} ")
	if !found {
		return "", 0, false
	}
	switch {
	case strings.HasPrefix(line, requestsSeries):
		_, rest, found := strings.Cut(labels, `request="`)
		if !found {
			return "", 0, false
		}
		kind, _, _ = strings.Cut(rest, `"`)
	case strings.HasPrefix(line, produceBatchesSeries):
		kind = model.KindProduceBatches
	case strings.HasPrefix(line, produceRecordsSeries):
		kind = model.KindProduceRecords
	case strings.HasPrefix(line, produceBytesSeries):
		kind = model.KindProduceBytes
	case strings.HasPrefix(line, produceRawSeries):
		kind = model.KindProduceRawBytes
	default:
		return "", 0, false
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
	return kind, v, err == nil
}

// perThousand is what each count grew by from before to after, per 1,000
// of the n events between.
func perThousand(before, after map[string]float64, n int) map[string]float64 {
	if n <= 0 {
		return nil
	}
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d * 1000 / float64(n)
		}
	}
	return out
}
