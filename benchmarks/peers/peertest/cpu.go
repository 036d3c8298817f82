package peertest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux this runs on.
const clockTicks = 100

// TreeCPU is the CPU time process pid and its descendants have used, the
// reaped ones included: PostgreSQL serves each connection from a child of
// its postmaster. Zero when pid is 0 or gone. Benchmarks report it per
// webhook, which a shared machine's load moves far less than a rate.
func TreeCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	stats := map[int][]string{} // pid: the fields after the command
	children := map[int][]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range dirs {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// The command is in parentheses and may hold spaces.
		end := strings.LastIndexByte(string(data), ')')
		if end < 0 {
			continue
		}
		id, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(data[end+1:]))
		if len(fields) < 15 {
			continue
		}
		stats[id] = fields
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], id)
		}
	}
	var ticks int64
	var walk func(id int, self bool)
	walk = func(id int, self bool) {
		f, ok := stats[id]
		if !ok {
			return
		}
		// utime, stime; and for the root, cutime and cstime of the reaped.
		for i, field := range f[11:15] {
			if i < 2 || self {
				n, _ := strconv.ParseInt(field, 10, 64)
				ticks += n
			}
		}
		for _, c := range children[id] {
			walk(c, false)
		}
	}
	walk(pid, true)
	return time.Duration(ticks) * time.Second / clockTicks
}
