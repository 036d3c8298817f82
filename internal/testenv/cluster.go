package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/procstat"
)

// Environment variables of the three-broker cluster the fault tests run
// on, printed by `scripts/kafka.sh cluster start` and exported by
// scripts/with-services.sh --cluster.
const (
	// EnvCluster is the cluster's bootstrap list, host:port,...
	EnvCluster = "DRIFTGUARD_TEST_CLUSTER"
	// EnvClusterPIDs is each node's process id, node ids 1, 2, 3 in order.
	EnvClusterPIDs = "DRIFTGUARD_TEST_CLUSTER_PIDS"
	// EnvClusterControl is the script that started the cluster, which
	// restarts a node (`cluster restart N`).
	EnvClusterControl = "DRIFTGUARD_TEST_CLUSTER_CONTROL"
	// EnvFaults set to "full" runs the fault tests at their full size (the
	// `faults` task); otherwise they run a smaller version that fits the
	// test task's time.
	EnvFaults = "DRIFTGUARD_FAULTS"
)

// FullFaults reports whether the fault tests run at their full size.
func FullFaults() bool { return os.Getenv(EnvFaults) == "full" }

// Cluster is the real three-broker Kafka cluster, whose nodes a fault test
// kills, restarts, stops and resumes.
type Cluster struct {
	Brokers []string
	control string
	mu      sync.Mutex
	pids    []int // by node id - 1
	stopped map[int32]bool
}

var (
	clusterOnce sync.Once
	cluster     *Cluster
	clusterErr  error
)

// KafkaCluster returns the real cluster, its nodes all running. It is shared
// by the tests of a package, which run one at a time; every test leaves it
// with all its nodes running (a node it killed restarted, a node it stopped
// resumed).
func KafkaCluster(t testing.TB) *Cluster {
	t.Helper()
	if os.Getenv(EnvCluster) == "" {
		missing(t, "the three-broker Apache Kafka cluster", EnvCluster)
	}
	clusterOnce.Do(func() { cluster, clusterErr = clusterFromEnv() })
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	t.Cleanup(func() { cluster.heal(t) })
	return cluster
}

func clusterFromEnv() (*Cluster, error) {
	c := &Cluster{Brokers: strings.Split(os.Getenv(EnvCluster), ","), control: os.Getenv(EnvClusterControl), stopped: map[int32]bool{}}
	if c.control == "" {
		return nil, fmt.Errorf("%s is not set: the fault tests restart nodes with it (scripts/with-services.sh --cluster sets it)", EnvClusterControl)
	}
	pids, err := parsePIDs(os.Getenv(EnvClusterPIDs))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvClusterPIDs, err)
	}
	if len(pids) != len(c.Brokers) {
		return nil, fmt.Errorf("%s names %d processes for %d brokers", EnvClusterPIDs, len(pids), len(c.Brokers))
	}
	c.pids = pids
	return c, nil
}

func parsePIDs(v string) ([]int, error) {
	var pids []int
	for _, f := range strings.Split(v, ",") {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", v, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// Nodes are the node ids, 1 to the number of brokers.
func (c *Cluster) Nodes() []int32 {
	nodes := make([]int32, len(c.Brokers))
	for i := range nodes {
		nodes[i] = int32(i + 1)
	}
	return nodes
}

// PID is the process id of node's running incarnation.
func (c *Cluster) PID(node int32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pids[node-1]
}

// Kill ends node with SIGKILL, as a crash would, and waits until its
// process is gone.
func (c *Cluster) Kill(t testing.TB, node int32) {
	t.Helper()
	pid := c.PID(node)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing node %d (pid %d): %v", node, pid, err)
	}
	// Not a child of the test: polled until it has exited.
	for procstat.Running(pid) {
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts node again on its data after Kill, and returns once it
// serves clients (it may still be catching up as a follower).
func (c *Cluster) Restart(t testing.TB, node int32) {
	t.Helper()
	if err := c.restart(node); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) restart(node int32) error {
	var stderr bytes.Buffer
	cmd := exec.Command(c.control, "cluster", "restart", strconv.Itoa(int(node)))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("restarting node %d: %v\n%s", node, err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), EnvClusterPIDs+"="); ok {
			pids, err := parsePIDs(v)
			if err != nil {
				return err
			}
			c.mu.Lock()
			c.pids = pids
			c.mu.Unlock()
			return nil
		}
	}
	return fmt.Errorf("restarting node %d printed no %s:\n%s", node, EnvClusterPIDs, out)
}

// Stop pauses node with SIGSTOP: it holds its connections and answers
// nothing, as a node in a long GC pause or on a stalled disk does.
func (c *Cluster) Stop(t testing.TB, node int32) { c.signal(t, node, syscall.SIGSTOP) }

// Resume wakes a node paused by Stop with SIGCONT.
func (c *Cluster) Resume(t testing.TB, node int32) { c.signal(t, node, syscall.SIGCONT) }

func (c *Cluster) signal(t testing.TB, node int32, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(c.PID(node), sig); err != nil {
		t.Fatalf("%v to node %d: %v", sig, node, err)
	}
	c.mu.Lock()
	c.stopped[node] = sig == syscall.SIGSTOP
	c.mu.Unlock()
}

// heal resumes every node a test left paused and restarts every node it
// left dead, so that the next test finds the whole cluster.
func (c *Cluster) heal(t testing.TB) {
	var errs []error
	for _, node := range c.Nodes() {
		pid := c.PID(node)
		c.mu.Lock()
		stopped := c.stopped[node]
		c.stopped[node] = false
		c.mu.Unlock()
		if stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		if !procstat.Running(pid) {
			errs = append(errs, c.restart(node))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("the cluster could not be made whole again: %v", err)
	}
}
