// Package procstat reads what a process has cost so far from /proc: CPU
// time (user + system, every thread) and peak resident memory, so that a
// benchmark can charge each process of a contender for a measured window.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// 100 on every Linux this runs on.
const clockTick = 10 * time.Millisecond

// stat is what this package reads of /proc/<pid>/stat.
type stat struct {
	state                byte
	ppid                 int
	self, reapedChildren time.Duration
	// system is the part of self spent in the kernel.
	system time.Duration
}

func readStat(pid int) (stat, error) {
	return readStatFile(fmt.Sprintf("/proc/%d/stat", pid))
}

// readStatFile reads a process's or a thread's stat file.
func readStatFile(path string) (stat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return stat{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count fields after its closing one.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, fmt.Errorf("%s: no command name", path)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state): ppid is field 4, utime, stime,
	// cutime and cstime fields 14 to 17.
	if len(fields) < 15 {
		return stat{}, fmt.Errorf("%s: %d fields", path, len(fields)+2)
	}
	var n [5]int64
	for i, f := range []int{1, 11, 12, 13, 14} {
		if n[i], err = strconv.ParseInt(fields[f], 10, 64); err != nil {
			return stat{}, fmt.Errorf("%s: field %d: %w", path, f+3, err)
		}
	}
	return stat{state: fields[0][0], ppid: int(n[0]), self: time.Duration(n[1]+n[2]) * clockTick,
		system: time.Duration(n[2]) * clockTick, reapedChildren: time.Duration(n[3]+n[4]) * clockTick}, nil
}

// CPU returns the user plus system time pid has used, its threads
// included (not its children).
func CPU(pid int) (time.Duration, error) {
	st, err := readStat(pid)
	return st.self, err
}

// ThreadCPU returns the user plus system time of pid's threads whose name
// (/proc/<pid>/task/<tid>/comm, at most 15 bytes) match accepts: a JVM
// names its compiler threads, so a benchmark can tell a broker's
// just-in-time compilation from its work.
func ThreadCPU(pid int, match func(name string) bool) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, t := range tasks {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, t.Name()))
		if err != nil || !match(strings.TrimSpace(string(comm))) {
			continue // a thread that ended since the listing is not counted
		}
		st, err := readStatFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err == nil {
			total += st.self
		}
	}
	return total, nil
}

// SystemCPU returns the part of CPU(pid) spent in the kernel (stime):
// for a server of many connections, mostly its sends and receives.
func SystemCPU(pid int) (time.Duration, error) {
	st, err := readStat(pid)
	return st.system, err
}

// TreeCPU returns the CPU time of pid and every process below it: those
// alive now, and those that exited and were reaped (their time is in
// their parent's cutime and cstime). A server made of processes, such as
// PostgreSQL's postmaster and its backends, is charged whole.
func TreeCPU(pid int) (time.Duration, error) {
	return readTable().treeCPU(pid)
}

// Descendants returns the processes below pid, alive now.
func Descendants(pid int) []int {
	return readTable().descendants(pid)
}

// table is every process's stat, read in one pass over /proc, and who
// is whose parent.
type table struct {
	stats    map[int]stat
	children map[int][]int
}

func readTable() table {
	t := table{stats: map[int]stat{}, children: map[int][]int{}}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return t
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(p); err == nil {
			t.stats[p] = st
			t.children[st.ppid] = append(t.children[st.ppid], p)
		}
	}
	return t
}

func (t table) descendants(pid int) []int {
	var out []int
	for queue := t.children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, t.children[queue[0]]...)
	}
	return out
}

func (t table) treeCPU(pid int) (time.Duration, error) {
	root, ok := t.stats[pid]
	if !ok {
		return 0, fmt.Errorf("/proc/%d/stat: no such process", pid)
	}
	total := root.self + root.reapedChildren
	for _, child := range t.descendants(pid) {
		st := t.stats[child]
		total += st.self + st.reapedChildren
	}
	return total, nil
}

// TreePeakRSS returns the sum of the peak resident sizes of pid and the
// processes below it alive now: an upper bound for a server made of
// processes, whose shared memory each of them counts.
func TreePeakRSS(pid int) (int64, error) {
	total, err := PeakRSS(pid)
	if err != nil {
		return 0, err
	}
	for _, child := range Descendants(pid) {
		if n, err := PeakRSS(child); err == nil {
			total += n
		}
	}
	return total, nil
}

// PeakRSS returns pid's peak resident set size (VmHWM), in bytes.
func PeakRSS(pid int) (int64, error) {
	_, peak, err := Memory(pid)
	return peak, err
}

// Memory returns pid's resident set size now and at its peak (VmRSS and
// VmHWM), in bytes, from one reading of /proc/<pid>/status.
func Memory(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		into, prefix := &rss, "VmRSS:"
		if strings.HasPrefix(line, "VmHWM:") {
			into, prefix = &peak, "VmHWM:"
		}
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("/proc/%d/status: %s %q", pid, prefix, rest)
			}
			*into = kb << 10
			found++
		}
	}
	if found < 2 {
		return 0, 0, fmt.Errorf("/proc/%d/status has no VmRSS or VmHWM", pid)
	}
	return rss, peak, nil
}

// Running reports whether process pid exists and has not ended: an exited
// child nobody has waited for is a zombie, which signal 0 cannot tell.
func Running(pid int) bool {
	st, err := readStat(pid)
	return err == nil && st.state != 'Z' && st.state != 'X'
}

// Sample is the CPU time of several processes at one instant.
type Sample map[string]time.Duration

// Take samples the CPU time of each named process and the processes
// below it (TreeCPU), from one reading of /proc; one that is gone is left
// out.
func Take(pids map[string]int) Sample {
	s := Sample{}
	t := readTable()
	for name, pid := range pids {
		if d, err := t.treeCPU(pid); err == nil {
			s[name] = d
		}
	}
	return s
}

// PerEvent returns each process's CPU µs per event between before and
// after, over n events.
func PerEvent(before, after Sample, n int) map[string]float64 {
	out := map[string]float64{}
	if n <= 0 {
		return out
	}
	for name, a := range after {
		if b, ok := before[name]; ok {
			out[name] = float64((a - b).Microseconds()) / float64(n)
		}
	}
	return out
}

// Load1 is the machine's one-minute load average, ok false where /proc has
// none: a benchmark's figures mean little on a machine busy with others.
func Load1() (load float64, ok bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	load, err = strconv.ParseFloat(f[0], 64)
	return load, err == nil
}
