package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// server is a database or broker one of the project's scripts started
// (scripts/kafka.sh, scripts/clickhouse.sh, benchmarks/scripts/*.sh), on
// ports of its own and with a state folder of its own, so that it never
// meets the shared test servers.
type server struct {
	ws     *Workspace
	script string
	env    map[string]string
	// Vars are the NAME=value lines start printed.
	Vars map[string]string
	PID  int
}

// startAttempts is how often a server's start is tried: on a shared
// machine a JVM now and then exits while it starts, or a free port is
// taken before the server binds it.
const startAttempts = 3

// startServer starts script with ports named by portVars, and finds its
// pid in pidVar (a NAME=value line) or the state folder's <name>.pid.
// A start that fails is tried again on other ports.
func (ws *Workspace) startServer(ctx context.Context, script, name, pidVar string, portVars ...string) (*server, error) {
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		var s *server
		if s, err = ws.startServerOnce(ctx, script, name, pidVar, portVars...); err == nil || ctx.Err() != nil {
			return s, err
		}
		ws.Log.Warn("a server did not start", "script", script, "attempt", attempt, "err", err)
	}
	return nil, err
}

func (ws *Workspace) startServerOnce(ctx context.Context, script, name, pidVar string, portVars ...string) (*server, error) {
	ports, err := freePorts(len(portVars))
	if err != nil {
		return nil, err
	}
	state, err := ws.next(name + "-state")
	if err != nil {
		return nil, err
	}
	s := &server{ws: ws, script: filepath.Join(ws.Root, script), env: map[string]string{"DRIFTGUARD_TEST_STATE": state}}
	for i, v := range portVars {
		s.env[v] = strconv.Itoa(ports[i])
	}
	if s.Vars, err = ws.script(ctx, s.script, "start", s.env); err != nil {
		// A start cut short may have left its server running: stop what
		// it recorded.
		s.stop(context.WithoutCancel(ctx))
		return nil, err
	}
	pid := s.Vars[pidVar]
	if pid == "" {
		b, _ := os.ReadFile(filepath.Join(state, name+".pid"))
		pid = strings.TrimSpace(string(b))
	}
	if s.PID, err = strconv.Atoi(pid); err != nil {
		s.stop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%s: no pid of the server it started (%q)", script, pid)
	}
	ws.Log.Info("started", "server", name, "pid", s.PID, "vars", s.Vars)
	return s, nil
}

func (s *server) stop(ctx context.Context) {
	if s == nil {
		return
	}
	if _, err := s.ws.script(ctx, s.script, "stop", s.env); err != nil {
		s.ws.Log.Warn("stopping a server", "script", s.script, "err", err)
	}
}

// startKafkaAndClickHouse starts both at once, as scripts/with-services.sh
// does.
func (ws *Workspace) startKafkaAndClickHouse(ctx context.Context) (kafka, ch *server, err error) {
	var wg sync.WaitGroup
	var kerr, cerr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		kafka, kerr = ws.startServer(ctx, "scripts/kafka.sh", "kafka", "DRIFTGUARD_TEST_KAFKA_PID", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT")
	}()
	go func() {
		defer wg.Done()
		ch, cerr = ws.startServer(ctx, "scripts/clickhouse.sh", "clickhouse", "", "CLICKHOUSE_PORT", "CLICKHOUSE_HTTP_PORT", "CLICKHOUSE_SECURE_PORT")
	}()
	wg.Wait()
	if kerr != nil || cerr != nil {
		kafka.stop(context.WithoutCancel(ctx))
		ch.stop(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("starting the servers: %w", errors.Join(kerr, cerr))
	}
	return kafka, ch, nil
}
