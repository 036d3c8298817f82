package main

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
)

// `dev` reaches a ClickHouse of the user's own over TLS as a password user
// and migrates it; set up so but refused, it says why and runs without the
// sink rather than starting a private, open server in its place.
func TestDevUsesAnExternalClickHouseOverTLS(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClickHouse = testenv.ClickHouseSecure(t)
	cfg.ClickHouse.Database = testenv.UniqueName("dg_dev_tls")
	log := slog.New(slog.DiscardHandler)
	conn := openDroppedAtEnd(t, ctx, cfg.ClickHouse)

	wrong := *cfg
	wrong.ClickHouse.Password = "not-" + cfg.ClickHouse.Password
	sink, note, stop := startClickHouse(ctx, &wrong, nil, log, telemetry.NewOps())
	stop()
	if sink != nil || !strings.Contains(note, "clickhouse.password") || strings.Contains(note, "private") {
		t.Errorf("with a wrong password: sink %v, note %q; want none, naming clickhouse.password", sink != nil, note)
	}

	sink, note, stop = startClickHouse(ctx, cfg, nil, log, telemetry.NewOps())
	defer stop()
	if sink == nil || !strings.Contains(note, "ClickHouse at "+cfg.ClickHouse.Addr) {
		t.Fatalf("sink %v, note %q; want the sink on %s", sink != nil, note, cfg.ClickHouse.Addr)
	}
	var tables uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = 'events'", cfg.ClickHouse.Database).Scan(&tables); err != nil || tables != 1 {
		t.Errorf("events in %s: %d, %v; want migrated", cfg.ClickHouse.Database, tables, err)
	}
}
