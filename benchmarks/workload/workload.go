// Package workload makes the webhooks a benchmark run sends and the final
// state they must leave. Publishers reorder, redeliver and retry, send
// children before their parents or without them, skip versions and steps,
// and end in terminal states; Options has a knob for each. What each
// policy must leave is known from what was made (the model), not from the
// order the webhooks happen to arrive in: the highest sequence_number per
// user, each workflow's steps up to its first missing one or its terminal
// step, each conversation's distinct sends and furthest receipts, each
// order's children once its parent exists.
package workload

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
)

// Options are the knobs of a workload. Zero values mean the defaults
// noted on each.
type Options struct {
	// Mix weighs the streams: "presence=3,orders=1" sends three presence
	// webhooks for each order webhook. Default presence only.
	Mix map[string]int
	// Count is how many webhooks the main part of the run sends,
	// redeliveries and retries included (chat's members before it and
	// receipts after it come on top).
	Count int
	// Keys is how many entities of each stream are live at once: users,
	// open operations, conversations, open orders. Defaults in DefaultKeys.
	Keys map[string]int
	// Disorder is the permutation window: each webhook is sent up to this
	// many places away from where its publisher made it. 0 keeps the
	// order (concurrent connections still reorder a little).
	Disorder int
	// Duplicates is the share of webhooks sent again under the same event
	// id (a publisher's redelivery); Retries, the share sent again with
	// the same content under a new event id (a publisher that does not
	// keep its ids). Both come up to Disorder+1 places later.
	Duplicates float64
	Retries    float64
	// Orphans is the share of orders whose parent never comes: their
	// children wait, or expire, and are never applied. LateParents is the
	// share whose children come first, the parent ParentDelay places
	// after where it was made (default 20).
	Orphans     float64
	LateParents float64
	ParentDelay int
	// Gaps is, for presence, the share of sequence numbers skipped (the
	// latest policy counts them and applies the next); for workflow, the
	// share of operations with a step that never comes (gapless stops
	// before it).
	Gaps float64
	// Terminal is the share of workflows whose last step is terminal
	// (completed, failed or cancelled; default 0.8 when zero, -1 for
	// none); AfterTerminal, the share of those that send one more step,
	// which must be rejected.
	Terminal      float64
	AfterTerminal float64
	// Seed makes the run reproducible; it also names the run inside the
	// ids and keys, so that runs against one broker do not collide.
	Seed uint64
	// Now is the clock the bodies' timestamps come from. Default
	// time.Now.
	Now func() time.Time
}

// DefaultKeys are the entities live at once per stream.
var DefaultKeys = map[string]int{"presence": 1000, "workflow": 200, "chat": 50, "orders": 500}

// Item is one webhook to send.
type Item struct {
	Stream  string
	EventID string
	Key     string
	Type    string
	Body    []byte
}

// Plan is a run: what to send before the main part (acknowledged before
// it starts), the main part in the order to send it, what to send after
// it, and the state all of it must leave.
type Plan struct {
	Setup    []Item
	Main     []Item
	Final    []Item
	Expected model.State
}

// Parse reads a list of stream=N pairs ("presence=3,orders=1").
func Parse(list string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, n, ok := strings.Cut(part, "=")
		if !ok {
			n = "1"
		}
		var v int
		if _, err := fmt.Sscan(n, &v); err != nil || v < 0 {
			return nil, fmt.Errorf("%q: want stream=N with N a whole number", part)
		}
		if !slices.Contains(model.Streams, name) {
			return nil, fmt.Errorf("%q: unknown stream %q (want one of %s)", part, name, strings.Join(model.Streams, ", "))
		}
		out[name] = v
	}
	return out, nil
}

// generator makes one stream's webhooks in its publishers' order and
// keeps what they must leave.
type generator interface {
	// setup returns what must be in the log before anything else.
	setup() []Item
	// next returns the stream's next webhook as its publisher makes it,
	// and the place offset the webhook is to be sent at (a late parent's
	// delay), 0 for most.
	next() (Item, int)
	// retry returns it with a new event id (same content otherwise).
	retry(it Item) Item
	// final returns what must come after everything else.
	final() []Item
	// expect writes the stream's final state into st.
	expect(st *model.State)
}

