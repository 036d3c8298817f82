package main

import (
	"os"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/testenv"
)

// TestMain lets the test binary be the driftguard contender too, as the
// command is: a run starts it again as a worker.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == workerCommand {
		os.Exit(runWorker(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// smokeJar is the Kafka Streams application as `mvn -q -B package` in
// benchmarks/kstreams leaves it, from this package's folder.
const smokeJar = "../kstreams/target/presence-kstreams.jar"

// TestSmoke is the smoke run on the test broker: every contender decides
// a small mix and passes its check. It judges no timing.
func TestSmoke(t *testing.T) {
	brokers := testenv.Kafka(t)
	if _, err := os.Stat(smokeJar); err != nil {
		testenv.Unavailable(t, "the Kafka Streams jar is not built (cd benchmarks/kstreams && mvn -q -B package): "+err.Error())
	}
	o := options{brokers: brokers[0], contenders: driftguardName + "," + ksALOSName + "," + ksEOSName,
		jar: smokeJar, java: "java", timeout: 3 * time.Minute}
	o.shrinkToSmoke()
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	res, err := run(testenv.Context(t, 5*time.Minute), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Markdown())
	if got := len(res.Rounds[0].Runs); got != 3 {
		t.Fatalf("%d runs, want one per contender", got)
	}
	for _, r := range res.Rounds[0].Runs {
		if !r.OK {
			t.Errorf("%s failed: %s", r.Contender, r.Failure)
		}
		if r.Check.Outcomes["applied"] != res.Expected["applied"] {
			t.Errorf("%s applied %d events, the rules %d", r.Contender, r.Check.Outcomes["applied"], res.Expected["applied"])
		}
	}
}
