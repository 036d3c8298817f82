package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// chatStack is what the chat benchmark runs on: a broker of its own and
// `driftguard ingest`, `driftguard process --streams chat` and
// `driftguard bridge`, each a process of its own as a deployment runs
// them.
type chatStack struct {
	ws                      *Workspace
	dir                     string
	kafka                   *server
	brokers                 string
	ingest, process, bridge *proc
	// ingestURL and bridgeURL are where ingest takes webhooks and the
	// bridge serves its clients.
	ingestURL, bridgeURL string
	// secret signs the chat stream's webhooks; bridgeSecret the tokens.
	secret, bridgeSecret string
}

// startChatStack starts the broker, creates the topics and starts the
// three components, waiting until each is ready and the processor's
// consumer group has its partitions.
func (ws *Workspace) startChatStack(ctx context.Context) (*chatStack, error) {
	dir, err := ws.next("chat")
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	st := &chatStack{ws: ws, dir: dir, secret: newSecret(), bridgeSecret: hex.EncodeToString(key)}
	ok := false
	defer func() {
		if !ok {
			st.stop(context.WithoutCancel(ctx))
		}
	}()
	if st.kafka, err = ws.startServer(ctx, "scripts/kafka.sh", "kafka", "DRIFTGUARD_TEST_KAFKA_PID", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT"); err != nil {
		return nil, err
	}
	st.brokers = st.kafka.Vars["DRIFTGUARD_TEST_KAFKA"]
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	env := []string{
		"DRIFTGUARD_KAFKA_BROKERS=" + st.brokers,
		"DRIFTGUARD_DATA_DIR=" + filepath.Join(dir, "data"),
		"DRIFTGUARD_INSTANCE_ID=bench",
		"DRIFTGUARD_LOG_LEVEL=warn",
		"DRIFTGUARD_BRIDGE_SECRET=" + st.bridgeSecret,
		fmt.Sprintf("DRIFTGUARD_BRIDGE_ADDR=127.0.0.1:%d", ports[1]),
	}
	for _, s := range model.Streams {
		env = append(env, "DRIFTGUARD_SECRETS_"+strings.ToUpper(s)+"="+st.secret)
	}
	bin := ws.Bin["driftguard"]
	topics, err := spawn("topics", bin, []string{"topics"}, env, filepath.Join(dir, "topics.log"))
	if err != nil {
		return nil, err
	}
	<-topics.done
	if topics.err != nil {
		return nil, fmt.Errorf("driftguard topics: %v (see %s)", topics.err, filepath.Join(dir, "topics.log"))
	}
	st.ingestURL = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	st.bridgeURL = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	telemetry := func(i int) string { return fmt.Sprintf("DRIFTGUARD_TELEMETRY_ADDR=127.0.0.1:%d", ports[i]) }
	if st.ingest, err = spawn("ingest", bin, []string{"ingest"},
		append(slices.Clone(env), fmt.Sprintf("DRIFTGUARD_HTTP_ADDR=127.0.0.1:%d", ports[0]), telemetry(2)), filepath.Join(dir, "ingest.log")); err != nil {
		return nil, err
	}
	if st.process, err = spawn("process", bin, []string{"process", "--streams", "chat"},
		append(slices.Clone(env), telemetry(3)), filepath.Join(dir, "process.log")); err != nil {
		return nil, err
	}
	// Every member the bench plays comes from 127.0.0.1, where in
	// production they would be as many addresses: the bridge's limits per
	// source are lifted for them.
	bridgeConfig := filepath.Join(dir, "bridge.yaml")
	if err := os.WriteFile(bridgeConfig, []byte("bridge: {max_tcp_connections_per_source: 25000, source_rate: {rate: 1000000}}\n"), 0o600); err != nil {
		return nil, err
	}
	if st.bridge, err = spawn("bridge", bin, []string{"bridge", "--config", bridgeConfig},
		append(slices.Clone(env), telemetry(4)), filepath.Join(dir, "bridge.log")); err != nil {
		return nil, err
	}
	for _, w := range []struct {
		url string
		p   *proc
	}{{fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[2]), st.ingest},
		{fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[3]), st.process},
		{fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[4]), st.bridge}} {
		if err := waitHTTP(ctx, w.url, w.p, 2*time.Minute); err != nil {
			return nil, fmt.Errorf("%v (logs in %s)", err, dir)
		}
	}
	if err := waitGroupsAssigned(ctx, st.brokers, []string{naming.Prefixes{}.Group("chat")}, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("%v (logs in %s)", err, dir)
	}
	ok = true
	return st, nil
}

// processes are the stack's processes by role, for CPU and memory.
func (st *chatStack) processes() map[string]int {
	out := map[string]int{"broker": st.kafka.PID, "bench": os.Getpid()}
	for _, p := range []*proc{st.ingest, st.process, st.bridge} {
		if p != nil && !p.exited() {
			out[p.name] = p.pid()
		}
	}
	return out
}

// token is a token for user to read the chat stream.
func (st *chatStack) token(user string) (string, error) {
	return realtime.Sign([]byte(st.bridgeSecret), user, []string{"chat"}, time.Now().Add(24*time.Hour))
}

func (st *chatStack) stop(ctx context.Context) {
	for _, p := range []*proc{st.bridge, st.process, st.ingest} {
		p.stop(30 * time.Second)
	}
	st.kafka.stop(ctx)
}
