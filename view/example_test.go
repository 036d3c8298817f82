package view_test

import (
	"context"
	"fmt"

	"github.com/lovoo/goka"

	"github.com/driftguard/driftguard/view"
)

// The lines a service writes to read each user's presence as committed,
// from the compacted `presence.state`; `presence-table` with
// view.TableCodec gives each key's whole table value the same way. (It
// needs a broker, so it is compiled, not run; TestGokaViewReadsCommittedTables
// runs the same against the real broker.)
func Example() {
	ctx := context.Background()
	brokers := []string{"localhost:9092"}

	v, err := goka.NewView(brokers, goka.Table("presence.state"), view.StateCodec{}, view.Options(nil)...)
	if err != nil {
		panic(err)
	}
	go v.Run(ctx)
	<-v.WaitRunning()
	value, err := v.Get("alice")
	if st, ok := value.(*view.State); ok && err == nil {
		fmt.Printf("alice at revision %d: %s\n", st.Version, st.State)
	}
}

// StateCodec decodes a `<stream>.state` record into a *view.State.
func ExampleStateCodec() {
	data := []byte(`{"stream":"presence","key":"alice","version":843,"state":{"presence":"BUSY"},"updated_at_ms":1764583521337,"expires_at_ms":0}`)
	value, err := view.StateCodec{}.Decode(data)
	if err != nil {
		panic(err)
	}
	st := value.(*view.State)
	fmt.Println(st.Key, st.Version, string(st.State))
	// Output: alice 843 {"presence":"BUSY"}
}

// IsMark tells the processors' view marks from entities, for a service
// that reads the tables with a consumer of its own.
func ExampleIsMark() {
	fmt.Println(view.IsMark([]byte{}, nil), view.IsMark([]byte("alice"), nil))
	// Output: true false
}
