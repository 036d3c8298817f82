-- Everything sent to a DLQ topic. topic/partition/offset locate the original
-- record in <stream>.in; source_* locate the DLQ record the sink read.
CREATE TABLE IF NOT EXISTS {database}.dlq (
    stream String,
    entity_key String,
    event_id String,
    event_type String,
    reason String,
    detail String,
    `topic` String,
    `partition` Int32,
    `offset` Int64,
    dead_at_ms Int64,
    dead_at DateTime,
    source_topic String,
    source_partition Int32,
    source_offset Int64,
    payload String
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(dead_at)
ORDER BY (stream, reason, dead_at_ms, source_partition, source_offset);

-- Children whose parent never came (reason orphan_ttl in the DLQ).
-- entity_key is the missing parent's id.
CREATE TABLE IF NOT EXISTS {database}.orphans (
    stream String,
    entity_key String,
    event_id String,
    event_type String,
    received_at_ms Int64,
    expired_at_ms Int64,
    expired_at DateTime,
    status String,
    source_topic String,
    source_partition Int32,
    source_offset Int64,
    payload String
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(expired_at)
ORDER BY (stream, entity_key, expired_at_ms, source_partition, source_offset);
