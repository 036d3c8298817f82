// Package peertest finds the servers the peers' tests run against, and
// signs the webhooks they send. A server named in its environment variable
// (DRIFTGUARD_TEST_POSTGRES, DRIFTGUARD_TEST_REDIS: what
// benchmarks/scripts/{postgres,redis}.sh start print) is used as it is;
// otherwise the test binary starts its own through that script, on a free
// port with its state in a temp dir, and stops it when the tests end (Main).
// A server that can be neither found nor started skips the test, or fails
// it when DRIFTGUARD_TEST_REQUIRE=1, as internal/testenv does for Kafka and
// ClickHouse.
package peertest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/driftguard/driftguard/internal/procstat"
	"github.com/driftguard/driftguard/internal/testenv"
)

// Environment variables naming the servers, as the scripts print them.
const (
	EnvPostgres = "DRIFTGUARD_TEST_POSTGRES"
	EnvRedis    = "DRIFTGUARD_TEST_REDIS"
)

// server is one script's server, started at most once per test binary.
type server struct {
	script, env, portEnv string

	once  sync.Once
	value string // what the script printed for env
	pid   string // and for env_PID
	err   error
	state string // the script's state folder, for stop
	port  string // the server's port, as start was told
}

var (
	postgres = &server{script: "postgres.sh", env: EnvPostgres, portEnv: "POSTGRES_PORT"}
	redis    = &server{script: "redis.sh", env: EnvRedis, portEnv: "REDIS_PORT"}
)

// Postgres returns a PostgreSQL connection string.
func Postgres(t testing.TB) string { t.Helper(); return postgres.get(t) }

// Redis returns a Redis address, host:port.
func Redis(t testing.TB) string { t.Helper(); return redis.get(t) }

// PostgresPID is the PostgreSQL server's process id, 0 when unknown.
func PostgresPID(t testing.TB) int { t.Helper(); return postgres.serverPID(t) }

// RedisPID is the Redis server's process id, 0 when unknown.
func RedisPID(t testing.TB) int { t.Helper(); return redis.serverPID(t) }

func (s *server) serverPID(t testing.TB) int {
	t.Helper()
	v := os.Getenv(s.env + "_PID")
	if os.Getenv(s.env) == "" {
		s.get(t)
		v = s.pid
	}
	pid, _ := strconv.Atoi(v)
	return pid
}

// Main runs the tests, then stops the servers this binary started. Call it
// from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	for _, s := range []*server{postgres, redis} {
		if err := s.stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

func (s *server) get(t testing.TB) string {
	t.Helper()
	if v := os.Getenv(s.env); v != "" {
		return v
	}
	s.once.Do(s.start)
	if s.err != nil {
		testenv.Unavailable(t, fmt.Sprintf("%s not set, and %s start failed: %v", s.env, s.script, s.err))
	}
	return s.value
}

// scriptsDir is benchmarks/scripts, found from this file's place.
func scriptsDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts")
}

func (s *server) start() {
	state, err := os.MkdirTemp("", "driftguard-peertest-")
	if err != nil {
		s.err = err
		return
	}
	s.state = state
	port, err := freePort()
	if err != nil {
		s.err = err
		return
	}
	s.port = strconv.Itoa(port)
	out, err := s.run("start")
	if err != nil {
		s.err = err
		return
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, s.env+"="); ok {
			s.value = v
		}
		if v, ok := strings.CutPrefix(line, s.env+"_PID="); ok {
			s.pid = v
		}
	}
	if s.value == "" {
		s.err = fmt.Errorf("%s start printed no %s= line", s.script, s.env)
	}
}

func (s *server) stop() error {
	if s.state == "" {
		return nil
	}
	defer os.RemoveAll(s.state)
	if _, err := s.run("stop"); err != nil {
		return fmt.Errorf("%s stop: %w", s.script, err)
	}
	// The script signals only a process whose command line it recognises;
	// one it failed to recognise would outlive the tests.
	if pid, _ := strconv.Atoi(s.pid); procstat.Running(pid) {
		return fmt.Errorf("%s stop left the server (pid %d) running", s.script, pid)
	}
	return nil
}

// run runs the script with a command, its state in s.state and its port
// s.port, and returns what it printed; on failure the error carries its
// messages.
func (s *server) run(command string) (string, error) {
	cmd := exec.Command("bash", filepath.Join(scriptsDir(), s.script), command)
	cmd.Env = append(os.Environ(), "DRIFTGUARD_TEST_STATE="+s.state, s.portEnv+"="+s.port)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// freePort is a loopback port nothing listens on right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
