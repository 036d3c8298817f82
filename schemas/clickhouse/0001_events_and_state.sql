-- Every outcome record, one row per decision. topic/partition/offset are the
-- position of the outcome record in <stream>.outcomes (what the sink read);
-- input_partition/input_offset point at the webhook in <stream>.in.
-- Portable to ClickHouse 18.16: DateTime plus *_ms Int64, no TTL, Map or JSON.
CREATE TABLE IF NOT EXISTS {database}.events (
    stream String,
    entity_key String,
    event_id String,
    event_type String,
    version Int64,
    outcome String,
    reason String,
    gap Int64,
    buffer_depth Int64,
    occurred_at_ms Int64,
    received_at_ms Int64,
    processed_at_ms Int64,
    processed_at DateTime,
    `topic` String,
    `partition` Int32,
    `offset` Int64,
    input_partition Int32,
    input_offset Int64,
    payload String
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(processed_at)
ORDER BY (stream, entity_key, processed_at_ms, `partition`, `offset`);

-- Latest public state per (stream, entity_key): read it with FINAL.
CREATE TABLE IF NOT EXISTS {database}.entity_state (
    stream String,
    entity_key String,
    version UInt64,
    state String,
    updated_at_ms Int64,
    expires_at_ms Int64,
    updated_at DateTime,
    `topic` String,
    `partition` Int32,
    `offset` Int64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (stream, entity_key);
