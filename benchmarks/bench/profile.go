package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Profiler is an Instance that profiles its processes for a while; the
// runner starts it as the measured window starts (--profile).
type Profiler interface {
	// Profile profiles for seconds and writes each process's profile
	// and a text summary of it into dir.
	Profile(ctx context.Context, seconds int, dir string) error
}

// Profile takes a Go CPU profile of each component from its operations
// port (telemetry.pprof) and a JFR recording of the broker, side by side,
// each with the top of its samples beside it as text: <process>.cpu.pprof
// and .top.txt, broker.jfr and broker.top.txt.
func (in *driftguardInstance) Profile(ctx context.Context, seconds int, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(in.metrics)+1)
	i := 0
	for process, metrics := range in.metrics {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			url := strings.TrimSuffix(metrics, "/metrics") + "/debug/pprof/profile?seconds=" + strconv.Itoa(seconds)
			errs[i] = goProfile(ctx, url, filepath.Join(dir, process))
		}(i)
		i++
	}
	if in.kafka != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = brokerProfile(ctx, in.kafka.PID, seconds, filepath.Join(dir, "broker"))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// goProfile saves the CPU profile url serves as base.cpu.pprof and the
// top of it (`go tool pprof -top`) as base.top.txt.
func goProfile(ctx context.Context, url, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("%s: %s %s", url, resp.Status, b)
	}
	profile := base + ".cpu.pprof"
	f, err := os.Create(profile)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=40", profile).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go tool pprof -top %s: %v\n%s", profile, err, top)
	}
	return os.WriteFile(base+".top.txt", top, 0o644)
}

// brokerProfile records the JVM pid with JFR's profiling settings for
// seconds into base.jfr, and writes the methods its execution samples were
// in, by thread role, into base.top.txt.
func brokerProfile(ctx context.Context, pid, seconds int, base string) error {
	recording := base + ".jfr"
	start := exec.CommandContext(ctx, "jcmd", strconv.Itoa(pid), "JFR.start", "name=bench", "settings=profile",
		fmt.Sprintf("duration=%ds", seconds), "filename="+recording)
	if out, err := start.CombinedOutput(); err != nil {
		return fmt.Errorf("jcmd JFR.start: %v\n%s", err, out)
	}
	// The JVM writes the file when the recording's duration ends.
	deadline := time.Now().Add(time.Duration(seconds)*time.Second + 30*time.Second)
	for {
		if fi, err := os.Stat(recording); err == nil && fi.Size() > 0 && time.Since(fi.ModTime()) > time.Second {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the broker wrote no JFR recording to %s", recording)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	out, err := exec.CommandContext(ctx, "jfr", "print", "--json", "--events", "jdk.ExecutionSample", recording).Output()
	if err != nil {
		return fmt.Errorf("jfr print %s: %v", recording, err)
	}
	summary, err := summarizeJFR(out, 40)
	if err != nil {
		return fmt.Errorf("%s: %w", recording, err)
	}
	return os.WriteFile(base+".top.txt", []byte(summary), 0o644)
}

// jfrSamples is the part of `jfr print --json` the summary reads.
type jfrSamples struct {
	Recording struct {
		Events []struct {
			Values struct {
				SampledThread struct {
					JavaName string `json:"javaName"`
				} `json:"sampledThread"`
				StackTrace struct {
					Frames []struct {
						Method struct {
							Type struct {
								Name string `json:"name"`
							} `json:"type"`
							Name string `json:"name"`
						} `json:"method"`
					} `json:"frames"`
				} `json:"stackTrace"`
			} `json:"values"`
		} `json:"events"`
	} `json:"recording"`
}

// summarizeJFR is the execution samples of a recording by thread role and,
// within each of the two roles that serve requests, by the method on top
// of the stack (self) and by the Kafka method nearest the top (the request
// code that led there), the n most sampled of each.
func summarizeJFR(printed []byte, n int) (string, error) {
	var rec jfrSamples
	if err := json.Unmarshal(printed, &rec); err != nil {
		return "", err
	}
	total := len(rec.Recording.Events)
	if total == 0 {
		return "", errors.New("no execution samples")
	}
	byRole := map[string]int{}
	self := map[string]map[string]int{}
	kafka := map[string]map[string]int{}
	for _, e := range rec.Recording.Events {
		role := brokerRole(e.Values.SampledThread.JavaName)
		byRole[role]++
		frames := e.Values.StackTrace.Frames
		if len(frames) == 0 {
			continue
		}
		name := func(i int) string { return frames[i].Method.Type.Name + "." + frames[i].Method.Name }
		if self[role] == nil {
			self[role], kafka[role] = map[string]int{}, map[string]int{}
		}
		self[role][name(0)]++
		for i := range frames {
			// JFR names classes by their binary names, kafka/server/KafkaApis.
			if t := frames[i].Method.Type.Name; strings.HasPrefix(t, "kafka/") || strings.HasPrefix(t, "org/apache/kafka/") {
				kafka[role][name(i)]++
				break
			}
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d execution samples (Java code running; JIT compilation, GC and time in the kernel are not sampled)\n\nby thread role:\n", total)
	writeCounts(&b, byRole, total, n)
	for _, role := range []string{"request handlers", "network"} {
		if byRole[role] == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s, by the method on top of the stack:\n", role)
		writeCounts(&b, self[role], byRole[role], n)
		fmt.Fprintf(&b, "\n%s, by the Kafka method nearest the top:\n", role)
		writeCounts(&b, kafka[role], byRole[role], n)
	}
	return b.String(), nil
}

// writeCounts writes the n largest counts, largest first, each with its
// share of total.
func writeCounts(b *bytes.Buffer, counts map[string]int, total, n int) {
	names := slices.SortedFunc(maps.Keys(counts), func(x, y string) int {
		return cmp.Or(cmp.Compare(counts[y], counts[x]), strings.Compare(x, y))
	})
	for _, name := range names[:min(n, len(names))] {
		fmt.Fprintf(b, "  %6d %5.1f%%  %s\n", counts[name], 100*float64(counts[name])/float64(total), name)
	}
}
