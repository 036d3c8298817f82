package eos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// transaction is one Kafka transaction of the processor: what it decides
// for CommitEvery, its table values, the visits asked for meanwhile, and
// the writes it produced.
type transaction struct {
	p   *Processor
	ctx context.Context
	// promise collects the transaction's writes: the first that fails
	// aborts the records still buffered, and the transaction.
	promise *kgo.FirstErrPromise
	defers  deferred
	// visits are the visits run in the transaction, told its end.
	visits []*visit
	// produced is whether the transaction wrote anything.
	produced bool
}

func (p *Processor) newTransaction(ctx context.Context) *transaction {
	return &transaction{p: p, ctx: ctx, promise: kgo.AbortingFirstErrPromise(p.sess.Client())}
}

// run gathers and decides for one transaction's time, writes the table
// values, and ends the transaction: committed with the offsets when all
// went well, aborted otherwise (its inputs are then decided again). It
// reports whether it committed, whether Run is stopping, and an error
// that ends the session (a lostSession) or Run.
func (tx *transaction) run() (committed, stopping bool, err error) {
	p := tx.p
	decideErr := tx.gather()
	stopping = tx.ctx.Err() != nil
	if decideErr == nil {
		decideErr = tx.writeTables()
	}
	if decideErr == nil {
		// A deferred commit is released by the callback's own goroutines.
		// A stopping processor still waits for them: its last transaction
		// commits what was decided.
		waitCtx, cancel := context.WithTimeout(context.WithoutCancel(tx.ctx), p.opts.TransactionTimeout)
		decideErr = tx.defers.wait(waitCtx)
		cancel()
	}
	fence, fenceErr := tx.fence()
	if fenceErr != nil {
		p.opts.Logger.Warn("a transaction is aborted: it cannot be fenced; its inputs are decided again", "group", p.group, "err", fenceErr)
	}
	committed, err = tx.end(decideErr == nil && fenceErr == nil, fence)
	for _, v := range tx.visits {
		v.done <- errors.Join(decideErr, err)
	}
	if err != nil {
		return committed, stopping, sessionLost(err)
	}
	return committed, stopping, decideErr
}

// gather decides what arrives for one transaction's time, and the visits
// asked for meanwhile.
func (tx *transaction) gather() error {
	p := tx.p
	deadline := time.Now().Add(p.opts.CommitEvery)
	for tx.ctx.Err() == nil && time.Now().Before(deadline) {
		pollCtx, cancel := context.WithDeadline(tx.ctx, deadline)
		fetches := p.sess.PollRecords(pollCtx, pollRecords)
		cancel()
		if fetches.IsClientClosed() {
			return errors.New("the Kafka client closed")
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				p.opts.Logger.Warn("fetch failed; retried", "group", p.group, "topic", topic, "partition", partition, "err", err)
			}
		})
		p.mu.Lock()
		err := p.failed
		if err == nil {
			err = tx.decideFetched(fetches)
		}
		p.mu.Unlock()
		if err != nil {
			return err
		}
		if err := tx.runVisits(); err != nil {
			return err
		}
	}
	return nil
}

// decideFetched calls the input callbacks for each fetched record, in log
// order per partition.
func (tx *transaction) decideFetched(fetches kgo.Fetches) error {
	p := tx.p
	var err error
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		part := p.parts[fp.Partition]
		in, ok := p.plan.inputs[fp.Topic]
		if !ok && p.plan.loop != nil && fp.Topic == p.plan.loop.name {
			in, ok = *p.plan.loop, true
		}
		for _, rec := range fp.Records {
			if err != nil {
				return
			}
			if part == nil || part.state != running || !ok {
				err = fmt.Errorf("group %s: a record of %s/%d, which this instance does not run", p.group, fp.Topic, fp.Partition)
				return
			}
			var value any
			if rec.Value != nil {
				if value, err = in.codec.Decode(rec.Value); err != nil {
					err = fmt.Errorf("group %s: decoding %s/%d@%d: %w", p.group, fp.Topic, fp.Partition, rec.Offset, err)
					return
				}
			}
			part.touched = true
			c := &gokaContext{tx: tx, part: part, key: string(rec.Key), topic: fp.Topic, rec: rec, ctx: p.ctx}
			err = c.call(in.cb, value)
		}
	})
	return err
}

