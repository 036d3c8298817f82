package procstat

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
)

func rusage(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// What /proc says this process spent agrees with getrusage, and its peak
// memory is at least what it holds.
func TestOwnProcess(t *testing.T) {
	pid := os.Getpid()
	// Filled before the first sample: under -race the fill alone costs
	// hundreds of milliseconds, which are not the spin's.
	held := make([]byte, 64<<20)
	for i := range held {
		held[i] = byte(i)
	}
	before := Take(map[string]int{"self": pid, "gone": 1 << 30})
	if _, ok := before["gone"]; ok {
		t.Fatal("a process that does not exist was sampled")
	}
	for start := rusage(t); rusage(t)-start < 300*time.Millisecond; {
	}
	after := Take(map[string]int{"self": pid})
	// 300 ms over 1000 events, give or take the clock ticks and the work
	// before and after the spin.
	if per := PerEvent(before, after, 1000); per["self"] < 250 || per["self"] > 400 {
		t.Errorf("CPU per event %v µs after spinning 300 ms of CPU for 1000 events", per["self"])
	}
	rss, err := PeakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	if rss < 64<<20 {
		t.Errorf("peak RSS %d bytes while holding 64 MiB", rss)
	}
	_ = held[len(held)-1]
}

// A child's CPU time counts in its parent's tree, while it runs and once
// it has exited and was reaped.
func TestTreeCountsChildren(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	before, err := TreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if d := Descendants(os.Getpid()); !slices.Contains(d, cmd.Process.Pid) {
		t.Errorf("the running child %d is not among the descendants %v", cmd.Process.Pid, d)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	after, err := TreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts in clock ticks, rusage in microseconds.
	if after-before < child-2*clockTick {
		t.Errorf("the tree grew by %v, its reaped child alone used %v", after-before, child)
	}
}

// The kernel's share agrees with getrusage's system time: a process that
// spends its time in syscalls shows it there, within the clock ticks.
func TestSystemCPU(t *testing.T) {
	pid := os.Getpid()
	sys := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Stime.Nano())
	}
	before, err := SystemCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	for start := sys(); sys()-start < 300*time.Millisecond; {
		_ = syscall.Getppid() // a syscall: the time is the kernel's
	}
	after, _ := SystemCPU(pid)
	total, _ := CPU(pid)
	if d := after - before; d < 250*time.Millisecond || d > 600*time.Millisecond || after > total {
		t.Errorf("system CPU grew %v after 300 ms in syscalls (total %v, system %v)", d, total, after)
	}
}

// A thread's CPU is counted under its name, and only its: a thread named
// here spins for 300 ms of its own CPU time.
func TestThreadCPU(t *testing.T) {
	pid := os.Getpid()
	spun := make(chan time.Duration)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine
		tid := syscall.Gettid()
		if err := os.WriteFile(fmt.Sprintf("/proc/self/task/%d/comm", tid), []byte("dg-spin"), 0o600); err != nil {
			t.Error(err)
			spun <- 0
			return
		}
		thread := func() time.Duration {
			st, err := readStatFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
			if err != nil {
				t.Error(err)
			}
			return st.self
		}
		for start := thread(); thread()-start < 300*time.Millisecond; {
		}
		n, err := ThreadCPU(pid, func(name string) bool { return name == "dg-spin" })
		if err != nil {
			t.Error(err)
		}
		spun <- n
	}()
	n := <-spun
	total, _ := CPU(pid)
	if n < 300*time.Millisecond || n > total {
		t.Errorf("the named thread's CPU is %v after 300 ms of spinning (process %v)", n, total)
	}
	if none, _ := ThreadCPU(pid, func(string) bool { return false }); none != 0 {
		t.Errorf("no thread matched, yet %v", none)
	}
}
