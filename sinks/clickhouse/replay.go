package clickhouse

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/record"
)

// ReplayRequested is the result of a replay_requests row written for the
// processor's request itself; the relay's rows carry what became of it
// (record.ReplayDelivered and the others).
const ReplayRequested = "requested"

// replayRow is one row of replay_requests: a processor's request, or the
// relay's record of what became of one, joined by request_id.
type replayRow struct {
	record.ReplayDelivery
}

// decodeReplay reads a `<stream>.replay` record of either kind.
func decodeReplay(r *kgo.Record) (*replayRow, error) {
	for _, h := range r.Headers {
		if h.Key == record.HeaderReplayDelivery {
			d, err := decode[record.ReplayDelivery]("replay delivery", r)
			if err != nil {
				return nil, err
			}
			return &replayRow{*d}, nil
		}
	}
	req, err := decode[record.ReplayRequest]("replay request", r)
	if err != nil {
		return nil, err
	}
	return &replayRow{record.ReplayDelivery{
		Stream: req.Stream, Key: req.Key, RequestID: record.ReplayRequestID(req.Stream, r.Partition, r.Offset, req.RequestedAtMs),
		Partition: r.Partition, Offset: r.Offset, FromSequence: req.FirstMissing, RequestedAtMs: req.RequestedAtMs,
		Result: ReplayRequested,
	}}, nil
}

// In replay_requests, topic/partition/offset are where the sink read the
// row's record; a relay's row names its request by request_id.
func newReplayBlock() *tableBlock[replayRow] {
	return newTableBlock("replay_requests", []string{"stream", "entity_key"}, sourceColumns,
		col("stream", func(_ *kgo.Record, r *replayRow) string { return r.Stream }),
		col("entity_key", func(_ *kgo.Record, r *replayRow) string { return r.Key }),
		col("request_id", func(_ *kgo.Record, r *replayRow) string { return r.RequestID }),
		col("from_sequence", func(_ *kgo.Record, r *replayRow) int64 { return r.FromSequence }),
		col("requested_at_ms", func(_ *kgo.Record, r *replayRow) int64 { return r.RequestedAtMs }),
		col("requested_at", func(_ *kgo.Record, r *replayRow) int64 { return seconds(r.RequestedAtMs) }),
		col("result", func(_ *kgo.Record, r *replayRow) string { return r.Result }),
		col("publisher_status", func(_ *kgo.Record, r *replayRow) int32 { return int32(r.Status) }),
		col("attempts", func(_ *kgo.Record, r *replayRow) int32 { return int32(r.Attempts) }),
		col("relayed_at_ms", func(_ *kgo.Record, r *replayRow) int64 { return r.AtMs }),
	)
}
