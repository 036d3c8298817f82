package processors

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors/decide"
)

// A table value stays within config.TableValueBudget whatever a valid
// configuration allows and whatever arrives: the largest bodies, as many
// events as the buffers take, strings that escape to six bytes a byte, a
// full dedup memory, and a drain that applies what was held. Overflow is
// rejected (buffer_full), never stored.
func TestTableValueStaysWithinItsBudget(t *testing.T) {
	for _, stream := range []string{"workflow", "orders"} {
		t.Run(stream, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				s := testenv.Shipped(t, stream)
				// Limits as validation allows them (internal/config).
				s.Limits.MaxBodyBytes = int64(rapid.IntRange(64, 256<<10).Draw(rt, "max_body_bytes"))
				maxHeld := config.TableValueBudget - int(s.Limits.MaxBodyBytes) - config.DedupBudgetBytes
				s.Limits.BufferBytes = rapid.IntRange(1, min(768<<10, maxHeld)).Draw(rt, "buffer_bytes")
				held := rapid.IntRange(1, 100000).Draw(rt, "buffer")
				s.Limits.Buffer, s.Parent.Buffer = held, held
				s.Limits.DedupIDs = rapid.IntRange(1, config.DedupBudgetBytes/config.DedupIDBytes).Draw(rt, "dedup_ids")
				rules := decide.For(s)
				value := &tableValue{}
				n := 0
				event := func(typ string, version int64, bodyBytes int) decide.Event {
					n++
					// Quotes and control characters escape to up to six bytes
					// a byte in the strings; '<' and '&' in the body must not.
					id := fmt.Sprintf("%d-%s", n, strings.Repeat("\"\x01", rapid.IntRange(0, 127).Draw(rt, "id padding")))
					body := fmt.Appendf(nil, `{"x":%q}`, strings.Repeat("<&", max(0, bodyBytes-8)/2))
					return decide.Event{Fields: envelope.Fields{Key: "k", EventID: id, Type: typ, Version: version, HasVersion: true},
						Body: body, ReceivedAtMs: int64(n)}
				}
				check := func(when string) {
					data, err := entityCodec{}.Encode(value)
					if err != nil {
						rt.Fatal(err)
					}
					if len(data) > config.TableValueBudget {
						rt.Fatalf("%s: a table value of %d bytes, over its budget of %d", when, len(data), config.TableValueBudget)
					}
				}
				bodySize := func() int { return rapid.IntRange(8, int(s.Limits.MaxBodyBytes)).Draw(rt, "body bytes") }
				child, parent := "", ""
				if stream == "orders" {
					child, parent = s.Parent.Children[0], s.Parent.Types[0]
				}
				// What a key can hold: events ahead of a gap, or children
				// before their parent, until the buffer refuses them.
				first := int64(1)
				if stream == "workflow" {
					rules.Decide(&value.Entity, event("workflow.progress", 1, bodySize()))
					first = 3 // 2 is missing
				}
				for i, refused := 0, 0; refused < 3 && i < 2000; i++ {
					typ := "workflow.progress"
					if child != "" {
						typ = child
					}
					effects := rules.Decide(&value.Entity, event(typ, first+int64(i), bodySize()))
					if effects.Decisions[0].Reason != "" {
						refused++
					}
				}
				check("holding")
				// The drain: the missing step, or the parent.
				if stream == "workflow" {
					rules.Decide(&value.Entity, event("workflow.progress", 2, bodySize()))
				} else {
					rules.Decide(&value.Entity, event(parent, 1, bodySize()))
				}
				check("drained")
			})
		})
	}
}

// A conversation stays within its share of the table value however many
// members join, readers report and sends arrive, with the longest strings:
// members and new readers past it are refused (conversation_full), and
// remembered sends give way, oldest first, counted as early evictions.
func TestConversationStaysWithinItsBudget(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := testenv.Shipped(t, "chat")
		s.Limits.MaxBodyBytes = int64(rapid.IntRange(64, 256<<10).Draw(rt, "max_body_bytes"))
		s.Limits.IdempotencyKeys = rapid.IntRange(1, 5000).Draw(rt, "idempotency_keys")
		roles := map[config.AssignRole]string{}
		for typ, role := range s.Assign.Roles() {
			roles[role] = typ
		}
		rules := decide.For(s)
		value := &tableValue{}
		long := func(prefix string, i int) string {
			return fmt.Sprintf("%s%d%s", prefix, i, strings.Repeat("\x01", rapid.IntRange(0, 255).Draw(rt, "padding")))
		}
		full, evicted := 0, 0
		var members []string
		events := rapid.IntRange(1, 2000).Draw(rt, "events")
		for i := range events {
			ev := decide.Event{Fields: envelope.Fields{Key: "c", EventID: fmt.Sprint("e", i)}, Body: []byte(`{}`), ReceivedAtMs: int64(i)}
			switch rapid.IntRange(0, 2).Draw(rt, "kind") {
			case 0:
				ev.Type, ev.Member = roles[config.RoleMemberAdded], long("member-", i)
				members = append(members, ev.Member)
			case 1:
				if len(members) == 0 {
					continue
				}
				ev.Type, ev.Member, ev.ClientKey = roles[config.RoleSend], members[0], long("client-", i)
			case 2:
				if value.Version == 0 {
					continue
				}
				ev.Type, ev.Member, ev.Seq = roles[config.RoleReceiptRead], long("reader-", i), value.Version
			}
			effects := rules.Decide(&value.Entity, ev)
			evicted += effects.Evicted
			if effects.Decisions[0].Reason == "conversation_full" {
				full++
			}
			// The value only grows until the budget stops it: checked
			// every 100 events and at the end, to keep the test quick.
			if i%100 != 0 && i != events-1 {
				continue
			}
			data, err := entityCodec{}.Encode(value)
			if err != nil {
				rt.Fatal(err)
			}
			if len(data) > config.TableValueBudget {
				rt.Fatalf("after %d events (%d refused as full, %d sends let go) a table value of %d bytes, over %d", i+1, full, evicted, len(data), config.TableValueBudget)
			}
		}
	})
}
