package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/driftguard/driftguard/internal/kafka"
)

// RebuildPlan is what a rebuild empties: the sink's consumer group, whose
// offsets are deleted so that the sink reads every topic from its log
// start, and the tables, with the rows they hold now.
type RebuildPlan struct {
	Group  string
	Tables []TableRows
}

// TableRows is a table and how many rows it holds.
type TableRows struct {
	Table string
	Rows  uint64
}

// rebuildTables are the tables a rebuild empties, in the order it
// empties them: sink_positions first, so that a rebuild interrupted half
// way can only leave rows doubled (read again while still held), never
// missing (skipped as held while gone); then every table the sink writes,
// read from tablesOf so that a table of a new kind of topic is emptied
// with the positions it is read by, and ordering_minute, which events'
// view fills.
func rebuildTables() []string {
	tables := []string{"sink_positions"}
	for _, kind := range slices.Sorted(maps.Keys(tablesOf)) {
		for _, table := range tablesOf[kind] {
			if !slices.Contains(tables, table) {
				tables = append(tables, table)
			}
		}
	}
	return append(tables, "ordering_minute")
}

// PlanRebuild says what Rebuild would empty, changing nothing.
func (s *Sink) PlanRebuild(ctx context.Context) (RebuildPlan, error) {
	plan := RebuildPlan{Group: s.cfg.Kafka.Naming().ConsumerGroup(s.cfg.ClickHouse.ConsumerGroup)}
	for _, table := range rebuildTables() {
		var n uint64
		if err := s.conn.QueryRow(ctx, "SELECT count() FROM "+s.cfg.ClickHouse.Database+"."+table).Scan(&n); err != nil {
			return plan, fmt.Errorf("counting the rows of %s: %w", table, err)
		}
		plan.Tables = append(plan.Tables, TableRows{table, n})
	}
	return plan, nil
}

// ErrSinksRunning is Rebuild's refusal while a sink consumes: it would go
// on skipping by positions the rebuild removes under it.
var ErrSinksRunning = errors.New("sinks are running")

// Rebuild empties ClickHouse for the sink to fill again from Kafka, from
// each topic's log start (its retention's start): it deletes the sink's
// consumer group, refusing while the group has members (every sink must
// be stopped first), then truncates the tables of rebuildTables. Run then
// refills them, exactly once per row as always. Interrupted, it can be run
// again; a sink must not start until it has returned.
//
// The group goes before the tables: a rebuild interrupted between the two
// leaves tables whose positions still match the group's offsets.
func (s *Sink) Rebuild(ctx context.Context) (RebuildPlan, error) {
	plan, err := s.PlanRebuild(ctx)
	if err != nil {
		return plan, err
	}
	if s.kcErr != nil {
		return plan, s.kcErr
	}
	cl, err := kafka.NewClient(s.kc)
	if err != nil {
		return plan, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	described, err := adm.DescribeGroups(ctx, plan.Group)
	if err != nil {
		return plan, fmt.Errorf("describing group %s: %w", plan.Group, s.kc.Explain(err))
	}
	if g, ok := described[plan.Group]; ok && len(g.Members) > 0 {
		return plan, fmt.Errorf("%w: group %s has %d members; stop every sink of this database, then rebuild", ErrSinksRunning, plan.Group, len(g.Members))
	}
	_, err = adm.DeleteGroup(ctx, plan.Group)
	switch {
	case errors.Is(err, kerr.GroupIDNotFound):
		// Never consumed, or deleted by a rebuild interrupted after.
	case errors.Is(err, kerr.NonEmptyGroup):
		return plan, fmt.Errorf("%w: a sink joined group %s while the rebuild started; stop it, then rebuild", ErrSinksRunning, plan.Group)
	case err != nil:
		return plan, fmt.Errorf("deleting group %s: %w", plan.Group, s.kc.Explain(err))
	}
	s.log.Warn("rebuild: consumer group deleted; the sink reads every topic from its log start", "group", plan.Group)
	for _, t := range plan.Tables {
		stmt := "TRUNCATE TABLE IF EXISTS " + s.cfg.ClickHouse.Database + "." + t.Table
		if c := s.cfg.ClickHouse.Cluster; c != "" {
			stmt += " ON CLUSTER " + c
		}
		if err := s.conn.Exec(ctx, stmt); err != nil {
			return plan, fmt.Errorf("rebuild: %s: %w (run the rebuild again)", stmt, err)
		}
		s.log.Warn("rebuild: table emptied", "table", t.Table, "rows", t.Rows)
	}
	return plan, nil
}
