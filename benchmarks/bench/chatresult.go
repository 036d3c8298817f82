package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/internal/naming"
)

// chatResult is one load's figures.
type chatResult struct {
	Load chatLoad `json:"load"`
	// Messages were sent in the measured window; Deliveries is what the
	// members had to receive of them (messages × members).
	Messages   int `json:"messages"`
	Deliveries int `json:"deliveries"`
	// Missing deliveries never came (a member's last_seq never covered
	// the message); Doubled are states received again or out of order;
	// Backwards states whose last_seq went down; Wrong states whose last
	// message is not the message sent as their last_seq; Resets event:
	// reset; Errors followers' connections that failed.
	Missing, Doubled, Backwards, Wrong, Resets, Errors int
	// BeforeAck counts deliveries that came before the sender had its
	// answer (through the bridge, whose 201 waits for the decision);
	// they count as 0 ms.
	BeforeAck int `json:"before_ack"`
	// Latency is from the durable accept (ingest's 202, the send's 201)
	// to each member's SSE state covering the message, in ms.
	Latency model.Percentiles `json:"latency_ms"`
	// FromSend is from when the sender sent the message (its first
	// attempt) to each member's state covering it, in ms.
	FromSend model.Percentiles `json:"from_send_ms"`
	// Drained is whether every member held every message within the
	// wait after the window.
	Drained bool `json:"drained"`
	// WindowSeconds is from the measured window's start until its
	// messages were all delivered: the span CPUSeconds cover.
	WindowSeconds float64            `json:"window_seconds"`
	CPUSeconds    map[string]float64 `json:"cpu_seconds"`
	// PerMessage is CPU µs per measured message of each process;
	// BridgePerDelivery the bridge's CPU µs per delivery.
	PerMessage        map[string]float64 `json:"cpu_us_per_message"`
	BridgePerDelivery float64            `json:"bridge_cpu_us_per_delivery"`
	// BridgeSystemSeconds is the part of the bridge's CPU spent in the
	// kernel (its sends, and on loopback the receiving side's TCP work,
	// which runs in the sender's context); BridgeSystemPerDelivery per
	// delivery.
	BridgeSystemSeconds     float64 `json:"bridge_system_cpu_seconds"`
	BridgeSystemPerDelivery float64 `json:"bridge_system_cpu_us_per_delivery"`
	// BrokerJITSeconds is the part of the broker's CPU its JVM spent
	// compiling (its compiler and code cache sweeper threads): each load
	// runs on a fresh broker, whose JVM is still compiling its hot paths,
	// which a broker running for days no longer does. BrokerJITPerMessage
	// per message; the broker's work is the rest.
	BrokerJITSeconds    float64 `json:"broker_jit_cpu_seconds"`
	BrokerJITPerMessage float64 `json:"broker_jit_cpu_us_per_message"`
	// BridgeIdleCPU is the bridge's CPU seconds a second with every member
	// connected and nothing sent; BridgeAboveIdlePerDelivery the bridge's
	// CPU µs per delivery less that over the window: what deliveries add.
	BridgeIdleCPU              float64 `json:"bridge_idle_cpu_per_second"`
	BridgeAboveIdlePerDelivery float64 `json:"bridge_above_idle_cpu_us_per_delivery"`
	// TopicBytes is how much each chat topic's log grew over the window;
	// BytesPerMessage the same per measured message.
	TopicBytes      map[string]int64   `json:"topic_bytes"`
	BytesPerMessage map[string]float64 `json:"topic_bytes_per_message"`
	PeakRSS         map[string]int64   `json:"peak_rss"`
	Passed          bool               `json:"passed"`
	Verdict         string             `json:"verdict"`
}

// tally checks what every member received against what was sent and
// computes the figures.
func (r *chatRun) tally(res *chatResult) {
	l := r.load
	// The message sent as each sequence, from the acknowledgements.
	bySeq := make([]map[int64]string, l.Conversations)
	for c, acks := range r.acks {
		bySeq[c] = map[int64]string{}
		for k, a := range acks {
			if _, twice := bySeq[c][a.seq]; twice {
				res.Wrong++
			}
			bySeq[c][a.seq] = clientID(c, k+1)
			if r.measured[c][k] {
				res.Messages++
			}
		}
	}
	res.Deliveries = res.Messages * l.Members
	var latencies, fromSend []float64
	for _, f := range r.followers {
		res.Doubled += f.doubled
		res.Backwards += f.backwards
		res.Resets += f.resets
		if f.err != nil {
			res.Errors++
		}
		for last, id := range f.clientIDs {
			if bySeq[f.conv][last] != id {
				res.Wrong++
			}
		}
		for k, a := range r.acks[f.conv] {
			if !r.measured[f.conv][k] {
				continue
			}
			if a.seq >= int64(len(f.recv)) || f.recv[a.seq] == 0 {
				res.Missing++
				continue
			}
			fromSend = append(fromSend, float64(f.recv[a.seq]-a.sent.UnixNano())/float64(time.Millisecond))
			ms := float64(f.recv[a.seq]-a.at.UnixNano()) / float64(time.Millisecond)
			if ms < 0 {
				res.BeforeAck++
				ms = 0
			}
			latencies = append(latencies, ms)
		}
	}
	res.Latency = percentiles(latencies)
	res.FromSend = percentiles(fromSend)
	res.PerMessage = map[string]float64{}
	if res.Messages > 0 {
		for name, s := range res.CPUSeconds {
			res.PerMessage[name] = s * 1e6 / float64(res.Messages)
		}
		res.BridgePerDelivery = res.CPUSeconds["bridge"] * 1e6 / float64(res.Deliveries)
		res.BridgeSystemPerDelivery = res.BridgeSystemSeconds * 1e6 / float64(res.Deliveries)
		res.BrokerJITPerMessage = res.BrokerJITSeconds * 1e6 / float64(res.Messages)
		res.BridgeAboveIdlePerDelivery = (res.CPUSeconds["bridge"] - res.BridgeIdleCPU*res.WindowSeconds) * 1e6 / float64(res.Deliveries)
		res.BytesPerMessage = map[string]float64{}
		for t, n := range res.TopicBytes {
			res.BytesPerMessage[t] = float64(n) / float64(res.Messages)
		}
	}
	var faults []string
	for name, n := range map[string]int{"missing": res.Missing, "doubled": res.Doubled, "backwards": res.Backwards,
		"wrong": res.Wrong, "resets": res.Resets, "connection errors": res.Errors} {
		if n > 0 {
			faults = append(faults, fmt.Sprintf("%d %s", n, name))
		}
	}
	slices.Sort(faults)
	res.Passed = len(faults) == 0 && res.Drained && res.Messages > 0
	res.Verdict = "every message delivered to every member once and in order"
	if !res.Passed {
		res.Verdict = strings.Join(faults, ", ")
		if !res.Drained {
			res.Verdict += " (not every member had every message 2 minutes after the window)"
		}
	}
}

