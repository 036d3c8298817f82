package eos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kgo"
)

// gokaContext is the goka.Context of one input record, or of one key's
// visit (rec nil), in the running transaction: what it reads comes from
// the table as of that transaction, and what it writes joins it.
type gokaContext struct {
	tx    *transaction
	part  *partition
	key   string
	topic string
	rec   *kgo.Record
	ctx   context.Context
}

var _ goka.Context = (*gokaContext)(nil)

// failure carries Fail's error out of a callback.
type failure struct{ err error }

// call runs callback cb with value, turning a Fail into its error.
func (c *gokaContext) call(cb goka.ProcessCallback, value any) (err error) {
	defer func() {
		if v := recover(); v != nil {
			f, ok := v.(failure)
			if !ok {
				panic(v)
			}
			err = f.err
		}
	}()
	cb(c, value)
	return nil
}

func (c *gokaContext) Topic() goka.Stream { return goka.Stream(c.topic) }
func (c *gokaContext) Key() string        { return c.key }
func (c *gokaContext) Partition() int32   { return c.part.id }
func (c *gokaContext) Group() goka.Group  { return goka.Group(c.tx.p.plan.group) }

// Offset is the input record's offset, -1 in a visit.
func (c *gokaContext) Offset() int64 {
	if c.rec == nil {
		return -1
	}
	return c.rec.Offset
}

// Value is the key's table value as of the running transaction, nil
// without one.
func (c *gokaContext) Value() any {
	c.needTable("Value")
	v, err := c.part.value(c.key)
	if err != nil {
		c.Fail(fmt.Errorf("reading the table value of %q: %w", c.key, err))
	}
	return v
}

// SetValue sets the key's table value in the running transaction; the
// transaction writes each key's last value once, when it ends.
func (c *gokaContext) SetValue(value any, _ ...goka.ContextOption) {
	c.needTable("SetValue")
	if value == nil {
		c.Fail(errors.New("SetValue of nil: use Delete"))
	}
	c.part.set(c.key, value)
}

// Delete deletes the key's table value in the running transaction.
func (c *gokaContext) Delete(_ ...goka.ContextOption) {
	c.needTable("Delete")
	c.part.set(c.key, nil)
}

func (c *gokaContext) needTable(op string) {
	if c.tx.p.plan.table == nil {
		c.Fail(fmt.Errorf("%s without a group table: the graph has no goka.Persist edge", op))
	}
}

// Headers are the input record's headers, nil in a visit.
func (c *gokaContext) Headers() goka.Headers {
	if c.rec == nil || len(c.rec.Headers) == 0 {
		return nil
	}
	h := make(goka.Headers, len(c.rec.Headers))
	for _, kv := range c.rec.Headers {
		h[kv.Key] = kv.Value
	}
	return h
}

// Timestamp is the input record's timestamp, zero in a visit.
func (c *gokaContext) Timestamp() time.Time {
	if c.rec == nil {
		return time.Time{}
	}
	return c.rec.Timestamp
}

// Join and Lookup read tables the runtime refuses at start; a callback
// that calls them fails.
func (c *gokaContext) Join(topic goka.Table) any {
	c.Fail(fmt.Errorf("Join(%s): %w", topic, ErrUnsupportedEdge))
	return nil
}

func (c *gokaContext) Lookup(topic goka.Table, _ string) any {
	c.Fail(fmt.Errorf("Lookup(%s): %w", topic, ErrUnsupportedEdge))
	return nil
}

// Emit writes value, encoded with the output edge's codec, to topic in the
// running transaction, placed by key as goka places it.
func (c *gokaContext) Emit(topic goka.Stream, key string, value any, opts ...goka.ContextOption) {
	codec, ok := c.tx.p.plan.outputs[string(topic)]
	if !ok {
		c.Fail(fmt.Errorf("emit to %s: not an output of the graph (goka.Output)", topic))
	}
	c.write(string(topic), codec, key, value, opts)
}

// Loopback writes value to the graph's loop topic for key, decided by the
// loop callback in a later transaction.
func (c *gokaContext) Loopback(key string, value any, opts ...goka.ContextOption) {
	if c.tx.p.plan.loop == nil {
		c.Fail(errors.New("loopback without a goka.Loop edge"))
	}
	c.write(c.tx.p.plan.loop.name, c.tx.p.plan.loop.codec, key, value, opts)
}

func (c *gokaContext) write(topic string, codec goka.Codec, key string, value any, opts []goka.ContextOption) {
	rec := &kgo.Record{Topic: topic, Key: []byte(key), Partition: -1}
	if value != nil {
		data, err := codec.Encode(value)
		if err != nil {
			c.Fail(fmt.Errorf("encoding a record for %s: %w", topic, err))
		}
		rec.Value = data
	}
	headers, err := emitHeaders(opts)
	if err != nil {
		c.Fail(err)
	}
	for k, v := range headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: v})
	}
	c.tx.produce(c.part, rec)
}

// Fail ends the callback, and the runtime's Run with err; the running
// transaction aborts.
func (c *gokaContext) Fail(err error) { panic(failure{err}) }

// Context is the context Run was given.
func (c *gokaContext) Context() context.Context { return c.ctx }

// DeferCommit holds the running transaction's commit until the returned
// function is called; called with an error, it aborts the transaction and
// ends Run with it.
func (c *gokaContext) DeferCommit() func(error) {
	return c.tx.deferCommit()
}

// deferred are the commits a transaction's callbacks deferred.
type deferred struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	first error
}

func (d *deferred) add() func(error) {
	d.wg.Add(1)
	var once sync.Once
	return func(err error) {
		once.Do(func() {
			if err != nil {
				d.mu.Lock()
				if d.first == nil {
					d.first = err
				}
				d.mu.Unlock()
			}
			d.wg.Done()
		})
	}
}

// wait waits until every deferred commit was released, or ctx ends, and
// returns the first error one was released with.
func (d *deferred) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("deferred commits not released: %w", ctx.Err())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.first
}
