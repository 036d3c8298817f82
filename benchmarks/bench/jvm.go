package main

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The broker's CPU split by what its threads do. Linux keeps only the
// first 15 bytes of a thread's name, which makes the broker's network and
// request-handler threads one "data-plane-kafk"; the JVM's own thread dump
// (`jcmd <pid> Thread.print`) names each thread in full with the CPU it has
// used, so the runner reads that at the window's edges.

// brokerRoles are the roles, in the order the results list them, each with
// the thread-name prefixes that do that work. A thread no prefix matches
// is "other".
var brokerRoles = []struct {
	role     string
	prefixes []string
}{
	{"request handlers", []string{"data-plane-kafka-request-handler"}},
	{"network", []string{"data-plane-kafka-network-thread", "data-plane-kafka-socket-acceptor"}},
	{"group and transaction coordinators", []string{"group-coordinator", "transaction-log-manager", "TxnMarkerSender", "executor-group-coordinator"}},
	{"log maintenance", []string{"kafka-scheduler", "kafka-log-cleaner"}},
	{"KRaft and metadata", []string{"kafka-1-raft", "kafka-1-metadata", "quorum-controller", "controller-1-", "broker-1-"}},
	{"JIT compilation", []string{"C1 CompilerThread", "C2 CompilerThread", "Sweeper thread"}},
	{"garbage collection", []string{"GC Thread", "G1 ", "VM Thread"}},
}

// brokerRoleOther is the role of threads no prefix names.
const brokerRoleOther = "other"

// brokerRole is the role of the broker thread called name.
func brokerRole(name string) string {
	for _, r := range brokerRoles {
		for _, p := range r.prefixes {
			if strings.HasPrefix(name, p) {
				return r.role
			}
		}
	}
	return brokerRoleOther
}

// jvmThreadCPU is the CPU each role's threads of the JVM pid have used
// so far, from its thread dump. Threads that ended since an earlier call
// are missing from both the dump and the sum: the roles' difference over a
// window then undercounts them, which the broker's steady threads do not.
func jvmThreadCPU(ctx context.Context, pid int) (map[string]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "jcmd", strconv.Itoa(pid), "Thread.print").Output()
	if err != nil {
		return nil, err
	}
	return parseThreadDump(out), nil
}

// parseThreadDump sums the cpu= of each thread line of a HotSpot thread
// dump (`"name" #12 daemon prio=5 os_prio=0 cpu=1.23ms elapsed=...`) by
// the thread's role.
func parseThreadDump(dump []byte) map[string]time.Duration {
	byRole := map[string]time.Duration{}
	sc := bufio.NewScanner(bytes.NewReader(dump))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, `"`), `" `)
		if !ok || !strings.HasPrefix(line, `"`) {
			continue
		}
		_, cpu, ok := strings.Cut(rest, " cpu=")
		if !ok {
			continue
		}
		ms, _, _ := strings.Cut(cpu, "ms")
		v, err := strconv.ParseFloat(ms, 64)
		if err != nil {
			continue
		}
		byRole[brokerRole(name)] += time.Duration(v * float64(time.Millisecond))
	}
	return byRole
}

// perEventByRole is each role's CPU µs per event over a window, from the
// sums at its edges; nil when either edge is missing.
func perEventByRole(before, after map[string]time.Duration, events int) map[string]float64 {
	if before == nil || after == nil || events <= 0 {
		return nil
	}
	out := map[string]float64{}
	for role, a := range after {
		out[role] = float64((a - before[role]).Microseconds()) / float64(events)
	}
	return out
}