// Generate makes the plan of o.
func Generate(o Options) (*Plan, error) {
	if o.Count < 0 {
		return nil, fmt.Errorf("count must not be negative, got %d", o.Count)
	}
	mix := o.Mix
	if len(mix) == 0 {
		mix = map[string]int{"presence": 1}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ParentDelay == 0 {
		o.ParentDelay = 20
	}
	if o.Terminal == 0 {
		o.Terminal = 0.8
	}
	for name, p := range map[string]float64{"duplicates": o.Duplicates, "retries": o.Retries, "orphans": o.Orphans,
		"late parents": o.LateParents, "gaps": o.Gaps, "after terminal": o.AfterTerminal} {
		if p < 0 || p > 1 {
			return nil, fmt.Errorf("%s must be a share between 0 and 1, got %v", name, p)
		}
	}
	if o.Orphans+o.LateParents > 1 {
		return nil, fmt.Errorf("orphans + late parents must be at most 1, got %v", o.Orphans+o.LateParents)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x62656e6368))
	run := fmt.Sprintf("r%06x", rng.Uint32()>>8)
	ids := &idSource{run: run}
	var names []string
	total := 0
	gens := map[string]generator{}
	for _, name := range model.Streams {
		w := mix[name]
		if w == 0 {
			continue
		}
		keys := o.Keys[name]
		if keys <= 0 {
			keys = DefaultKeys[name]
		}
		g := base{rng: rng, ids: ids, keys: keys, now: o.Now}
		switch name {
		case "presence":
			gens[name] = newPresence(g, o.Gaps)
		case "workflow":
			gens[name] = newWorkflow(g, o.Gaps, o.Terminal, o.AfterTerminal)
		case "chat":
			gens[name] = newChat(g)
		case "orders":
			gens[name] = newOrders(g, o.Orphans, o.LateParents, o.ParentDelay)
		}
		names = append(names, name)
		total += w
	}
	if total == 0 {
		return nil, fmt.Errorf("the mix sends nothing")
	}
	pick := func() string {
		n := rng.IntN(total)
		for _, name := range names {
			if n < mix[name] {
				return name
			}
			n -= mix[name]
		}
		panic("unreachable")
	}

	p := &Plan{}
	for _, name := range names {
		p.Setup = append(p.Setup, gens[name].setup()...)
	}
	var main []placed
	for pos := 0; len(main) < o.Count; pos++ {
		g := gens[pick()]
		it, delay := g.next()
		main = append(main, place(rng, it, pos+delay, o.Disorder))
		if len(main) < o.Count && rng.Float64() < o.Duplicates {
			main = append(main, place(rng, it, pos+1+rng.IntN(o.Disorder+1), o.Disorder))
		}
		if len(main) < o.Count && rng.Float64() < o.Retries {
			main = append(main, place(rng, g.retry(it), pos+1+rng.IntN(o.Disorder+1), o.Disorder))
		}
	}
	p.Main = ordered(main)
	var final []placed
	for _, name := range names {
		for _, it := range gens[name].final() {
			pos := len(final)
			final = append(final, place(rng, it, pos, o.Disorder))
			if rng.Float64() < o.Duplicates {
				final = append(final, place(rng, it, pos+1+rng.IntN(o.Disorder+1), o.Disorder))
			}
		}
	}
	p.Final = ordered(final)
	for _, name := range names {
		gens[name].expect(&p.Expected)
	}
	return p, nil
}

// placed is an item with the place it is sent at.
type placed struct {
	Item
	at float64
}

// place puts it at pos, moved up to window places on.
func place(rng *rand.Rand, it Item, pos, window int) placed {
	return placed{Item: it, at: float64(pos) + rng.Float64()*float64(window)}
}

func ordered(items []placed) []Item {
	slices.SortStableFunc(items, func(a, b placed) int { return cmp.Compare(a.at, b.at) })
	out := make([]Item, len(items))
	for i, it := range items {
		out[i] = it.Item
	}
	return out
}

// idSource numbers the ids of one run.
type idSource struct {
	run string
	n   int
}

func (s *idSource) id(prefix string) string {
	s.n++
	return fmt.Sprintf("%s-%s-%d", s.run, prefix, s.n)
}

func (s *idSource) key(prefix string, n int) string {
	return fmt.Sprintf("%s-%s%d", s.run, prefix, n)
}

// base is what every generator shares.
type base struct {
	rng  *rand.Rand
	ids  *idSource
	keys int
	now  func() time.Time
}

func (base) setup() []Item { return nil }
func (base) final() []Item { return nil }
