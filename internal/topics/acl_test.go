package topics_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/topics"
)

// What processors under --no-create see on a shared cluster, on the
// embedded broker with ACLs: an admin creates the topics under the prefix;
// a principal that may describe the prefixed topics but not read their
// configs passes the check (the configs unchecked, said, not refused); one
// that may not even describe them is refused, naming the topics and the ACL.
func TestEnsureWithoutCreateUnderPrefixACLs(t *testing.T) {
	const prefix = "team-a."
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableACLs(), kfake.EnableSASL(),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "processor", "processor", kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: prefix,
			Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: kmsg.ACLOperationDescribe, Allow: true}),
		kfake.User("PLAIN", "stranger", "stranger"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := newFixture(t, c.ListenAddrs())
	f.cfg.Kafka.TopicPrefix = prefix
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ensure := func(user string, create bool) ([]topics.Status, error) {
		t.Helper()
		cl, err := kafka.NewClient(kafka.Conn{Brokers: c.ListenAddrs()}, kgo.SASL(plain.Auth{User: user, Pass: user}.AsMechanism()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		return kafka.EnsureTopics(ctx, cl, f.cfg, create)
	}

	created, err := ensure("admin", true)
	if err != nil || len(created) != len(f.specs) {
		t.Fatalf("the admin's Ensure: %d statuses, %v", len(created), err)
	}
	for _, s := range created {
		if !strings.HasPrefix(s.Spec.Name, prefix) {
			t.Errorf("created %s, not under %s", s.Spec.Name, prefix)
		}
	}

	statuses, err := ensure("processor", false)
	if err != nil {
		t.Fatalf("configs it may not read stop the check: %v", err)
	}
	unchecked := topics.Unchecked(statuses)
	if !errors.Is(unchecked, topics.ErrUnchecked) || !strings.Contains(unchecked.Error(), "lacks DESCRIBE_CONFIGS") {
		t.Errorf("Unchecked = %v, want ErrUnchecked naming DESCRIBE_CONFIGS", unchecked)
	}
	for _, s := range statuses {
		if s.Unchecked == "" || len(s.Drift) > 0 || len(s.Weak) > 0 {
			t.Errorf("%s: unchecked %q, drift %q, weak %q; want only unchecked", s.Spec.Name, s.Unchecked, s.Drift, s.Weak)
		}
	}

	_, err = ensure("stranger", false)
	if !errors.Is(err, kerr.TopicAuthorizationFailed) || !strings.Contains(err.Error(), prefix+f.stream.Name+".in") || !strings.Contains(err.Error(), "lacks DESCRIBE") {
		t.Errorf("a principal that may not describe the topics: %v; want an authorization error naming the topics and DESCRIBE", err)
	}
}