// runVisits runs the visits asked for so far over every key of the
// partitions held whose offset the group knows: one just assigned waits
// for its offsets, and one whose revocation franz-go did not report (its
// session reports one revocation per transaction) is no longer in the
// group's offsets at all.
func (tx *transaction) runVisits() error {
	p := tx.p
	for {
		var v *visit
		select {
		case v = <-p.visits:
		default:
			return nil
		}
		tx.visits = append(tx.visits, v)
		p.mu.Lock()
		err := tx.visit(v)
		p.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

func (tx *transaction) visit(v *visit) error {
	p := tx.p
	cb := p.plan.visitors[v.name]
	positions := tx.positions()
	for _, id := range slices.Sorted(maps.Keys(p.parts)) {
		part := p.parts[id]
		if _, known := positions[id]; !known || part.state != running {
			continue
		}
		keys, err := part.keys()
		if err != nil {
			return err
		}
		part.touched = true
		for _, key := range keys {
			c := &gokaContext{tx: tx, part: part, key: key, topic: v.name, ctx: p.ctx}
			if err := c.call(cb, v.meta); err != nil {
				return err
			}
		}
	}
	return nil
}

// produce writes rec in the running transaction.
func (tx *transaction) produce(part *partition, rec *kgo.Record) {
	changelog := tx.p.plan.table != nil && rec.Topic == tx.p.plan.table.name
	tx.produced = true
	promise := tx.promise.Promise()
	tx.p.sess.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
		if err == nil && changelog {
			for end := part.changelogEnd.Load(); r.Offset+1 > end && !part.changelogEnd.CompareAndSwap(end, r.Offset+1); {
				end = part.changelogEnd.Load()
			}
		}
		promise(r, err)
	})
}

// deferCommit holds the transaction's commit until the returned function
// is called.
func (tx *transaction) deferCommit() func(error) { return tx.defers.add() }

// positions are the partitions this instance holds whose offset the group
// knows: committed, or decided in the running transaction.
func (tx *transaction) positions() map[int32]kgo.EpochOffset {
	cl := tx.p.sess.Client()
	positions := map[int32]kgo.EpochOffset{}
	topic := tx.p.topics[0]
	maps.Copy(positions, cl.CommittedOffsets()[topic])
	for id := range cl.UncommittedOffsets()[topic] {
		positions[id] = kgo.EpochOffset{Offset: -1} // the transaction commits it anyway
	}
	return positions
}

// writeTables writes each table value the transaction set to the
// changelog, once per key however many of its records set it, in the
// partition of the input it was decided for.
func (tx *transaction) writeTables() error {
	p := tx.p
	if p.plan.table == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, part := range p.parts {
		if err := part.encode(); err != nil {
			return fmt.Errorf("group %s: %w", p.group, err)
		}
		for k, data := range part.encoded {
			tx.produce(part, &kgo.Record{Topic: p.plan.table.name, Key: []byte(k), Value: data, Partition: part.id})
		}
	}
	return nil
}

// fence is what the transaction's offset commit must add so that the
// group coordinator checks this instance's generation even when the
// transaction consumed nothing (a visit): the committed offset of every
// partition it touched whose offset it does not move. A zombie's writes
// then abort with its commit. A partition touched with no offset known
// cannot be fenced: the transaction aborts.
func (tx *transaction) fence() (map[int32]kgo.EpochOffset, error) {
	p := tx.p
	p.mu.Lock()
	defer p.mu.Unlock()
	positions := tx.positions()
	fence := map[int32]kgo.EpochOffset{}
	for id, part := range p.parts {
		if !part.touched {
			continue
		}
		eo, known := positions[id]
		switch {
		case !known:
			return nil, fmt.Errorf("partition %d was decided but the group has no offset of it", id)
		case eo.Offset >= 0:
			fence[id] = eo
		}
	}
	return fence, nil
}

