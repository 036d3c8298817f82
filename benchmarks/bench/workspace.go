package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Workspace is what every contender shares: the checkout, a folder of its
// own for binaries, data and logs, and the load's settings.
type Workspace struct {
	// Root is the driftguard checkout; Bench its benchmarks folder.
	Root, Bench string
	// Dir holds the binaries, servers' state, logs and runs.
	Dir string
	Log *slog.Logger
	// Bin are the built binaries by name.
	Bin map[string]string
	// n counts the folders next has made.
	n int
}

// next returns a fresh folder under Dir for one use.
func (ws *Workspace) next(what string) (string, error) {
	ws.n++
	d := filepath.Join(ws.Dir, fmt.Sprintf("%02d-%s", ws.n, strings.ReplaceAll(what, " ", "-")))
	return d, os.MkdirAll(d, 0o755)
}

// build builds the Go main pkg of the module in dir as name.
func (ws *Workspace) build(ctx context.Context, dir, pkg, name string) error {
	out := filepath.Join(ws.Dir, "bin", name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	ws.Bin[name] = out
	return nil
}

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// script runs one of the project's service scripts (scripts/kafka.sh
// start, ...) with env added, and returns the NAME=value lines it printed.
func (ws *Workspace) script(ctx context.Context, path, verb string, env map[string]string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, "bash", path, verb)
	cmd.Dir = ws.Root
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v\n%s", filepath.Base(path), verb, err, stderr.String())
	}
	out := map[string]string{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
			out[k] = v
		}
	}
	return out, nil
}

// proc is a process the runner started.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// spawn starts bin with args and env added, its output into log, in a
// process group of its own so that a terminal's ^C reaches the runner
// only, which stops it in order.
func spawn(name, bin string, args []string, env []string, log string) (*proc, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends TERM, then KILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitHTTP waits until url answers 200, or p exits, or d passes.
func waitHTTP(ctx context.Context, url string, p *proc, d time.Duration) error {
	deadline := time.Now().Add(d)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited before %s answered: %v", p.name, url, p.err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %s", url, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// errSkipped marks a contender that is not there to run (not built in
// this checkout).
var errSkipped = errors.New("skipped")
