-- How each stream behaved, per minute of decision time (processed_at), per
-- outcome and reason: one row per (stream, minute, outcome, reason) once
-- merged. Read it with sum() over the counters and the -Merge functions over
-- the states (docs/analyst-queries.md):
--   events        decisions (rows of events)
--   gaps          decisions that skipped versions (gap > 0), gap_sum their
--                 total, gap_max the largest (maxMerge)
--   buffer_depth_max  deepest gapless buffer or orphan quarantine (maxMerge)
--   lateness_ms   received_at_ms - occurred_at_ms, for rows that carry a
--                 source clock (quantilesMerge(0.5, 0.9, 0.99))
--   latency_ms    processed_at_ms - received_at_ms: ingest to decision
--
-- Portable to ClickHouse 18.16: SummingMergeTree sums the counters and
-- merges AggregateFunction columns as AggregatingMergeTree would
-- (SimpleAggregateFunction does not exist there). quantilesStateIf, not a
-- Nullable argument: its state type is the same on 18.16 and current
-- releases.
CREATE TABLE IF NOT EXISTS {database}.ordering_minute (
    stream String,
    minute DateTime,
    outcome String,
    reason String,
    events UInt64,
    gaps UInt64,
    gap_sum Int64,
    gap_max AggregateFunction(max, Int64),
    buffer_depth_max AggregateFunction(max, Int64),
    lateness_ms AggregateFunction(quantiles(0.5, 0.9, 0.99), Int64),
    latency_ms AggregateFunction(quantiles(0.5, 0.9, 0.99), Int64)
) ENGINE = SummingMergeTree()
PARTITION BY toYYYYMM(minute)
ORDER BY (stream, minute, outcome, reason);

-- Backfill: a database that already holds events gets them counted once.
-- Run before the view exists and with no sink writing (the sink migrates
-- before it consumes), the two never count a row twice. A group already
-- present is skipped, so an interrupted backfill resumes where it stopped:
-- each group is written whole or not at all.
INSERT INTO {database}.ordering_minute
SELECT
    stream,
    toStartOfMinute(processed_at) AS minute,
    outcome,
    reason,
    count() AS events,
    countIf(gap > 0) AS gaps,
    sum(gap) AS gap_sum,
    maxState(gap) AS gap_max,
    maxState(buffer_depth) AS buffer_depth_max,
    quantilesStateIf(0.5, 0.9, 0.99)(received_at_ms - occurred_at_ms, occurred_at_ms > 0) AS lateness_ms,
    quantilesState(0.5, 0.9, 0.99)(processed_at_ms - received_at_ms) AS latency_ms
FROM {database}.events
WHERE (stream, toStartOfMinute(processed_at), outcome, reason) NOT IN (
    SELECT stream, minute, outcome, reason FROM {database}.ordering_minute
)
GROUP BY stream, minute, outcome, reason;

-- Every block the sink inserts into events passes through the view once;
-- the sink writes each block once or not at all, so each row counts once.
CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.ordering_minute_mv
TO {database}.ordering_minute
AS SELECT
    stream,
    toStartOfMinute(processed_at) AS minute,
    outcome,
    reason,
    count() AS events,
    countIf(gap > 0) AS gaps,
    sum(gap) AS gap_sum,
    maxState(gap) AS gap_max,
    maxState(buffer_depth) AS buffer_depth_max,
    quantilesStateIf(0.5, 0.9, 0.99)(received_at_ms - occurred_at_ms, occurred_at_ms > 0) AS lateness_ms,
    quantilesState(0.5, 0.9, 0.99)(processed_at_ms - received_at_ms) AS latency_ms
FROM {database}.events
GROUP BY stream, minute, outcome, reason;
