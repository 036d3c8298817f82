// Package chlocal starts a private clickhouse-server as a child process on
// loopback, with its data in a temp folder, so `driftguard dev` shows the
// whole pipeline on a machine where ClickHouse is installed but not running.
// The config templates are shared with scripts/clickhouse.sh, which starts
// the test server the same way.
package chlocal

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

//go:embed config.xml
var configTemplate string

//go:embed users.xml
var usersXML string

// Server is a running child clickhouse-server.
type Server struct {
	// Addr is the native protocol address.
	Addr string
	dir  string
	bin  string
	cmd  *exec.Cmd
	// exited is closed when the process has exited, with exitErr.
	exited  chan struct{}
	exitErr error
}

// ErrNotInstalled means no clickhouse-server binary was found.
var ErrNotInstalled = errors.New("clickhouse-server is not installed")

// Binary returns the path of clickhouse-server. Debian puts it in /usr/sbin,
// which is not on every user's PATH.
func Binary() (string, error) {
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"} {
		if info, err := os.Stat(p); err == nil && info.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// Start runs clickhouse-server on two free loopback ports and waits up to
// timeout for its native port to accept connections.
func Start(ctx context.Context, timeout time.Duration) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "driftguard-clickhouse.")
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"data", "tmp", "user_files", "format_schemas", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	tcpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := strings.NewReplacer("{{DIR}}", dir, "{{TCP_PORT}}", strconv.Itoa(tcpPort), "{{HTTP_PORT}}", strconv.Itoa(httpPort)).Replace(configTemplate)
	if err := os.WriteFile(filepath.Join(dir, "config.xml"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "users.xml"), []byte(usersXML), 0o644); err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(tcpPort)), dir: dir, bin: bin}
	if err := s.launch(ctx, timeout); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// launch runs the server on its folder and waits for its native port.
func (s *Server) launch(ctx context.Context, timeout time.Duration) error {
	logFile, err := os.OpenFile(filepath.Join(s.dir, "log", "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "--config-file="+filepath.Join(s.dir, "config.xml"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The child dies with us, even on SIGKILL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	go func() { s.exitErr = cmd.Wait(); logFile.Close(); close(exited) }()
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", s.Addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("clickhouse-server exited at start (%v); see %s", s.exitErr, filepath.Join(s.dir, "log"))
		case <-ctx.Done():
			s.Kill()
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("clickhouse-server did not listen on %s within %s", s.Addr, timeout)
		}
	}
}

// Kill stops the server at once (SIGKILL) and keeps its data, for tests of
// an outage; Restart brings it back on the same address and data.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Restart runs the server again after Kill.
func (s *Server) Restart(ctx context.Context, timeout time.Duration) error {
	return s.launch(ctx, timeout)
}

// Stop terminates the server and deletes its data.
func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		s.Kill()
	}
	os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
