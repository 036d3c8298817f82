package decidetest

import (
	"encoding/json"
	"fmt"
	"slices"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// Assign draws a whole history of an assign stream s for conversation key,
// in the stream's own type and field names: two members join; they send
// messages, each redelivered and retried by its client under new event
// ids, in any order; they send receipts, some behind their cursor, some
// past the last message; then one member leaves and tries to send. The
// model: each message gets exactly one sequence, every report of it names
// that sequence and the message id the stream's format gives, the
// sequences are 1..n with no gap; a receipt moves its cursor only forward
// and never past n; a member who left sends nothing; and the conversation
// ends with the member who stayed, n as its last sequence, and each
// cursor at its highest receipt.
func Assign(t *rapid.T, s *config.Stream, key string) History {
	a := &s.Assign
	members := []string{key + "-alice", key + "-bob"}
	event := func(id, typ string, fields map[string]any) []byte {
		fields[s.EventID], fields[s.Type.Field], fields[s.Key] = id, typ, key
		return body(fields)
	}
	var all []Step
	for i, m := range members {
		all = append(all, Step{Body: event(fmt.Sprintf("%s-join%d", key, i), a.Members.Added[0], map[string]any{a.Members.User: m})})
	}
	n := rapid.IntRange(1, 30).Draw(t, "messages")
	clientOf := map[string]string{} // event id: client message id
	var sends [][]byte
	for i := range n {
		sender := rapid.SampledFrom(members).Draw(t, "sender")
		client := fmt.Sprintf("c%d", i)
		send := func(id string) []byte {
			clientOf[id] = client
			return event(id, rapid.SampledFrom(a.Send.Types).Draw(t, "send type"), map[string]any{
				a.Send.Sender: sender, a.Send.Device: sender + "-phone", a.Send.ClientMessageID: client})
		}
		original := send(fmt.Sprintf("%s-e%d", key, i))
		sends = append(sends, original)
		for r := range rapid.IntRange(0, 2).Draw(t, "retries") {
			sends = append(sends, send(fmt.Sprintf("%s-e%d-retry%d", key, i, r)))
		}
		if rapid.Bool().Draw(t, "redelivered") {
			sends = append(sends, original)
		}
	}
	for _, b := range rapid.Permutation(sends).Draw(t, "order") {
		all = append(all, Step{Body: b})
	}
	// Receipts, in the order they arrive, and what each must come to.
	type cursorKey struct{ member, cursor string }
	wantOf := map[string]Outcome{} // by event id: the receipts' and the leaving's outcomes
	cursors := map[cursorKey]int64{}
	if len(a.Receipts.Read)+len(a.Receipts.Delivered) > 0 {
		for i := range rapid.IntRange(0, 12).Draw(t, "receipts") {
			m := rapid.SampledFrom(members).Draw(t, "reader")
			cursor, types := "read", a.Receipts.Read
			if len(types) == 0 || len(a.Receipts.Delivered) > 0 && rapid.Bool().Draw(t, "delivered") {
				cursor, types = "delivered", a.Receipts.Delivered
			}
			seq := rapid.Int64Range(1, int64(n)+2).Draw(t, "receipt seq")
			id := fmt.Sprintf("%s-receipt%d", key, i)
			all = append(all, Step{Body: event(id, rapid.SampledFrom(types).Draw(t, "receipt type"), map[string]any{
				a.Receipts.User: m, a.Receipts.Sequence: seq})})
			k := cursorKey{m, cursor}
			switch {
			case seq > int64(n):
				wantOf[id] = Outcome{Outcome: record.Rejected, Reason: record.ReasonAheadOfConversation, Version: seq}
			case seq <= cursors[k]:
				wantOf[id] = Outcome{Outcome: record.Stale, Version: seq}
			default:
				wantOf[id] = Outcome{Outcome: record.Applied, Version: seq}
				cursors[k] = seq
			}
		}
	}
	stays, leaves := members[0], members[1]
	if len(a.Members.Removed) > 0 {
		leave, late := key+"-leave", key+"-late"
		all = append(all,
			Step{Body: event(leave, a.Members.Removed[0], map[string]any{a.Members.User: leaves})},
			Step{Body: event(late, a.Send.Types[0], map[string]any{a.Send.Sender: leaves, a.Send.Device: leaves + "-phone", a.Send.ClientMessageID: "after-leaving"})})
		wantOf[leave] = Outcome{Outcome: record.Applied, Version: int64(n)}
		wantOf[late] = Outcome{Outcome: record.Rejected, Reason: record.ReasonNotMember, Version: int64(n)}
		members = []string{stays}
	}
	h := History{Key: key, Steps: all}
	h.Check = func(t *rapid.T, outs []Outcome, last State) {
		seqOf := map[string]int64{}
		for _, o := range outs {
			if want, ok := wantOf[o.EventID]; ok {
				if o.Outcome != want.Outcome || o.Reason != want.Reason || o.Version != want.Version {
					t.Fatalf("%s: %s/%s at %d, the model says %s/%s at %d", o.EventID, o.Outcome, o.Reason, o.Version, want.Outcome, want.Reason, want.Version)
				}
				continue
			}
			client, isSend := clientOf[o.EventID]
			if !isSend {
				if o.Outcome != record.Applied {
					t.Fatalf("join %s: %s/%s", o.EventID, o.Outcome, o.Reason)
				}
				continue
			}
			if o.Outcome != record.Applied && o.Outcome != record.Duplicate {
				t.Fatalf("send %s: %s/%s", o.EventID, o.Outcome, o.Reason)
			}
			if prev, ok := seqOf[client]; ok && prev != o.Version {
				t.Fatalf("message %s got sequences %d and %d", client, prev, o.Version)
			}
			seqOf[client] = o.Version
			if want := a.MessageIDOf(key, o.Version); o.MessageID != want {
				t.Fatalf("send %s: message id %q, want %q", o.EventID, o.MessageID, want)
			}
		}
		seqs := make([]int64, 0, len(seqOf))
		for _, seq := range seqOf {
			seqs = append(seqs, seq)
		}
		slices.Sort(seqs)
		for i, seq := range seqs {
			if seq != int64(i+1) || len(seqs) != n {
				t.Fatalf("sequences %v are not 1..%d", seqs, n)
			}
		}
		var state struct {
			LastSeq int64                       `json:"last_seq"`
			Members []string                    `json:"members"`
			Cursors map[string]map[string]int64 `json:"cursors"`
		}
		if err := json.Unmarshal(last.JSON, &state); err != nil || state.LastSeq != int64(n) || !slices.Equal(state.Members, members) {
			t.Fatalf("final state %s (%v): want last_seq %d, members %v", last.JSON, err, n, members)
		}
		for k, seq := range cursors {
			if got := state.Cursors[k.member][k.cursor]; got != seq {
				t.Fatalf("final state %s: %s's %s cursor at %d, want %d", last.JSON, k.member, k.cursor, got, seq)
			}
		}
	}
	return h
}
