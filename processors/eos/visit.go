package eos

import (
	"context"
	"fmt"
)

// visit is a visit asked for: every key of the partitions held, with meta.
type visit struct {
	name string
	meta any
	done chan error
}

// VisitAll calls the graph's visitor name for every key of the group
// table in the partitions this instance holds, with meta, in the next
// transaction; it returns once that transaction has ended (an aborted one
// is not repeated: a caller visits again).
func (p *Processor) VisitAll(ctx context.Context, name string, meta any) error {
	if _, ok := p.plan.visitors[name]; !ok {
		return fmt.Errorf("group graph %s has no visitor %q (goka.Visitor)", p.plan.group, name)
	}
	v := &visit{name: name, meta: meta, done: make(chan error, 1)}
	select {
	case p.visits <- v:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-v.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
