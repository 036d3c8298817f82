-- The decision id of each outcome record (docs/architecture.md#outcome):
-- the same on every repeat of a decision, so uniqExact(decision_id)
-- counts decisions exactly even where a processor crash wrote one twice.
-- Rows written before it are ''. 18.16 has no ADD COLUMN IF NOT EXISTS:
-- Migrate takes the column found on a rerun as this statement done.
-- ordering_minute's view names its columns, so it is unchanged.
ALTER TABLE {database}.events ADD COLUMN decision_id String
