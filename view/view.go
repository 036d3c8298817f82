// Package view reads driftguard's tables from any Go service with goka's
// own view, as released (github.com/lovoo/goka): the group table
// `<stream>-table`, which holds each key's whole entity, and
// `<stream>.state`, which holds each key's last public state record.
//
// A view of either topic needs three things besides the topic's name, and
// this package gives them: the topic's codec (TableCodec, StateCodec),
// Kafka's murmur2 placement of keys (Hasher: goka's default, FNV, would
// look a key up on the wrong partition), and a consumer that reads
// committed records only (Config: the processors write both topics in
// Kafka transactions, and an aborted write must never show). Options puts
// the last two into goka's view options:
//
//	v, err := goka.NewView(brokers, goka.Table("presence.state"), view.StateCodec{}, view.Options(nil)...)
//	if err != nil {
//		return err
//	}
//	go v.Run(ctx)
//	<-v.WaitRunning()
//	value, err := v.Get("alice") // a *view.State, nil for an unknown key
//
// The processors end each partition they wrote with a view mark, a
// tombstone of the empty key written outside any transaction, because
// goka's view recovers only once it receives the record at the
// partition's high watermark minus one, and after a transaction that
// offset is its commit marker, which no consumer receives. A mark deletes
// nothing (no entity has the empty key); a service that reads the topics
// with a consumer of its own passes them over with IsMark.
package view

import (
	"encoding/json"
	"fmt"
	"hash"
	"strings"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"

	"github.com/driftguard/driftguard/internal/partition"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/processors"
	"github.com/driftguard/driftguard/processors/decide"
)

// Entity is a value of `<stream>-table`: the stream's rules' whole state
// of one key (its public state, version, dedup memory, devices, buffer).
type Entity = decide.Entity

// State is a value of `<stream>.state`: a key's public state at a
// revision, as the ClickHouse sink and the realtime bridge read it.
type State = record.State

// TableCodec is the goka codec of `<stream>-table`: values are *Entity.
type TableCodec struct{}

// Encode writes an *Entity as the processors do. Only the processors
// write the table; this is for tests and tools.
func (TableCodec) Encode(value any) ([]byte, error) {
	e, ok := value.(*Entity)
	if !ok {
		return nil, fmt.Errorf("view: table codec: got %T, want *view.Entity", value)
	}
	return processors.EncodeTableValue(e)
}

// Decode reads a table value into an *Entity.
func (TableCodec) Decode(data []byte) (any, error) {
	return processors.DecodeTableValue(data)
}

// StateCodec is the goka codec of `<stream>.state`: values are *State.
type StateCodec struct{}

// Encode writes a *State as the processors do.
func (StateCodec) Encode(value any) ([]byte, error) {
	st, ok := value.(*State)
	if !ok {
		return nil, fmt.Errorf("view: state codec: got %T, want *view.State", value)
	}
	return record.AppendState(nil, st), nil
}

// Decode reads a state record into a *State that owns its memory.
func (StateCodec) Decode(data []byte) (any, error) {
	var st State
	state, err := record.DecodeState(data, &st)
	if err != nil {
		return nil, fmt.Errorf("view: state codec: %w", err)
	}
	// The decoder's strings share data, which goka's storage may reuse.
	st.Stream, st.Key = strings.Clone(st.Stream), strings.Clone(st.Key)
	if state != "" {
		st.State = json.RawMessage(state)
	}
	return &st, nil
}

// Hasher places keys on partitions as Kafka's default partitioner does
// (murmur2), which is where ingest and the processors put them; pass it
// to goka.WithViewHasher (Options does).
func Hasher() func() hash.Hash32 { return partition.GokaHasher() }

// Config is goka's default sarama configuration with what a view of
// driftguard's tables needs: read_committed, and a protocol version that
// Kafka 4 still speaks (goka pins 2.0.0, which it dropped).
func Config() *sarama.Config {
	c := goka.DefaultConfig()
	c.Version = sarama.V3_6_0_0
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	return c
}

// Options are the goka view options for a table of driftguard: Hasher,
// and a consumer and topic manager built from base (nil: Config()), which
// must read committed records (sarama.ReadCommitted) — set the network and
// security settings of your cluster on it. Storage is goka's default (on
// disk); add goka.WithViewStorageBuilder to change it.
func Options(base *sarama.Config) []goka.ViewOption {
	if base == nil {
		base = Config()
	}
	// goka's builders write the client id into the config they are given:
	// each gets a copy of its own.
	consumer, tm := *base, *base
	return []goka.ViewOption{
		goka.WithViewHasher(Hasher()),
		goka.WithViewConsumerSaramaBuilder(goka.SaramaConsumerBuilderWithConfig(&consumer)),
		goka.WithViewTopicManagerBuilder(goka.TopicManagerBuilderWithConfig(&tm, goka.NewTopicManagerConfig())),
	}
}

// IsPart reports whether a key of `<stream>-table` is a part of another
// key's value (a conversation's remembered sends, kept beside it so that
// a message does not rewrite them all) rather than an entity: TableCodec
// refuses to decode one as an Entity, and an Entity read from the view
// has no remembered sends.
func IsPart(key []byte) bool { return processors.IsTablePart(key) }

// IsMark reports whether a record of `<stream>-table` or `<stream>.state`
// with this key and value is a view mark, which holds no entity: a reader
// of those topics other than goka's view passes it over.
func IsMark(key, value []byte) bool { return record.IsViewMark(key, value) }