// withFence adds the fence's offsets to the transaction's offset commit.
func (tx *transaction) withFence(ctx context.Context, fence map[int32]kgo.EpochOffset) context.Context {
	if len(fence) == 0 {
		return ctx
	}
	topic := tx.p.topics[0]
	return kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		i := slices.IndexFunc(req.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) bool { return t.Topic == topic })
		if i < 0 {
			t := kmsg.NewTxnOffsetCommitRequestTopic()
			t.Topic = topic
			req.Topics = append(req.Topics, t)
			i = len(req.Topics) - 1
		}
		t := &req.Topics[i]
		for _, id := range slices.Sorted(maps.Keys(fence)) {
			if slices.ContainsFunc(t.Partitions, func(tp kmsg.TxnOffsetCommitRequestTopicPartition) bool { return tp.Partition == id }) {
				continue
			}
			tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			tp.Partition, tp.Offset, tp.LeaderEpoch = id, fence[id].Offset, fence[id].Epoch
			tp.Metadata = &req.MemberID
			t.Partitions = append(t.Partitions, tp)
		}
		return nil
	})
}

// end commits the transaction (or aborts it), with the fence's offsets,
// then moves its table values to the local storage or drops them; it
// reports whether the transaction committed.
func (tx *transaction) end(commit bool, fence map[int32]kgo.EpochOffset) (bool, error) {
	p := tx.p
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	// The writes linger until now: a commit sends them first, then learns
	// whether one failed (the promise waits for every write, lingering
	// included). An abort drops what is still buffered.
	if commit {
		if err := p.sess.Client().Flush(ctx); err != nil {
			p.opts.Logger.Warn("the transaction's writes could not be sent; aborted, its inputs are decided again", "group", p.group, "err", err)
			commit = false
		} else if err := tx.promise.Err(); err != nil {
			p.opts.Logger.Warn("a write of the transaction failed; aborted, its inputs are decided again", "group", p.group, "err", err)
			commit = false
		}
	}
	// An empty transaction ends as an abort, and counts as committed:
	// see empty.
	empty := commit && tx.empty()
	try := kgo.TryAbort
	if commit && !empty {
		ctx, try = tx.withFence(ctx, fence), kgo.TryCommit
	}
	committed, err := p.sess.End(ctx, try)
	committed = committed || empty && err == nil
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, part := range p.parts {
		if committed {
			if serr := part.apply(); serr != nil && err == nil {
				err = serr
			}
		}
		if part.touched && tx.produced && p.marks != nil {
			p.marks.owe(part.id) // committed or aborted, its marker ends the partition
		}
		part.reset()
	}
	if p.opts.OnEnd != nil {
		p.opts.OnEnd(committed, time.Now())
	}
	if err != nil {
		return false, fmt.Errorf("group %s: ending a transaction: %w", p.group, err)
	}
	if commit && !committed {
		p.opts.Logger.Info("transaction aborted by a rebalance; its inputs are decided again", "group", p.group)
	}
	if committed {
		p.recovery.commit(tx.produced)
	}
	return committed, nil
}

// empty reports whether the transaction wrote nothing and moves no offset:
// the loop found nothing to decide in its commit interval (it is idle, or
// it just began and holds no partition yet).
//
// Such a transaction is ended as an abort. Kafka hears of neither end:
// franz-go sends no EndTxn for a transaction that produced nothing and no
// TxnOffsetCommit without offsets, and an abort moves the consumer back to
// the committed offsets, where it stands. But after a commit whose offsets
// it did not send, franz-go cannot tell whether the broker has stable
// offsets (KIP-447, Kafka 2.5) and holds the session 500 ms before the
// next transaction, for the markers of brokers without it: there are no
// markers to wait for. That pause delayed the first decisions after every
// start (its first transaction begins before the group assigns anything)
// and after every idle commit interval, by up to 500 ms.
func (tx *transaction) empty() bool {
	return !tx.produced && len(tx.p.sess.Client().UncommittedOffsets()) == 0
}
