package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// A contender is a process that decides a warm-up stream, then, told so on
// its stdin, the measured one. Both contenders speak the same small
// protocol, so the benchmark drives and measures them alike: each prints
// "warmup NAME" and "measure NAME" on stdout as it starts on a stream,
// switches on the stdin line "measure", stops cleanly on "stop" (or at the
// end of stdin), and exits non-zero when it fails.
type contender struct {
	// Name is the contender's name in results: driftguard, kstreams-alos,
	// kstreams-eos.
	Name string
	// command builds the process that decides warmup, then measure, with
	// its local state under dir.
	command func(warmup, measure, dir string) *exec.Cmd
}

// Contender names.
const (
	driftguardName = "driftguard"
	ksALOSName     = "kstreams-alos"
	ksEOSName      = "kstreams-eos"
)

// driftguardContender runs driftguard's presence processor (the
// transactional runtime, through processors.Service as `driftguard
// process` runs it) in a child process: this binary again, as a worker.
func driftguardContender(o options) contender {
	return contender{Name: driftguardName, command: func(warmup, measure, dir string) *exec.Cmd {
		self, err := os.Executable()
		if err != nil {
			self = os.Args[0]
		}
		args := []string{workerCommand, "-brokers", o.brokers, "-warmup", warmup, "-measure", measure, "-data", dir}
		if o.commitInterval > 0 {
			args = append(args, "-commit-interval", o.commitInterval.String())
		}
		if o.pprof != "" {
			args = append(args, "-cpuprofile", filepath.Join(o.pprof, measure+".cpu.pprof"),
				"-blockprofile", filepath.Join(o.pprof, measure+".block.pprof"))
		}
		return exec.Command(self, args...)
	}}
}

// kstreamsContender runs the Kafka Streams application (benchmarks/kstreams)
// at guarantee, at_least_once or exactly_once_v2, as o says to start it.
func kstreamsContender(name, guarantee string, o options) contender {
	return contender{Name: name, command: func(warmup, measure, dir string) *exec.Cmd {
		args := append(strings.Fields(o.javaOpts), "-jar", o.jar,
			"--bootstrap-servers", o.brokers, "--guarantee", guarantee,
			"--state-dir", filepath.Join(dir, "kstreams"), "--warmup", warmup, "--measure", measure)
		if o.storeCaching {
			args = append(args, "--caching", "true")
		}
		for _, kv := range strings.Fields(o.streamsConfig) {
			args = append(args, "--config", kv)
		}
		return exec.Command(o.java, args...)
	}}
}

// child is a running contender.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// lines are what it prints on stdout; closed at its end.
	lines chan string
	// exited receives Wait's result once.
	exited chan error
	log    string
}

// start starts the contender's process with its stderr in log.
func start(c contender, warmup, measure, dir string) (*child, error) {
	cmd := c.command(warmup, measure, dir)
	logFile, err := os.Create(filepath.Join(dir, c.Name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logFile
	// Its own process group: a ^C of the benchmark reaches the benchmark,
	// which stops the contender the protocol's way.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", c.Name, err)
	}
	ch := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 16), exited: make(chan error, 1), log: logFile.Name()}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ch.lines <- sc.Text()
		}
		close(ch.lines)
		ch.exited <- cmd.Wait()
		logFile.Close()
	}()
	return ch, nil
}

func (ch *child) pid() int { return ch.cmd.Process.Pid }

// send writes one protocol line.
func (ch *child) send(line string) error {
	_, err := io.WriteString(ch.stdin, line+"\n")
	return err
}

// expect waits for the line want on the child's stdout.
func (ch *child) expect(want string, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-ch.lines:
			if !ok {
				return fmt.Errorf("exited before printing %q%s", want, ch.tail())
			}
			if line == want {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("did not print %q within %s%s", want, timeout, ch.tail())
		}
	}
}

// stop asks the child to stop and waits for it, killing it after timeout.
func (ch *child) stop(timeout time.Duration) error {
	_ = ch.send("stop")
	_ = ch.stdin.Close()
	select {
	case err := <-ch.exited:
		if err != nil {
			return fmt.Errorf("%w%s", err, ch.tail())
		}
		return nil
	case <-time.After(timeout):
		_ = ch.cmd.Process.Kill()
		<-ch.exited
		return fmt.Errorf("did not stop within %s; killed%s", timeout, ch.tail())
	}
}

// failed reports, without waiting, whether the child has already exited.
func (ch *child) failed() error {
	select {
	case err := <-ch.exited:
		ch.exited <- err
		if err == nil {
			err = errors.New("exited")
		}
		return fmt.Errorf("%w%s", err, ch.tail())
	default:
		return nil
	}
}

// tail is the end of the child's log, for an error message.
func (ch *child) tail() string {
	data, err := os.ReadFile(ch.log)
	if err != nil || len(data) == 0 {
		return ""
	}
	const keep = 2000
	if len(data) > keep {
		data = data[len(data)-keep:]
	}
	return "; its log ends:\n" + string(data)
}
