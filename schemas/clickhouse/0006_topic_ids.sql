-- Kafka topic ids with the rows and the positions. A topic deleted and
-- created again keeps its name but gets a new id, and its offsets start
-- again at 0: positions kept by name alone would claim every new record as
-- held, and the sink would skip them all without a word. So each row
-- carries the id of the topic it was read from (topic_id, or
-- source_topic_id where source_* name the record read), the position views
-- group by it, and the sink applies the positions of the id it reads
-- (sinks/clickhouse/sink.go, load). Rows written before this migration
-- have ''; the sink takes those positions as the current topic's the first
-- time it reads it, unless positions of another id exist.
--
-- 18.16 has no ADD COLUMN IF NOT EXISTS: Migrate takes a column found on a
-- rerun as its statement done. An ALTER applies its commands together, so
-- sink_positions' sorting key gains topic_id in the same statement that
-- adds it (ReplacingMergeTree would otherwise merge the positions of two
-- ids into one).
ALTER TABLE {database}.events ADD COLUMN topic_id String;

ALTER TABLE {database}.entity_state ADD COLUMN topic_id String;

ALTER TABLE {database}.dlq ADD COLUMN source_topic_id String;

ALTER TABLE {database}.orphans ADD COLUMN source_topic_id String;

ALTER TABLE {database}.sink_positions ADD COLUMN topic_id String, MODIFY ORDER BY (table_name, `topic`, `partition`, topic_id);

-- The views again, grouping by topic id. 18.16 cannot alter a view's
-- query, so each is dropped and created again: a block inserted between
-- the two (only by a sink still running the release before, since a sink
-- migrates before it consumes) writes no position, which can only make a
-- later restart insert its rows again (doubles, never a loss). Run again,
-- the pair ends the same.
DROP TABLE IF EXISTS {database}.events_positions;

CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.events_positions TO {database}.sink_positions
AS SELECT 'events' AS table_name, `topic`, `partition`, topic_id, max(`offset`) AS max_offset
FROM {database}.events GROUP BY `topic`, `partition`, topic_id;

DROP TABLE IF EXISTS {database}.entity_state_positions;

CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.entity_state_positions TO {database}.sink_positions
AS SELECT 'entity_state' AS table_name, `topic`, `partition`, topic_id, max(`offset`) AS max_offset
FROM {database}.entity_state GROUP BY `topic`, `partition`, topic_id;

DROP TABLE IF EXISTS {database}.dlq_positions;

CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.dlq_positions TO {database}.sink_positions
AS SELECT 'dlq' AS table_name, source_topic AS `topic`, source_partition AS `partition`, source_topic_id AS topic_id,
    max(source_offset) AS max_offset
FROM {database}.dlq GROUP BY source_topic, source_partition, source_topic_id;

DROP TABLE IF EXISTS {database}.orphans_positions;

CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.orphans_positions TO {database}.sink_positions
AS SELECT 'orphans' AS table_name, source_topic AS `topic`, source_partition AS `partition`, source_topic_id AS topic_id,
    max(source_offset) AS max_offset
FROM {database}.orphans GROUP BY source_topic, source_partition, source_topic_id
