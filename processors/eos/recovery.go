package eos

import (
	"log/slog"
	"sync"
	"time"
)

// Recovery phases. After a crash, a restart or a handover, a Kafka session
// goes through these before it decides again; each is logged once per
// session (per assignment for the group's), at info, with the time since
// the session began (since_session) and since the previous phase (took),
// so that where a recovery's time goes can be read from the logs. The
// phase attribute carries the name.
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
	log   *slog.Logger
	group string
	// transactionTimeout is the processor's, named in the warning.
	transactionTimeout time.Duration

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
	l.log.Info(msg, append([]any{"group", l.group, "phase", phase,
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
// for stable offsets of partitions ids waits for: a previous owner's
// transaction that nothing fenced. An instance that comes back under its
// transactional id fences its own when it starts; one that stalled, did
// not come back, or came back under another id (a container whose host
// name changes at every start) leaves it to the broker, which aborts it
// after the transaction timeout.
func (l *recoveryLog) unstable(ids []int32, waited time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if waited < unstablePatience || l.warned {
		return
	}
	l.warned = true
	l.log.Warn("the assigned partitions wait for a transaction of their previous owner to end: it stalled, or stopped and did not come back under its transactional id; the broker aborts it at its transaction timeout",
		"group", l.group, "partitions", ids, "waited", waited.Round(time.Millisecond).String(), "transaction_timeout", l.transactionTimeout.String())
}

// joinPatience is how long a session waits for its first assignment before
// it says why: a rejoin takes milliseconds.
const joinPatience = 10 * time.Second

// awaitJoin says, if the group has assigned this session nothing (not
// even an empty assignment) joinPatience after it began, what the group
// waits for; stop ends the watch.
func (p *Processor) awaitJoin() (stop func() bool) {
	return time.AfterFunc(joinPatience, func() {
		if !p.joined.Load() {
			p.opts.Logger.Warn("the group has not assigned this instance anything yet: it waits for every member to rejoin, or for a member that stopped without leaving (a crash) to come back under its transactional id or to time out (the session timeout)",
				"group", p.group, "waited", joinPatience.String(), "session_timeout", p.opts.SessionTimeout.String())
		}
	}).Stop
}
