package peer

import (
	"context"
	"net/http"
)

// Handler serves a stream's webhooks the way every peer does: read and
// verify the request (Edge.Read), decode the body into a new E, check it,
// apply it to the store, and answer 202 with the outcome, or 503 when the
// store failed. P is *E, which names the event's id.
func Handler[E any, P interface {
	*E
	EventID() string
}](edge *Edge, check func(P, *Check), apply func(ctx context.Context, ev P, body []byte) (outcome string, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := edge.Read(w, r)
		if !ok {
			return
		}
		ev := P(new(E))
		if !Decode(w, body, ev) {
			return
		}
		var c Check
		if check(ev, &c); c.Failed(w) {
			return
		}
		ctx, cancel := StoreContext(r)
		defer cancel()
		outcome, err := apply(ctx, ev, body)
		if err != nil {
			edge.Unavailable(w, err)
			return
		}
		edge.Accept(w, ev.EventID(), outcome)
	})
}
