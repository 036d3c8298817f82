-- Where the sink stands: the highest source offset each table holds, per
-- source topic and partition. The sink reads it at startup (and after a
-- rebalance or a failed insert) instead of max(offset) over a whole table,
-- so the read touches a handful of rows however large the tables grow.
--
-- Materialized views fill it from the very INSERT that writes the rows, so
-- a position is never written without its rows: ClickHouse writes a block
-- to the table first and to its views after. What can still go wrong, and
-- in which direction:
--   * the server dies, or a view's insert fails, after the table's part is
--     written: the rows are in, the position lags them, and the sink sees
--     its INSERT fail. Before it retries, the sink looks the block's last
--     rows up in the table itself (by the table's ORDER BY, so the lookup
--     stays cheap) and skips what landed. Only a sink that dies too before
--     that retry would insert those rows again (doubles, never a loss):
--     the window is the time between the two writes of one INSERT on the
--     server.
--   * a block that spans two months is written as two parts of the table
--     (PARTITION BY month) before the view runs; a failure between them
--     leaves the first month's rows in and the block's last rows out, and
--     the retry doubles the first month's. Months change once a month.
--   * the client loses the connection after the server wrote the block: the
--     view ran too, so the sink, which reads the positions again after any
--     failed insert, finds the block landed and does not send it again.
-- ReplacingMergeTree(max_offset) collapses each key to its highest offset
-- as parts merge; the sink reads max(max_offset), so unmerged rows are
-- harmless.
CREATE TABLE IF NOT EXISTS {database}.sink_positions (
    table_name String,
    `topic` String,
    `partition` Int32,
    max_offset Int64
) ENGINE = ReplacingMergeTree(max_offset)
ORDER BY (table_name, `topic`, `partition`);

CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.events_positions TO {database}.sink_positions
AS SELECT 'events' AS table_name, `topic`, `partition`, max(`offset`) AS max_offset
FROM {database}.events GROUP BY `topic`, `partition`;

CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.entity_state_positions TO {database}.sink_positions
AS SELECT 'entity_state' AS table_name, `topic`, `partition`, max(`offset`) AS max_offset
FROM {database}.entity_state GROUP BY `topic`, `partition`;

CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.dlq_positions TO {database}.sink_positions
AS SELECT 'dlq' AS table_name, source_topic AS `topic`, source_partition AS `partition`, max(source_offset) AS max_offset
FROM {database}.dlq GROUP BY source_topic, source_partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.orphans_positions TO {database}.sink_positions
AS SELECT 'orphans' AS table_name, source_topic AS `topic`, source_partition AS `partition`, max(source_offset) AS max_offset
FROM {database}.orphans GROUP BY source_topic, source_partition;

-- Rows written before this migration: one pass over each table, once. The
-- views exist already, so a row inserted meanwhile is counted by a view or
-- by this pass (or both, which max() absorbs), never by neither. Running it
-- again after an interruption only adds equal positions.
INSERT INTO {database}.sink_positions (table_name, `topic`, `partition`, max_offset)
SELECT 'events', `topic`, `partition`, max(`offset`) FROM {database}.events GROUP BY `topic`, `partition`;

INSERT INTO {database}.sink_positions (table_name, `topic`, `partition`, max_offset)
SELECT 'entity_state', `topic`, `partition`, max(`offset`) FROM {database}.entity_state GROUP BY `topic`, `partition`;

INSERT INTO {database}.sink_positions (table_name, `topic`, `partition`, max_offset)
SELECT 'dlq', source_topic, source_partition, max(source_offset) FROM {database}.dlq GROUP BY source_topic, source_partition;

INSERT INTO {database}.sink_positions (table_name, `topic`, `partition`, max_offset)
SELECT 'orphans', source_topic, source_partition, max(source_offset) FROM {database}.orphans GROUP BY source_topic, source_partition;