// chatResults is a results file of the chat benchmark.
type chatResults struct {
	Date     string        `json:"date"`
	Command  string        `json:"command"`
	Revision string        `json:"revision"`
	Machine  string        `json:"machine"`
	Loads    []*chatResult `json:"loads"`
	Idle     *idleResult   `json:"idle,omitempty"`
	Notes    []string      `json:"notes,omitempty"`
}

// write writes results as <dir>/<date>-chat.json and .md, and returns the
// Markdown's path.
func (res *chatResults) write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	base := filepath.Join(dir, res.Date+"-chat")
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".json", append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return base + ".md", os.WriteFile(base+".md", []byte(res.markdown()), 0o644)
}

func (res *chatResults) markdown() string {
	var b strings.Builder
	t := naming.Prefixes{}.For("chat")
	fmt.Fprintf(&b, "# Chat through the bridge, %s\n\n", res.Date)
	fmt.Fprintf(&b, "`%s` at %s on %s. Real broker; `driftguard ingest`, `process --streams chat` and `bridge` as separate processes; "+
		"each member follows its conversation with one SSE connection (`events?key=`) and a token of its own. "+
		"Latency is from the durable accept (ingest's 202, or the bridge's 201) to each member's SSE state covering the message. "+
		"CPU is over the window from its first message until every member held its last; the broker's is its JVM's; "+
		"`bench` is this tool: the senders and every member's connection.\n\n", res.Command, res.Revision, res.Machine)
	b.WriteString("| load | via | deliveries | verdict | p50 / p99 / max ms | CPU s: ingest, process, bridge, broker, bench (window s) | process µs/msg | bridge µs/delivery (kernel; above idle) | broker µs/msg (compiling) |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Loads {
		l := r.Load
		fmt.Fprintf(&b, "| %d × %d, %.0f msg/s, %.0f s | %s | %d | %s | %.0f / %.0f / %.0f | %.1f, %.1f, %.1f, %.1f, %.1f (%.0f) | %.0f | %.1f (%.1f; %.1f) | %.0f (%.0f) |\n",
			l.Conversations, l.Members, l.Rate, l.Seconds, l.Via, r.Deliveries, r.Verdict,
			r.Latency.P50, r.Latency.P99, r.Latency.Max,
			r.CPUSeconds["ingest"], r.CPUSeconds["process"], r.CPUSeconds["bridge"], r.CPUSeconds["broker"], r.CPUSeconds["bench"], r.WindowSeconds,
			r.PerMessage["process"], r.BridgePerDelivery, r.BridgeSystemPerDelivery, r.BridgeAboveIdlePerDelivery, r.PerMessage["broker"], r.BrokerJITPerMessage)
	}
	b.WriteString("\nFrom the send (its first attempt) to each member's state, and the deliveries that came before the sender had its answer (counted as 0 ms above):\n\n| load | via | p50 / p99 / max ms | before the answer |\n|---|---|---|---|\n")
	for _, r := range res.Loads {
		fmt.Fprintf(&b, "| %d × %d, %.0f msg/s | %s | %.0f / %.0f / %.0f | %d |\n", r.Load.Conversations, r.Load.Members, r.Load.Rate, r.Load.Via,
			r.FromSend.P50, r.FromSend.P99, r.FromSend.Max, r.BeforeAck)
	}
	b.WriteString("\nBytes per message of each topic's log growth over the window:\n\n| load | via | " + t.In + " | " + t.Table + " | " + t.State + " | " + t.Outcomes + " |\n|---|---|---|---|---|---|\n")
	for _, r := range res.Loads {
		fmt.Fprintf(&b, "| %d × %d, %.0f msg/s | %s | %.0f | %.0f | %.0f | %.0f |\n", r.Load.Conversations, r.Load.Members, r.Load.Rate, r.Load.Via,
			r.BytesPerMessage[t.In], r.BytesPerMessage[t.Table], r.BytesPerMessage[t.State], r.BytesPerMessage[t.Outcomes])
	}
	if res.Idle != nil {
		fmt.Fprintf(&b, "\nIdle connections: %d SSE connections held by the bridge: RSS %.1f MiB before, %.1f MiB after, **%.1f KiB per connection**.\n",
			res.Idle.Connections, float64(res.Idle.RSSBefore)/(1<<20), float64(res.Idle.RSSAfter)/(1<<20), res.Idle.BytesPerConnection/1024)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	return b.String()
}
