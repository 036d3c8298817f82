package record

import "strconv"

// Decision ids name a decision, not a record: a processor that repeats a
// decision after a crash writes it again under the same id, so a reader
// counts each decision once by its id (events.decision_id in ClickHouse).
// They are built from what a repeat sees again unchanged: for an input,
// its position in `<stream>.in`; for a timer, the key, the deadline the
// table held when it fired and the kind of timer. index is the decision's
// place among the decisions of that one input or timer visit (a drained
// gapless buffer or a reconciled quarantine decides several events at
// once).

// InputDecisionID is the id of the decision number index of the input at
// partition and offset of `<stream>.in`: `<stream>/<partition>/<offset>/<index>`,
// e.g. `presence/3/1234/0`.
func InputDecisionID(stream string, partition int32, offset int64, index int) string {
	b := make([]byte, 0, len(stream)+32)
	b = append(b, stream...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, offset, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(index), 10)
	return string(b)
}

// TimerDecisionID is the id of the decision number index of the timer of
// kind (the decision's reason, such as gap_timeout or orphan_ttl, or its
// outcome when it has none) that fired at deadlineMs for key:
// `<stream>/t/<deadline_ms>/<kind>/<index>/<key>`. The key comes last, so
// any key, slashes included, leaves the id unambiguous; the `t` cannot be
// a partition number, so no timer id equals an input's.
func TimerDecisionID(stream, key string, deadlineMs int64, kind Reason, index int) string {
	b := make([]byte, 0, len(stream)+len(kind)+len(key)+40)
	b = append(b, stream...)
	b = append(b, "/t/"...)
	b = strconv.AppendInt(b, deadlineMs, 10)
	b = append(b, '/')
	b = append(b, kind...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, '/')
	b = append(b, key...)
	return string(b)
}
