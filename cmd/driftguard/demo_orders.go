package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// orderEvent is an orders webhook: the parent order.created carries
// order_id, its children parent_id.
type orderEvent struct {
	EventID   string         `json:"event_id"`
	EventType string         `json:"event_type"`
	OrderID   string         `json:"order_id,omitempty"`
	ParentID  string         `json:"parent_id,omitempty"`
	Payload   map[string]any `json:"payload"`
}

var demoCarriers = []string{"DHL", "UPS", "PostNL", "La Poste"}

// ordersDemo is a shop's orders, one a round: created, payment received,
// payment captured, shipped. Every other order, the first among them, is
// paid before it exists: the payment provider's webhook (sometimes
// delivered twice, and sometimes with the capture too) comes before the
// shop's order.created, and waits in lost+found until it arrives.
type ordersDemo struct {
	demoSource
	orders int
}

func newOrdersDemo(rng *rand.Rand) *ordersDemo {
	return &ordersDemo{demoSource: newDemoSource(rng)}
}

func (o *ordersDemo) next(now time.Time) []delivery {
	o.orders++
	id := fmt.Sprintf("order-%s-%d", o.run, o.orders)
	amount := 500 + o.rng.IntN(19500)
	event := func(typ, short string, payload map[string]any) delivery {
		ev := orderEvent{EventID: demoID(o.rng, id+"-"+short), EventType: typ, ParentID: id, Payload: payload}
		if typ == "order.created" {
			ev.OrderID, ev.ParentID = id, ""
		}
		return newDelivery(ev.EventID, id, 0, "", ev)
	}
	created := event("order.created", "created", map[string]any{"amount_cents": amount, "currency": "EUR", "placed_at": now.UTC().Format(time.RFC3339)})
	paid := event("order.payment_received", "paid", map[string]any{"amount_cents": amount, "method": "card"})
	captured := event("payment.captured", "captured", map[string]any{"amount_cents": amount})
	shipped := event("order.shipped", "shipped", map[string]any{"carrier": demoCarriers[o.rng.IntN(len(demoCarriers))]})
	if o.orders%2 == 0 {
		return []delivery{created, paid, captured, shipped}
	}
	early := []delivery{paid}
	if o.rng.IntN(3) == 0 {
		early = append(early, paid)
	}
	if o.rng.IntN(2) == 0 {
		return append(early, captured, created, shipped)
	}
	return append(early, created, captured, shipped)
}
