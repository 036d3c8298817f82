package main

import (
	"strings"
	"testing"
	"time"
)

func TestThreadDumpSummedByRole(t *testing.T) {
	dump := `2026-12-07 05:07:00
Full thread dump OpenJDK 64-Bit Server VM (17.0.15+6-Debian-1deb12u1 mixed mode, sharing):

"data-plane-kafka-request-handler-0" #85 daemon prio=5 os_prio=0 cpu=1200.50ms elapsed=196.30s tid=0x1 nid=0x1a waiting on condition  [0x0]
   java.lang.Thread.State: WAITING (parking)
"data-plane-kafka-request-handler-1" #86 daemon prio=5 os_prio=0 cpu=800.00ms elapsed=196.30s tid=0x2 nid=0x1b waiting on condition  [0x0]
"data-plane-kafka-network-thread-1-ListenerName(PLAINTEXT)-PLAINTEXT-0" #70 prio=5 os_prio=0 cpu=300.25ms elapsed=196.30s tid=0x3 nid=0x1c runnable  [0x0]
"C2 CompilerThread0" #14 daemon prio=9 os_prio=0 cpu=5000.00ms elapsed=196.30s tid=0x4 nid=0x1d waiting on condition  [0x0]
"GC Thread#0" os_prio=0 cpu=40.00ms elapsed=196.30s tid=0x5 nid=0x1e runnable
"a thread with "quotes"" #99 prio=5 os_prio=0 cpu=1.00ms elapsed=1s tid=0x6 nid=0x1f runnable
"no cpu here" #100 prio=5 os_prio=0 elapsed=1s tid=0x7 nid=0x20 runnable
`
	got := parseThreadDump([]byte(dump))
	want := map[string]time.Duration{
		"request handlers":   2000500 * time.Microsecond,
		"network":            300250 * time.Microsecond,
		"JIT compilation":    5 * time.Second,
		"garbage collection": 40 * time.Millisecond,
		brokerRoleOther:      time.Millisecond,
	}
	for role, d := range want {
		if got[role] != d {
			t.Errorf("%s: %v, want %v", role, got[role], d)
		}
	}
	if len(got) != len(want) {
		t.Errorf("roles %v, want %v", got, want)
	}
	per := perEventByRole(map[string]time.Duration{"network": time.Second}, map[string]time.Duration{"network": 3 * time.Second, "JIT compilation": time.Second}, 1000)
	if per["network"] != 2000 || per["JIT compilation"] != 1000 {
		t.Errorf("per event %v", per)
	}
	if perEventByRole(nil, got, 10) != nil {
		t.Error("a missing edge must give no figures")
	}
}

func TestJFRSamplesByRoleAndMethod(t *testing.T) {
	frame := func(class, method string) string {
		return `{"method": {"type": {"name": "` + class + `"}, "name": "` + method + `"}}`
	}
	sample := func(thread string, frames ...string) string {
		return `{"type": "jdk.ExecutionSample", "values": {"sampledThread": {"javaName": "` + thread + `"}, "stackTrace": {"frames": [` + strings.Join(frames, ",") + `]}}}`
	}
	handler := "data-plane-kafka-request-handler-0"
	printed := `{"recording": {"events": [` + strings.Join([]string{
		sample(handler, frame("java/util/zip/CRC32C", "update"), frame("org/apache/kafka/common/record/DefaultRecordBatch", "isValid"), frame("kafka/server/KafkaApis", "handle")),
		sample(handler, frame("java/util/zip/CRC32C", "update"), frame("org/apache/kafka/common/record/DefaultRecordBatch", "isValid")),
		sample(handler, frame("kafka/log/UnifiedLog", "append")),
		sample("kafka-scheduler-3", frame("kafka/log/LogManager", "cleanupLogs")),
	}, ",") + `]}}`
	out, err := summarizeJFR([]byte(printed), 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"4 execution samples",
		"     3  75.0%  request handlers",
		"     1  25.0%  log maintenance",
		"     2  66.7%  java/util/zip/CRC32C.update",
		"     2  66.7%  org/apache/kafka/common/record/DefaultRecordBatch.isValid",
		"     1  33.3%  kafka/log/UnifiedLog.append",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if _, err := summarizeJFR([]byte(`{"recording": {"events": []}}`), 10); err == nil {
		t.Error("a recording without samples must be an error")
	}
}
