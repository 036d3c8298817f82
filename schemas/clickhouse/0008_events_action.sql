-- The operator action that made a decision and who asked for it
-- (docs/operations.md#operator-actions), on the action's own row and on
-- every row it decided, as in <stream>.outcomes: `explain` reads them from
-- here as from the topic. Empty on every other decision, and on rows
-- written before this migration (an action's own row still has them in
-- its payload). An ALTER applies its commands together: a rerun that
-- finds action finds requested_by too, and counts as done.
ALTER TABLE {database}.events ADD COLUMN action String, ADD COLUMN requested_by String
