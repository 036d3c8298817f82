package record

// A view mark is the record the processors write, without a transaction,
// to a partition of `<stream>-table` and `<stream>.state` after the
// transactions that wrote it: a tombstone (nil value) of the empty key.
// Those topics are written in Kafka transactions, so the last offset of a
// quiet partition is a commit marker, which no consumer receives, and
// goka's view recovers only once it receives the record at the high
// watermark minus one (docs/processors.md, "Reading the tables with
// goka"). After a mark, the last offset is a record every read_committed
// reader receives.
//
// No entity has the empty key: ingest refuses an empty key field, and the
// processors dead-letter an input whose Kafka key differs from its body's
// key, so they never write a table value or a state record under it. A
// tombstone of a key that does not exist deletes nothing, in goka's
// storage as in a compacted topic, which drops the mark itself after
// delete.retention.ms. Every reader of those topics passes marks over.

// IsViewMark reports whether a record of `<stream>-table` or
// `<stream>.state` with this key and value is a view mark: no entity's
// record, only a position.
func IsViewMark(key, value []byte) bool { return len(key) == 0 && value == nil }
