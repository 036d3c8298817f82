-- Replay requests of gapless streams (<stream>.replay) and what the relay
-- made of each, one row per record of the topic: the processor's request
-- (result 'requested', relayed_at_ms 0) and the relay's record (result
-- delivered, refused, gave_up or superseded; publisher_status is the
-- publisher's last answer, 0 for none; attempts the POSTs made;
-- relayed_at_ms when the relay was done with it), joined by request_id,
-- the webhook-id the publisher received. Whether the gap was filled is
-- read from events (an applied row at from_sequence), not stored: see
-- the gaps_never_filled query in docs/analyst-queries.md.
-- topic/partition/offset are the record the sink read.
CREATE TABLE IF NOT EXISTS {database}.replay_requests (
    stream String,
    entity_key String,
    request_id String,
    from_sequence Int64,
    requested_at_ms Int64,
    requested_at DateTime,
    result String,
    publisher_status Int32,
    attempts Int32,
    relayed_at_ms Int64,
    `topic` String,
    `partition` Int32,
    `offset` Int64,
    topic_id String
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(requested_at)
ORDER BY (stream, entity_key, `partition`, `offset`);

CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.replay_requests_positions TO {database}.sink_positions
AS SELECT 'replay_requests' AS table_name, `topic`, `partition`, topic_id, max(`offset`) AS max_offset
FROM {database}.replay_requests GROUP BY `topic`, `partition`, topic_id;
