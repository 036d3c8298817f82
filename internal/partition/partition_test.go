package partition

import (
	"fmt"
	"testing"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"
)

// Vectors from Kafka's own UtilsTest.testMurmur2, as signed Java ints.
func TestMurmur2MatchesJavaClient(t *testing.T) {
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range cases {
		if got := int32(Murmur2([]byte(in))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

// franz-go's default key partitioner (what ingest uses), sarama with
// GokaHasher (what goka uses) and For must agree on every key.
func TestGokaAndFranzAgree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.SliceOf(rapid.Byte()).Draw(t, "key")
		n := rapid.Int32Range(1, 64).Draw(t, "partitions")
		franz := kgo.StickyKeyPartitioner(nil).ForTopic("t")
		fromFranz := int32(franz.Partition(&kgo.Record{Key: key}, int(n)))
		sp := sarama.NewCustomHashPartitioner(GokaHasher())("t")
		fromSarama, err := sp.Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}, n)
		if err != nil {
			t.Fatal(err)
		}
		if ours := For(key, n); ours != fromFranz || ours != fromSarama {
			t.Fatalf("key %q over %d partitions: For=%d franz-go=%d goka/sarama=%d", key, n, ours, fromFranz, fromSarama)
		}
	})
}

func ExampleFor() {
	fmt.Println(For([]byte("user-42"), 6))
	// Output: 4
}
