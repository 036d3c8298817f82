package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/driftguard/driftguard/benchmarks/checker"
	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/internal/config"
)

// peer is what a team would build instead of driftguard, as the seed
// scenarios did: an HTTP handler on a database (benchmarks/peers). It is
// a Go main with --listen, --secret and a flag naming its database, a
// `state` subcommand printing model.State, and a script that starts the
// database (benchmarks/scripts/<db>.sh) printing NAME=value lines.
type peer struct {
	name, stream string
	// pkg is the main package under benchmarks/, script the database's
	// and db its name there (and in the results).
	pkg, script, db string
	// dbFlag is the peer's flag naming the database, dbVar and pidVar the
	// script's lines with its address and its pid, portVar the
	// variable that sets its port.
	dbFlag, dbVar, pidVar, portVar string
}

var peers = []*peer{
	{name: "postgres presence", stream: "presence", pkg: "./peers/pgpresence", script: "benchmarks/scripts/postgres.sh", db: "postgres",
		dbFlag: "--dsn", dbVar: "DRIFTGUARD_TEST_POSTGRES", pidVar: "DRIFTGUARD_TEST_POSTGRES_PID", portVar: "POSTGRES_PORT"},
	{name: "redis orders", stream: "orders", pkg: "./peers/redisorders", script: "benchmarks/scripts/redis.sh", db: "redis",
		dbFlag: "--redis", dbVar: "DRIFTGUARD_TEST_REDIS", pidVar: "DRIFTGUARD_TEST_REDIS_PID", portVar: "REDIS_PORT"},
}

func (p *peer) Name() string   { return p.name }
func (p *peer) Stream() string { return p.stream }

// available reports whether this checkout has the peer.
func (p *peer) available(ws *Workspace) bool {
	_, err1 := os.Stat(filepath.Join(ws.Bench, p.pkg))
	_, err2 := os.Stat(filepath.Join(ws.Root, p.script))
	return err1 == nil && err2 == nil
}

func (p *peer) binName() string { return filepath.Base(p.pkg) }

type peerInstance struct {
	p      *peer
	ws     *Workspace
	db     *server
	serve  *proc
	url    string
	secret string
}

func (p *peer) Start(ctx context.Context, ws *Workspace) (Instance, error) {
	dir, err := ws.next(p.name)
	if err != nil {
		return nil, err
	}
	in := &peerInstance{p: p, ws: ws, secret: newSecret()}
	ok := false
	defer func() {
		if !ok {
			_ = in.Stop(context.WithoutCancel(ctx))
		}
	}()
	if in.db, err = ws.startServer(ctx, p.script, p.db, p.pidVar, p.portVar); err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	in.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	if in.serve, err = spawn("peer", ws.Bin[p.binName()], []string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		p.dbFlag, in.db.Vars[p.dbVar], "--secret", in.secret}, nil, filepath.Join(dir, "peer.log")); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, in.url+"/healthz", in.serve, time.Minute); err != nil {
		return nil, fmt.Errorf("%v (log in %s)", err, dir)
	}
	ok = true
	return in, nil
}

func (in *peerInstance) Target() Target {
	return Target{URL: in.url, Secret: in.secret, Scheme: config.SchemeStandardWebhooks}
}

func (in *peerInstance) Processes() map[string]int {
	out := map[string]int{}
	if in.serve != nil && !in.serve.exited() {
		out["peer"] = in.serve.pid()
	}
	if in.db != nil {
		out[in.p.db] = in.db.PID
	}
	return out
}

// Judge reads the state the peer reports and holds it to the model.
func (in *peerInstance) Judge(ctx context.Context, run *Run) (Judgement, error) {
	cmd := exec.CommandContext(ctx, in.ws.Bin[in.p.binName()], "state", in.p.dbFlag, in.db.Vars[in.p.dbVar])
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Judgement{}, fmt.Errorf("%s state: %v\n%s", in.p.binName(), err, stderr.String())
	}
	var got model.State
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		return Judgement{}, fmt.Errorf("%s state: %w", in.p.binName(), err)
	}
	_ = os.WriteFile(filepath.Join(run.Dir, "state.json"), stdout.Bytes(), 0o644)
	r := checker.CheckState(run.Sent, run.Expected, got, []string{in.p.stream})
	writeReport(run.Dir, r)
	return Judgement{Verdict: r.Verdict}, nil
}

func (in *peerInstance) Stop(ctx context.Context) error {
	in.serve.stop(30 * time.Second)
	in.db.stop(ctx)
	return nil
}

// writeReport keeps the checker's report beside the run's files.
func writeReport(dir string, r *checker.Report) {
	_ = model.WriteJSON(filepath.Join(dir, "check.json"), r)
}
