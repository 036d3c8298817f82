package processors

import (
	"log/slog"
	"sync"
	"time"
)

// Recovery phases. After a crash, a restart or a handover, a Kafka session
// of the runtime goes through these before it decides again; each is
// logged once per session (per assignment for the group's), at info, with
// the time since the session began (since_session) and since the previous
// phase (took), so that where a recovery's time goes can be read from the
// logs. The phase attribute carries the name.
const (
	// PhaseFenced: the transactional producer id is loaded, which aborts
	// what a predecessor with the same transactional id left open.
	PhaseFenced = "fenced"
	// PhaseAssigned: the group (re)joined and assigned partitions.
	PhaseAssigned = "assigned"
	// PhaseStable: no transaction of a previous owner is pending on the
	// assigned partitions' offsets.
	PhaseStable = "stable"
	// PhaseRestored: the assigned partitions' tables are restored.
	PhaseRestored = "restored"
	// PhaseCommitted: the session's first transaction that wrote something
	// committed: readers see its decisions.
	PhaseCommitted = "committed"
)

// recoveryLog logs the recovery phases of one session at a time.
type recoveryLog struct {
	log    *slog.Logger
	stream string

	mu        sync.Mutex
	began     time.Time
	last      time.Time
	committed bool
	// warned is whether the session said why its stable offsets wait.
	warned bool
}

// begin starts a new session's phases.
func (l *recoveryLog) begin() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.began, l.last, l.committed, l.warned = time.Now(), time.Now(), false, false
}

// phase logs that the session reached phase, with args.
func (l *recoveryLog) phase(phase, msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.logLocked(phase, msg, args...)
}

func (l *recoveryLog) logLocked(phase, msg string, args ...any) {
	now := time.Now()
	l.log.Info(msg, append([]any{"stream", l.stream, "phase", phase,
		"since_session", now.Sub(l.began).Round(time.Millisecond).String(),
		"took", now.Sub(l.last).Round(time.Millisecond).String()}, args...)...)
	l.last = now
}

// commit logs PhaseCommitted at the session's first committed transaction
// that wrote anything: an empty transaction (one every commit interval
// while nothing arrives) says nothing about decisions reaching readers.
func (l *recoveryLog) commit(wrote bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !wrote || l.committed {
		return
	}
	l.committed = true
	l.logLocked(PhaseCommitted, "the session's first decisions committed")
}

// unstablePatience is how long the wait for stable offsets goes on before
// the session says why: the fencing or the commit that ends a previous
// owner's transaction takes milliseconds.
const unstablePatience = 2 * time.Second

// unstable says once per session, after unstablePatience, what the wait
// for stable offsets of partitions ps waits for: a previous owner's
// transaction that nothing fenced. An instance that comes back under its
// processing.instance_id fences its own when it starts; one that stalled,
// did not come back, or came back under another id (a container whose
// host name changes at every start) leaves it to the broker, which aborts
// it after the transaction timeout.
func (l *recoveryLog) unstable(ps []int32, waited time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if waited < unstablePatience || l.warned {
		return
	}
	l.warned = true
	l.log.Warn("the assigned partitions wait for a transaction of their previous owner to end: it stalled, or stopped and did not come back under its processing.instance_id; the broker aborts it at its transaction timeout",
		"stream", l.stream, "partitions", ps, "waited", waited.Round(time.Millisecond).String(), "transaction_timeout", transactionTimeout.String())
}

// joinPatience is how long a session waits for its first assignment before
// it says why: a rejoin takes milliseconds.
const joinPatience = 10 * time.Second

// awaitJoin says, if the group has assigned this session nothing (not
// even an empty assignment) joinPatience after it began, what the group
// waits for; stop ends the watch.
func (r *Runtime) awaitJoin() (stop func() bool) {
	return time.AfterFunc(joinPatience, func() {
		if !r.joined.Load() {
			r.h.opts.Logger.Warn("the group has not assigned this instance anything yet: it waits for every member to rejoin, or for a member that stopped without leaving (a crash) to come back under its processing.instance_id or to time out (the session timeout)",
				"stream", r.h.stream.Name, "waited", joinPatience.String(), "session_timeout", groupSessionTimeout.String())
		}
	}).Stop
}

// emptyTransaction reports whether the running transaction wrote nothing
// and moves no offset: the loop found nothing to decide in its commit
// interval (it is idle, or it just began and holds no partition yet).
//
// Such a transaction is ended as an abort. Kafka hears of neither end:
// franz-go sends no EndTxn for a transaction that produced nothing and no
// TxnOffsetCommit without offsets, and an abort moves the consumer back
// to the committed offsets, where it stands. But after a commit whose
// offsets it did not send, franz-go cannot tell whether the broker has
// stable offsets (KIP-447, Kafka 2.5) and holds the session 500 ms before
// the next transaction, for the markers of brokers without it: there are
// no markers to wait for. That pause delayed the first decisions after
// every start (its first transaction begins before the group assigns
// anything) and after every idle commit interval, by up to 500 ms.
func (r *Runtime) emptyTransaction() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.produced && len(r.receivedAt) == 0 && len(r.sess.Client().UncommittedOffsets()) == 0
}
